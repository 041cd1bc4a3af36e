#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <stdexcept>
#include <utility>

#include <depengine/executors/mpi/mpi_executor.h>
#include <depengine/executors/ready_queue.h>

namespace depengine {

namespace {

// MpiExecutors alive in the process: a second one needs MPI_THREAD_MULTIPLE (two progress threads call MPI at once).
std::atomic<int> g_live_executors{0};
// The collective axes' ordinals taken in this process, counted down from Axis::kMaxOrdinal (see collective_axis()).
std::atomic<std::uint64_t> g_collective_axes{0};

void check(int code, const char* call) {
  if (code != MPI_SUCCESS)
    throw std::runtime_error(std::string("MpiExecutor: ") + call + " failed: " + MpiExecutor::error_string(code));
}

}  // namespace

struct MpiExecutor::Io {
  boost::asio::io_context context{1};
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard{context.get_executor()};
  std::thread thread;
};

MpiExecutor::MpiExecutor(MPI_Comm comm) {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized == 0 || finalized != 0) {
    throw std::logic_error(
        "MpiExecutor: MPI is not initialised (call MPI_Init_thread with MPI_THREAD_SERIALIZED or "
        "higher first)");
  }
  if (comm == MPI_COMM_NULL) throw std::invalid_argument("MpiExecutor: the communicator is MPI_COMM_NULL");
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  if (level < MPI_THREAD_SERIALIZED) {
    throw std::logic_error(
        "MpiExecutor: MPI was initialised below MPI_THREAD_SERIALIZED (the executor calls MPI from "
        "its progress thread): initialise it with MPI_Init_thread(..., MPI_THREAD_SERIALIZED, ...)");
  }
  // acq_rel: pairs with the release decrement in other executors' destructors (the count only gates this check).
  if (g_live_executors.fetch_add(1, std::memory_order_acq_rel) > 0 && level < MPI_THREAD_MULTIPLE) {
    g_live_executors.fetch_sub(1, std::memory_order_release);  // pairs with the acq_rel increments above
    throw std::logic_error(
        "MpiExecutor: another MpiExecutor lives in this process, and two progress threads calling "
        "MPI at once need MPI_THREAD_MULTIPLE");
  }
  try {
    check(MPI_Comm_dup(comm, &comm_), "MPI_Comm_dup");
    check(MPI_Comm_dup(comm, &errors_), "MPI_Comm_dup");
    check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    check(MPI_Comm_set_errhandler(errors_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
    int* tag_ub = nullptr;
    int found = 0;
    check(MPI_Comm_get_attr(errors_, MPI_TAG_UB, &tag_ub, &found), "MPI_Comm_get_attr");
    if (found != 0) tag_limit_ = *tag_ub;
    // The collective axis: every rank takes the next ordinal none of them has used (the highest count among them),
    // so the executors of one communicator name the same axis on every rank, and no two communicators do in a process.
    // relaxed: a count; executors are made by one thread at a time (a collective constructor).
    std::uint64_t taken = g_collective_axes.load(std::memory_order_relaxed);
    check(MPI_Allreduce(MPI_IN_PLACE, &taken, 1, MPI_UINT64_T, MPI_MAX, comm_), "MPI_Allreduce");
    g_collective_axes.store(taken + 1, std::memory_order_relaxed);
    collective_axis_ = Axis::make(0, kClusterMachine, AxisDomain::kCollective, Axis::kMaxOrdinal - taken);
  } catch (...) {
    if (errors_ != MPI_COMM_NULL) MPI_Comm_free(&errors_);
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
    g_live_executors.fetch_sub(1, std::memory_order_release);  // pairs with the acq_rel increment above
    throw;
  }
}

MpiExecutor::~MpiExecutor() {
  stop();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized == 0) {  // after MPI_Finalize, MPI has released them itself
    MPI_Comm_free(&errors_);
    MPI_Comm_free(&comm_);
  }
  g_live_executors.fetch_sub(1, std::memory_order_release);  // pairs with the acq_rel increment of a constructor
}

MpiExecutor& MpiExecutor::of(Executor* executor) {
  auto* mpi = dynamic_cast<MpiExecutor*>(executor);
  if (mpi == nullptr) {
    throw std::invalid_argument(std::string("an MPI op runs on the executor '") +
                                std::string(executor != nullptr ? executor->name() : "none") +
                                "', not on an MpiExecutor: push it with the context of an MpiExecutor");
  }
  return *mpi;
}

std::string MpiExecutor::error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<std::size_t>(length));
}

