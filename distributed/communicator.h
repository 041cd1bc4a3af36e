// Communication as engine ops: all-reduce, broadcast, send and receive of host memory across the ranks of an MPI
// communicator, ordered with everything else by the variables they use.
//
//   MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
//   depengine::EngineOptions options;
//   options.executors.push_back(std::make_unique<depengine::ThreadPoolExecutor>());  // 0: compute
//   options.executors.push_back(std::make_unique<depengine::MpiExecutor>());         // 1: communication
//   depengine::Engine engine(std::move(options));
//   depengine::Communicator world(engine, 1);
//   engine.Push([&] { backward(grad); }, {}, {g});
//   world.AllReduceSum<float>({g, grad.data(), grad.size() * sizeof(float)});  // after backward, before the update
//   engine.Push([&] { update(w, grad); }, {g}, {w});
//
// Each call pushes one asynchronous op to the MpiExecutor (executors/mpi/mpi_executor.h): it starts the MPI call on
// the executor's progress thread once its variable allows, and completes when the call has. So communication overlaps
// whatever compute does not use its variable, and successors of it run as soon as it completes.
//
// Order of collectives. AllReduceSum and Broadcast are collectives: every rank must call them in the same order, and
// they are started in that order (their push order) on every rank, whatever order their inputs become ready in (a
// later collective whose input is ready waits to start, never compute). Push a communicator's collectives from one
// thread at a time. Send and Recv are not ordered with each other by the communicator: two messages between the same
// pair of ranks with the same tag match in the order their ops start, so give messages in flight together distinct
// tags, or order their ops through a variable.
//
// Errors, never a hang. Every op is pushed with no_skip: a rank whose input carries an error still takes part. A
// collective sums a count of failing ranks with its data (in the same buffer for an all-reduce of at most 16 KiB, in a
// second all-reduce of one int beside it otherwise); only when the count is not 0 do the ranks exchange their errors'
// flags (executors/mpi/rank_error.h, MpiExecutor::exchange_errors). A message carries its sender's flag ahead of it.
// Then on every rank the collective's output variable (a message's receiver) carries a RemoteError naming the failing
// rank and its error's message, which WaitForVar rethrows (a broadcast's root only reads its variable: there the error
// reaches WaitForAll); later communication is unaffected. An op that never runs on this rank (its push failed on this
// rank only, or the engine cancelled it: EngineOptions::cancel_on_destruction) still takes part, on scratch memory,
// flagged as failed, so the other ranks neither wait for it nor pair the next collective with it. A failing MPI call is
// an error of the op (std::runtime_error with MPI's message); it is local, and the other ranks may then wait for the
// part it did not start. A rank that dies ends the job (MPI aborts it). These ops take no CancelScope.
//
// Frontiers across ranks. A message carries, in its header, what its send op knew had completed (RunContext::waits:
// on an engine with a stream executor, the signals of the ops it depends on, such as the stream write of its data);
// the receive completes with those entries (Completion::operator()(error, learned)), so the receiving engine records
// them as completed and its later stream ops find them so, with no device wait, and pass them on. A collective
// completes with one entry, (MpiExecutor::collective_axis(), its ticket + 1), the same on every rank. Give each rank's
// stream executor its rank as machine index (StreamExecutorOptions::machine), so that the ranks' axes never alias.
//
// Happens-before: writes to the memory made by ops that the communication op depends on are what it sends; its
// writes (the reduced or received data) are visible to every op pushed later that uses its variable.
// Thread safety: calls from any thread (collectives: one thread at a time, see above). Lifetime: the Communicator must
// not outlive its engine; the memory must live until the op has completed (a wait on its variable), a Buffer is kept
// by the op. Failure: misuse throws Error and pushes nothing (checked before a collective takes its place). Not inside
// Engine::Capture (a replayed collective could not keep its place in the order): Error. Cost: one allocation per call
// (the op's state; a small all-reduce another, its packed copy) and the executor's post; on the wire, MPI's call, with
// one more element (a small all-reduce: two copies of the data on the host) or a one-int all-reduce beside it (a large
// one, a broadcast), or a header ahead of a message (264 bytes and 16 per frontier entry; received into 776 bytes).
#pragma once

#include <mpi.h>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include <depengine/buffers/buffer.h>
#include <depengine/engine/engine.h>
#include <depengine/executors/mpi/mpi_executor.h>

