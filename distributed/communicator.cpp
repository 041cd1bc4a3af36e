#include <algorithm>
#include <array>
#include <climits>
#include <cstddef>
#include <cstring>
#include <exception>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <depengine/distributed/communicator.h>
#include <depengine/distributed/remote_error.h>

namespace depengine::detail {

// What travels ahead of a message's data: the sender's error flag, and what its op knew had completed (its
// RunContext::waits), which the receiver learns (Completion::operator()(error, learned)). Sent up to the last entry
// used; received whole.
struct MessageHeader {
  RankError flag{};
  std::uint32_t entries = 0;  // of `frontier`, at most kMaxEngineAxes
  std::uint32_t unused = 0;
  std::array<FrontierEntry, kMaxEngineAxes> frontier;

  [[nodiscard]] int bytes() const noexcept {
    return static_cast<int>(offsetof(MessageHeader, frontier) + entries * sizeof(FrontierEntry));
  }
};

static_assert(sizeof(MessageHeader) == 776, "communicator.h states the header's size");

// One op's state, from its push until its requests complete (owned by the op's function, then by the continuation).
struct CommunicatorCall {
  enum class Kind { kAllReduce, kBroadcast, kSend, kRecv };

  Kind kind;
  HostRegion region;
  MPI_Datatype type = MPI_BYTE;
  int count = 0;  // elements of `type`
  int peer = 0;   // the root, destination or source
  int tag = 0;
  std::uint64_t ticket = 0;  // collectives: the place in the start order
  FailureSlot slot{};        // all-reduce: the failure count as an element of the data's type
  std::size_t element_bytes = 1;
  MessageHeader header{};    // flag: this rank's input error, then the one every rank learned (or the sender's)
  bool input_error = false;  // this rank's variable carries an error already (it keeps it: a variable keeps its first)
  // Collectives: how many ranks' inputs carried an error (this rank counts 1 or 0), learned with the data.
  int failures = 0;
  void* data = nullptr;           // the memory, once the op runs
  std::vector<std::byte> packed;  // a small all-reduce: the data, then the failure count, reduced as one
  MpiExecutor* mpi = nullptr;     // not owned: the engine's
  bool started = false;           // the op's function ran
  std::array<MPI_Request, 2> requests{MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  std::optional<Completion> done;
  std::vector<std::byte> scratch;  // stands in for a Buffer whose allocation failed (its variable carries the error)

  [[nodiscard]] bool collective() const noexcept { return kind == Kind::kAllReduce || kind == Kind::kBroadcast; }
};

}  // namespace depengine::detail

namespace depengine {

using detail::CommunicatorCall;

namespace {

// Fills `flag` from the error the op runs despite: a RemoteError keeps naming its rank.
void describe(const std::exception_ptr* input_error, int rank, RankError& flag) {
  if (input_error == nullptr || *input_error == nullptr) return;
  try {
    std::rethrow_exception(*input_error);
  } catch (const RemoteError& e) {
    flag.set(e.rank(), e.message());
  } catch (const std::exception& e) {
    flag.set(rank, e.what());
  } catch (...) {
    flag.set(rank, "an exception that is not a std::exception");
  }
}

const char* call_name(int kind) {
  static constexpr std::array<const char*, 4> kNames{"MPI_Iallreduce", "MPI_Ibcast", "MPI_Isend", "MPI_Irecv"};
  return kNames[static_cast<std::size_t>(kind)];
}

// What a completed op learned: a collective, its one entry on the collective axis; a receive, its sender's frontier.
std::span<const FrontierEntry> learned_by(CommunicatorCall& c, FrontierEntry& collective) {
  using Kind = CommunicatorCall::Kind;
  if (c.collective()) {
    collective = FrontierEntry{c.mpi->collective_axis(), c.ticket + 1};
    return {&collective, 1};
  }
  if (c.kind == Kind::kRecv) return {c.header.frontier.data(), std::min<std::size_t>(c.header.entries, kMaxEngineAxes)};
  return {};
}

// Completes the op: with MPI's error, the error every rank learned, or success; with what it learned (learned_by)
// when the communication itself succeeded.
void complete(std::unique_ptr<CommunicatorCall> call, int code) {
  if (!call->done) return;  // an op that never ran took part for the other ranks' sake: nothing to complete
  Completion done = *call->done;
  FrontierEntry collective{};
  if (code != MPI_SUCCESS) {
    done(std::make_exception_ptr(std::runtime_error(std::string(call_name(static_cast<int>(call->kind))) +
                                                    " failed: " + MpiExecutor::error_string(code))));
  } else if (call->header.flag.failed() && !call->input_error && call->kind != CommunicatorCall::Kind::kSend) {
    done(std::make_exception_ptr(RemoteError(call->header.flag.rank, std::string(call->header.flag.message()))),
         learned_by(*call, collective));
  } else {
    // A rank whose variable carries an error already keeps that one (a second error of the op would only be reported
    // again at shutdown); a sender mutates nothing, its receiver learns the error from the flag.
    done(nullptr, learned_by(*call, collective));
  }
}

// Once the op's requests have completed: a collective that found failing ranks first learns the lowest one's error
// (MpiExecutor::exchange_errors); then the op completes.
void finish(std::unique_ptr<CommunicatorCall> call, int code) {
  CommunicatorCall& c = *call;
  if (code == MPI_SUCCESS && !c.packed.empty()) {
    std::memcpy(c.data, c.packed.data(), c.region.bytes());
    c.failures = c.slot.read(c.packed.data() + c.region.bytes());
  }
  if (code != MPI_SUCCESS || !c.collective() || c.failures == 0) {
    complete(std::move(call), code);
    return;
  }
  c.mpi->exchange_errors(c.ticket, c.failures, c.header.flag, [raw = call.release()](int result) {
    complete(std::unique_ptr<CommunicatorCall>(raw), result);
  });
}

// Resolves the memory the op's MPI calls use, allocating what they need, before the calls start (so that starting
// them allocates nothing). An op that never ran (`unrun`) uses scratch memory, never the region's. A collective also
// sums the ranks' failure counts: in the same buffer as the data for an all-reduce of at most kPackedBytes (one
// collective), beside it otherwise.
void prepare(CommunicatorCall& c, bool unrun) {
  constexpr std::size_t kPackedBytes = 16384;
  c.data = unrun ? nullptr : c.region.data();
  if (c.data == nullptr && c.region.bytes() > 0) {  // a failed allocation, or an op that never ran
    c.scratch.resize(c.region.bytes());
    c.data = c.scratch.data();
  }
  c.failures = c.header.flag.failed() ? 1 : 0;
  if (c.kind == CommunicatorCall::Kind::kAllReduce && c.region.bytes() <= kPackedBytes) {
    c.packed.resize(c.region.bytes() + c.element_bytes);
    std::memcpy(c.packed.data(), c.data, c.region.bytes());
    c.slot.write(c.packed.data() + c.region.bytes(), c.failures);
  }
}

// Starts the op's MPI calls (collectives in ticket order) on the progress thread. If one fails to start, the ones
// that did are still waited for (their buffers are the call's) before the op completes with the error.
void start(MpiExecutor& mpi, std::unique_ptr<CommunicatorCall> call) noexcept {
  using Kind = CommunicatorCall::Kind;
  CommunicatorCall& c = *call;
  MPI_Request* r = c.requests.data();
  int code = MPI_SUCCESS;
  int started = 0;
  // Each call fills r[started] only when it succeeds.
  auto next = [&](int result) {
    code = result;
    if (result == MPI_SUCCESS) ++started;
    return result == MPI_SUCCESS;
  };
  switch (c.kind) {
    case Kind::kAllReduce:
      if (!c.packed.empty()) {
        next(MPI_Iallreduce(MPI_IN_PLACE, c.packed.data(), c.count + 1, c.type, MPI_SUM, mpi.comm(), &r[0]));
      } else if (next(MPI_Iallreduce(MPI_IN_PLACE, &c.failures, 1, MPI_INT, MPI_SUM, mpi.comm(), &r[0]))) {
        next(MPI_Iallreduce(MPI_IN_PLACE, c.data, c.count, c.type, MPI_SUM, mpi.comm(), &r[1]));
      }
      break;
    case Kind::kBroadcast:
      if (next(MPI_Iallreduce(MPI_IN_PLACE, &c.failures, 1, MPI_INT, MPI_SUM, mpi.comm(), &r[0]))) {
        next(MPI_Ibcast(c.data, c.count, c.type, c.peer, mpi.comm(), &r[1]));
      }
      break;
    case Kind::kSend:  // the header ahead of the data: one thread posts both, so they stay in order
      if (next(MPI_Isend(&c.header, c.header.bytes(), MPI_BYTE, c.peer, c.tag, mpi.comm(), &r[0]))) {
        next(MPI_Isend(c.data, c.count, c.type, c.peer, c.tag, mpi.comm(), &r[1]));
      }
      break;
    case Kind::kRecv:
      if (next(MPI_Irecv(&c.header, static_cast<int>(sizeof(detail::MessageHeader)), MPI_BYTE, c.peer, c.tag,
                         mpi.comm(), &r[0]))) {
        next(MPI_Irecv(c.data, c.count, c.type, c.peer, c.tag, mpi.comm(), &r[1]));
      }
      break;
  }
  const std::span<const MPI_Request> requests(r, static_cast<std::size_t>(started));
  if (code != MPI_SUCCESS) {
    mpi.when_complete(requests,
                      [raw = call.release(), code](int) { complete(std::unique_ptr<CommunicatorCall>(raw), code); });
    return;
  }
  mpi.when_complete(requests,
                    [raw = call.release()](int result) { finish(std::unique_ptr<CommunicatorCall>(raw), result); });
}

// The op function's hold on its call. The other ranks start their side of the communication whatever happens here, so
// an op destroyed without running (its push failed, or the engine cancelled it) still takes part, in its ticket's
// place, on scratch memory and with this rank's failure flag: the other ranks' outputs then carry the error, and the
// collectives pushed after it keep their pairing.
struct TakePartUnrun {
  void operator()(CommunicatorCall* call) const noexcept {
    if (call->started) {
      delete call;
      return;
    }
    call->started = true;
    MpiExecutor& mpi = *call->mpi;
    call->header.flag.set(mpi.rank(), "its communication op did not run (cancelled, or its push failed)");
    prepare(*call, /*unrun=*/true);  // an allocation failure here terminates: the other ranks would wait for ever
    auto take_part = [&mpi, raw = call] { start(mpi, std::unique_ptr<CommunicatorCall>(raw)); };
    if (call->collective()) {
      mpi.post_in_order(call->ticket, std::move(take_part));
    } else {
      mpi.post(std::move(take_part));
    }
  }
};
using HeldCall = std::unique_ptr<CommunicatorCall, TakePartUnrun>;

}  // namespace

Communicator::Communicator(Engine& engine, ExecutorRef executor) : engine_(&engine), index_(executor) {
  mpi_ = dynamic_cast<MpiExecutor*>(&engine.executor(executor));
  if (mpi_ == nullptr) {
    throw Error("Communicator: executor " + std::to_string(executor) + " of the engine is '" +
                std::string(engine.executor(executor).name()) + "', not an MpiExecutor");
  }
}

void Communicator::check_rank(int rank, const char* what) const {
  if (rank < 0 || rank >= size()) {
    throw Error(std::string("Communicator: ") + what + " " + std::to_string(rank) +
                " is not a rank of a communicator of " + std::to_string(size()));
  }
}

void Communicator::check_tag(int tag, const char* call) const {
  if (tag < 0 || tag > mpi_->tag_limit()) {
    throw Error(std::string("Communicator::") + call + ": tag " + std::to_string(tag) + " is outside [0, " +
                std::to_string(mpi_->tag_limit()) + "] (MPI_TAG_UB)");
  }
}

namespace {

int count_of(std::size_t bytes, std::size_t element_bytes, const char* call) {
  if (bytes % element_bytes != 0) {
    throw Error(std::string("Communicator::") + call + ": " + std::to_string(bytes) +
                " bytes are not a whole number of " + std::to_string(element_bytes) + "-byte elements");
  }
  if (bytes / element_bytes > static_cast<std::size_t>(INT_MAX)) {
    throw Error(std::string("Communicator::") + call + ": " + std::to_string(bytes / element_bytes) +
                " elements exceed MPI's count limit (INT_MAX)");
  }
  return static_cast<int>(bytes / element_bytes);
}

}  // namespace

void Communicator::all_reduce(const HostRegion& region, std::size_t element_bytes, MPI_Datatype type,
                              detail::FailureSlot slot, OpName name) {
  auto call = std::make_unique<CommunicatorCall>(CommunicatorCall{.kind = CommunicatorCall::Kind::kAllReduce,
                                                                  .region = region,
                                                                  .type = type,
                                                                  .slot = slot,
                                                                  .element_bytes = element_bytes});
  call->count = count_of(region.bytes(), element_bytes, "AllReduceSum");
  push(std::move(call), /*reads=*/false, std::move(name));
}

void Communicator::Broadcast(const HostRegion& region, int root, OpName name) {
  check_rank(root, "Broadcast: root");
  auto call = std::make_unique<CommunicatorCall>(
      CommunicatorCall{.kind = CommunicatorCall::Kind::kBroadcast, .region = region, .peer = root});
  call->count = count_of(region.bytes(), 1, "Broadcast");
  push(std::move(call), /*reads=*/root == rank(), std::move(name));
}

void Communicator::Send(const HostRegion& region, int dest, int tag, OpName name) {
  message(region, dest, tag, /*send=*/true, std::move(name));
}

void Communicator::Recv(const HostRegion& region, int source, int tag, OpName name) {
  message(region, source, tag, /*send=*/false, std::move(name));
}

// A send (reads the region) or a receive (mutates it), after checking the peer and the tag.
void Communicator::message(const HostRegion& region, int peer, int tag, bool send, OpName name) {
  const char* call_name = send ? "Send" : "Recv";
  check_rank(peer, send ? "Send: destination" : "Recv: source");
  check_tag(tag, call_name);
  const auto kind = send ? CommunicatorCall::Kind::kSend : CommunicatorCall::Kind::kRecv;
  auto call =
      std::make_unique<CommunicatorCall>(CommunicatorCall{.kind = kind, .region = region, .peer = peer, .tag = tag});
  call->count = count_of(region.bytes(), 1, call_name);
  push(std::move(call), /*reads=*/send, std::move(name));
}

// Pushes the op: no_skip, so that a rank with an input error still takes part and sends its flag.
void Communicator::push(std::unique_ptr<CommunicatorCall> call, bool reads, OpName name) {
  if (engine_->Capturing()) {
    throw Error(
        "Communicator: communication cannot be captured (a replayed collective could not keep its place in "
        "the order every rank starts collectives in)");
  }
  const Var var = call->region.var();
  call->mpi = mpi_;
  if (call->collective()) call->ticket = mpi_->take_ticket();
  PushOptions options{.context = {.executor = index_}, .name = std::move(name), .no_skip = true};
  // If the push throws, the function is destroyed unrun, and its hold takes part on scratch memory (TakePartUnrun).
  auto fn = [call = HeldCall(call.release())](const RunContext& ctx, Completion done) mutable {
    MpiExecutor& mpi = MpiExecutor::of(ctx.executor);
    describe(ctx.input_error, mpi.rank(), call->header.flag);
    if (call->kind == CommunicatorCall::Kind::kSend && ctx.waits != nullptr) {  // what the receiver will learn
      for (const FrontierEntry& entry : *ctx.waits) {
        if (call->header.entries == call->header.frontier.size()) break;  // not reached: a frontier holds as many
        call->header.frontier[call->header.entries++] = entry;
      }
    }
    call->input_error = call->header.flag.failed();
    prepare(*call, /*unrun=*/false);  // may throw (out of memory): the op then fails, and its hold takes part
    call->done.emplace(done);
    call->started = true;
    std::unique_ptr<CommunicatorCall> owned(call.release());
    if (!owned->collective()) {
      start(mpi, std::move(owned));
      return;
    }
    const std::uint64_t place = owned->ticket;
    mpi.start_in_order(place, [&mpi, raw = owned.release()] { start(mpi, std::unique_ptr<CommunicatorCall>(raw)); });
  };
  if (reads) {
    engine_->PushAsync(std::move(fn), {var}, {}, options);
  } else {
    engine_->PushAsync(std::move(fn), {}, {var}, options);
  }
}

}  // namespace depengine