void MpiExecutor::start(ExecutorHost& host) {
  host_ = &host;
  io_ = std::make_unique<Io>();
  // The progress thread, where requests complete: told as worker -1, no worker of ours.
  const bool observed = host.observes_threads();
  io_->thread = std::thread([this, observed] {
    if (observed) host_->thread_started(*this, -1);
    io_->context.run();
    if (observed) host_->thread_stopped(*this, -1);
  });
  progress_thread_ = io_->thread.get_id();
}

void MpiExecutor::stop() noexcept {
  if (io_ == nullptr || !io_->thread.joinable()) return;
  // The engine stops us once every op has completed: no request is outstanding, so the context runs out of work.
  io_->guard.reset();
  io_->thread.join();
}

void MpiExecutor::submit(Task& task) noexcept {
  if (std::this_thread::get_id() == progress_thread_) {
    local_.push_back(&task);  // the handler running now settles it before returning
    return;
  }
  // relaxed: see poll(); the handler's decrement pairs with nothing either.
  posted_.fetch_add(1, std::memory_order_relaxed);
  boost::asio::post(io_->context, [this, &task] {
    posted_.fetch_sub(1, std::memory_order_relaxed);  // relaxed: see poll()
    run(task);
    settle();
  });
}

// Runs `task` and, on this thread, the op of ours its completion made ready first (a chain stays here); the others it
// made ready go to local_ (submit()).
void MpiExecutor::run(Task& task) noexcept {
  TaskList ready;
  Task* next = &task;
  while (next != nullptr) {
    host_->execute(*next, /*worker=*/0, ready);
    next = take_ready(ready, this);
  }
}

// Runs the ops made ready on this thread since the handler began: every handler ends with it.
void MpiExecutor::settle() noexcept {
  while (Task* task = local_.pop_front()) run(*task);
}

void MpiExecutor::require_progress_thread(const char* call) const {
  if (std::this_thread::get_id() != progress_thread_) {
    throw std::logic_error(std::string("MpiExecutor::") + call +
                           " called outside the executor's progress thread (call it from an op's function on the "
                           "executor, or from a continuation)");
  }
}

void MpiExecutor::when_complete(std::span<const MPI_Request> requests, Continuation then) {
  require_progress_thread("when_complete");
  keep(requests, std::move(then));
  if (!polling_) {
    polling_ = true;
    last_progress_ = std::chrono::steady_clock::now();
    boost::asio::post(io_->context, [this] { poll(); });
  }
}

// Adds a set of requests to poll. noexcept: requests lost to a failed allocation would leave MPI writing into memory
// that their owners free, and every rank waiting.
void MpiExecutor::keep(std::span<const MPI_Request> requests, Continuation then) noexcept {
  outstanding_.push_back(Outstanding{{requests.begin(), requests.end()}, std::move(then)});
}

// One round over the outstanding requests, completing those done; returns whether any was. A set whose test reports
// an error waits until none of its requests is pending (MPI may fail one while others still use their buffers), then
// passes on the first error.
bool MpiExecutor::test_round() noexcept {
  bool progress = false;
  for (std::size_t i = 0; i < outstanding_.size();) {
    auto& entry = outstanding_[i];
    const int n = static_cast<int>(entry.requests.size());
    statuses_.resize(entry.requests.size());  // kept across rounds: allocates only to grow
    int done = 0;
    const int code = MPI_Testall(n, entry.requests.data(), &done, statuses_.data());
    if (code == MPI_ERR_IN_STATUS) {
      bool pending = false;
      for (const MPI_Status& status : statuses_) {
        if (status.MPI_ERROR == MPI_ERR_PENDING) {
          pending = true;
        } else if (status.MPI_ERROR != MPI_SUCCESS && entry.error == MPI_SUCCESS) {
          entry.error = status.MPI_ERROR;
        }
      }
      done = pending ? 0 : 1;
    } else if (code != MPI_SUCCESS) {
      if (entry.error == MPI_SUCCESS) entry.error = code;
      done = 1;
    }
    if (done == 0) {
      ++i;
      continue;
    }
    Continuation then = std::move(entry.then);
    const int result = entry.error;
    outstanding_[i] = std::move(outstanding_.back());
    outstanding_.pop_back();
    then(result);  // may add to outstanding_: this loop indexes, it holds no reference across the call
    progress = true;
  }
  return progress;
}