namespace depengine {

namespace detail {
struct CommunicatorCall;  // one op's state (communicator.cpp)

// How a small all-reduce carries its failure count: as one more element of the data's type, summed with the data.
struct FailureSlot {
  void (*write)(void* slot, int failures) noexcept = nullptr;
  int (*read)(const void* slot) noexcept = nullptr;
};

template <class T>
[[nodiscard]] constexpr FailureSlot failure_slot_of() noexcept {
  return {[](void* slot, int failures) noexcept {
            const auto value = static_cast<T>(failures);
            std::memcpy(slot, &value, sizeof(T));
          },
          [](const void* slot) noexcept {
            T value{};
            std::memcpy(&value, slot, sizeof(T));
            return static_cast<int>(value);
          }};
}
}  // namespace detail

// Host memory that a communication op reads or writes, with the variable that orders its users: memory the caller
// owns, or a Buffer's block (from Buffers on a CPU executor or on host streams: MPI is handed host memory only).
class HostRegion {
 public:
  // Memory the caller owns: `bytes` at `data`, ordered by `var`. The const form is for what Send reads.
  HostRegion(Var var, void* data, std::size_t bytes) : var_(var), data_(data), bytes_(bytes) {}
  HostRegion(Var var, const void* data, std::size_t bytes)  // what Send reads
      : var_(var), data_(const_cast<void*>(data)), bytes_(bytes) {}
  // The whole block of `buffer`, or its first `bytes`. The block's address is taken when the op runs.
  HostRegion(const Buffer& buffer) : HostRegion(buffer, buffer.bytes()) {}  // NOLINT(google-explicit-constructor)
  // Throws Error if `bytes` exceeds the buffer's.
  HostRegion(const Buffer& buffer, std::size_t bytes) : var_(buffer.var()), buffer_(buffer), bytes_(bytes) {
    if (bytes > buffer.bytes()) {
      throw Error("HostRegion: " + std::to_string(bytes) + " bytes of a buffer of " + std::to_string(buffer.bytes()));
    }
  }

  // The variable that orders the region's users, and the region's size in bytes.
  [[nodiscard]] Var var() const noexcept { return var_; }
  [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }
  // The memory: only inside an op that uses var() (a Buffer's block is known, or taken, then: Buffer::data()).
  [[nodiscard]] void* data() const { return buffer_.var().is_null() ? data_ : buffer_.data(); }

 private:
  Var var_;
  void* data_ = nullptr;
  Buffer buffer_;
  std::size_t bytes_ = 0;
};

// The element types AllReduceSum sums (MPI_SUM on their MPI type).
template <class T>
concept SummableElement = std::same_as<T, float> || std::same_as<T, double> || std::same_as<T, std::int32_t> ||
    std::same_as<T, std::int64_t> || std::same_as<T, std::uint32_t> || std::same_as<T, std::uint64_t>;

class Communicator {
 public:
  // The communicator of engine.executor(executor) (its ExecutorId or index), which must be an MpiExecutor (else Error).
  Communicator(Engine& engine, ExecutorRef executor);

  // This process's rank and the communicator's size (MPI_Comm_rank, MPI_Comm_size), and the executor it runs on.
  [[nodiscard]] int rank() const noexcept { return mpi_->rank(); }
  [[nodiscard]] int size() const noexcept { return mpi_->size(); }
  [[nodiscard]] MpiExecutor& executor() const noexcept { return *mpi_; }

  // Sums region's elements (region.bytes() / sizeof(T) of them) across the ranks, in place: afterwards every rank
  // holds the sum. A collective; mutates region.var(). The summation order is MPI's (Open MPI's is fixed for a given
  // communicator size and count, not the rank order): integers and exactly representable sums are bitwise equal to a
  // serial sum. Throws Error if region.bytes() is not a multiple of sizeof(T) or exceeds MPI's count limit.
  template <SummableElement T>
  void AllReduceSum(const HostRegion& region, OpName name = "all-reduce") {
    all_reduce(region, sizeof(T), type_of<T>(), detail::failure_slot_of<T>(), std::move(name));
  }
  // Copies root's region to every rank. A collective; reads region.var() on the root, mutates it elsewhere. Throws
  // Error for a root outside [0, size()).
  void Broadcast(const HostRegion& region, int root, OpName name = "broadcast");
  // Sends region to rank `dest` with `tag` (0 to executor().tag_limit(), else Error); reads region.var(). Completes
  // when MPI no longer needs the memory.
  void Send(const HostRegion& region, int dest, int tag, OpName name = "send");
  // Receives into region a message from rank `source` sent with `tag`; mutates region.var(). The message must not be
  // longer than region.bytes() (MPI then fails the receive: an error of the op); a shorter one fills the front.
  void Recv(const HostRegion& region, int source, int tag, OpName name = "recv");

 private:
  template <class T>
  static MPI_Datatype type_of() noexcept {
    if constexpr (std::same_as<T, float>) return MPI_FLOAT;
    if constexpr (std::same_as<T, double>) return MPI_DOUBLE;
    if constexpr (std::same_as<T, std::int32_t>) return MPI_INT32_T;
    if constexpr (std::same_as<T, std::int64_t>) return MPI_INT64_T;
    if constexpr (std::same_as<T, std::uint32_t>) return MPI_UINT32_T;
    if constexpr (std::same_as<T, std::uint64_t>) return MPI_UINT64_T;
  }
  void all_reduce(const HostRegion& region, std::size_t element_bytes, MPI_Datatype type, detail::FailureSlot slot,
                  OpName name);
  void message(const HostRegion& region, int peer, int tag, bool send, OpName name);
  void push(std::unique_ptr<detail::CommunicatorCall> call, bool reads, OpName name);
  void check_rank(int rank, const char* what) const;
  void check_tag(int tag, const char* call) const;

  Engine* engine_;     // not owned
  ExecutorRef index_;  // the MpiExecutor among the engine's executors
  MpiExecutor* mpi_;   // not owned: the engine's
};

}  // namespace depengine