// Polls while requests are outstanding: round after round in this handler, running the ops the completions made
// ready in between (settle), until work posted from another thread waits in the io_context (then it re-posts itself
// behind that work) or nothing has completed for kSpin (then it yields its core first, and after every round: MPI
// offers no wake-up).
void MpiExecutor::poll() noexcept {
  bool idle = false;
  for (;;) {
    const bool progress = test_round();
    settle();
    if (outstanding_.empty()) {
      polling_ = false;
      return;
    }
    const auto now = std::chrono::steady_clock::now();
    if (progress) last_progress_ = now;
    idle = now - last_progress_ >= kSpin;
    // relaxed: the count only decides when to step back into the io_context; the post itself publishes the work.
    if (idle || posted_.load(std::memory_order_relaxed) > 0) break;
  }
  if (idle) std::this_thread::yield();
  boost::asio::post(io_->context, [this] { poll(); });
}

std::uint64_t MpiExecutor::take_ticket() noexcept {
  // relaxed: the ticket's value orders collectives; the pushes that carry it to the progress thread publish it.
  return tickets_.fetch_add(1, std::memory_order_relaxed);
}

void MpiExecutor::start_in_order(std::uint64_t ticket, Start start) {
  require_progress_thread("start_in_order");
  if (ticket != next_start_) {
    hold(ticket, std::move(start));
    return;
  }
  if (start) start();
  ++next_start_;
  for (auto it = held_.begin(); it != held_.end() && it->first == next_start_; it = held_.erase(it)) {
    if (it->second) it->second();
    ++next_start_;
  }
}

// Keeps an early ticket's start. noexcept: a start lost to a failed allocation would stop every later collective.
void MpiExecutor::hold(std::uint64_t ticket, Start start) noexcept { held_.emplace(ticket, std::move(start)); }

void MpiExecutor::post(Start start) {
  if (io_ == nullptr) throw std::logic_error("MpiExecutor::post before the executor was started");
  posted_.fetch_add(1, std::memory_order_relaxed);  // relaxed: see poll()
  boost::asio::post(io_->context, [this, start = std::move(start)]() mutable {
    posted_.fetch_sub(1, std::memory_order_relaxed);  // relaxed: see poll()
    start();
    settle();
  });
}

void MpiExecutor::post_in_order(std::uint64_t ticket, Start start) {
  if (io_ == nullptr) throw std::logic_error("MpiExecutor::post_in_order before the executor was started");
  posted_.fetch_add(1, std::memory_order_relaxed);  // relaxed: see poll()
  boost::asio::post(io_->context, [this, ticket, start = std::move(start)]() mutable {
    posted_.fetch_sub(1, std::memory_order_relaxed);  // relaxed: see poll()
    start_in_order(ticket, std::move(start));
    settle();
  });
}

void MpiExecutor::exchange_errors(std::uint64_t ticket, int failures, RankError& flag, Continuation then) {
  require_progress_thread("exchange_errors");
  struct Exchange {
    RankError mine;
    std::vector<RankError> theirs;
    std::vector<MPI_Request> requests;
  };
  auto exchange = std::make_unique<Exchange>();
  flag.sender = rank_;
  exchange->mine = flag;
  const int tag = static_cast<int>(ticket % (static_cast<std::uint64_t>(tag_limit_) + 1));
  constexpr int kBytes = static_cast<int>(sizeof(RankError));
  int code = MPI_SUCCESS;
  if (flag.failed()) {
    for (int to = 0; to < size_ && code == MPI_SUCCESS; ++to) {
      if (to == rank_) continue;
      code = MPI_Isend(&exchange->mine, kBytes, MPI_BYTE, to, tag, errors_, &exchange->requests.emplace_back());
    }
  }
  exchange->theirs.resize(static_cast<std::size_t>(failures - (flag.failed() ? 1 : 0)));
  for (RankError& from : exchange->theirs) {
    if (code != MPI_SUCCESS) break;
    code = MPI_Irecv(&from, kBytes, MPI_BYTE, MPI_ANY_SOURCE, tag, errors_, &exchange->requests.emplace_back());
  }
  if (code != MPI_SUCCESS) exchange->requests.pop_back();  // the one that failed to start
  // Even after a failed start, the messages that did start are waited for: their buffers are the exchange's.
  const std::vector<MPI_Request> requests = exchange->requests;
  keep(requests, [raw = exchange.release(), &flag, code, then = std::move(then)](int result) mutable {
    const std::unique_ptr<Exchange> done(raw);
    for (const RankError& from : done->theirs) {
      if (from.precedes(flag)) flag = from;
    }
    then(code != MPI_SUCCESS ? code : result);
  });
}

}  // namespace depengine
