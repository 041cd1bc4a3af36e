// The communication executor: runs ops that start non-blocking MPI calls, and completes them when their requests do.
//
// An engine takes an MpiExecutor like any other executor (EngineOptions::executors); ops pushed to it, usually
// asynchronous ones (PushAsync), run on its progress thread. There an op's function finds the executor through its
// RunContext (MpiExecutor::of(ctx.executor)), starts MPI calls on comm() (MPI_Iallreduce, MPI_Isend, ...) and hands
// their requests to when_complete() with a continuation that calls the op's Completion. The progress thread, a
// Boost.Asio io_context as the stream executor's poller, runs the ops handed to it and, between them, tests the
// outstanding requests (MPI_Testall): no engine worker ever blocks in MPI. distributed/communicator.h builds the
// common collectives and messages on this.
//
// Threading level. Every MPI call of the executor is made on its progress thread, except those of the constructor
// (MPI_Comm_dup, queries, and an MPI_Allreduce that agrees on the collective axis) and the destructor (MPI_Comm_free),
// which run on the calling thread, and error_string(). Construct a process's MpiExecutors from one thread at a time
// (their collective axes are numbered in construction order).
// So MPI must be initialised with at least MPI_THREAD_SERIALIZED, and while the executor lives the application makes
// no MPI call of its own concurrently with it (MPI_THREAD_MULTIPLE lifts that, and is needed for two MpiExecutors
// in one process). The constructor checks the level.
//
// Order of collectives. MPI requires every rank to start the collectives of a communicator in the same order, but
// ready ops run in whatever order their inputs allow. take_ticket() numbers collectives when they are pushed (push
// order); start_in_order() starts them in ticket order on the progress thread, holding one back while an earlier
// ticket has not started. Local compute is never held back, only the starts of later collectives; they stay in flight
// together once started.
//
// Thread safety: take_ticket(), post_in_order() and post() from any thread; when_complete(), start_in_order() and
// exchange_errors() only on the progress thread (inside an op's function or a continuation; they throw
// std::logic_error elsewhere). Executor methods as executor.h says.
// Failure on the progress thread: an allocation that fails there (keeping requests, holding a start back) terminates
// the process, since the requests it would lose track of would leave every rank waiting.
// Ownership: duplicates the communicator twice (MPI_Comm_dup: one for the ops, one for error exchanges) and frees the
// duplicates when destroyed; the engine owns the
// executor. Failure: an MPI call that fails reports its error code to the continuation (the duplicate's error handler
// is MPI_ERRORS_RETURN); a rank that dies takes the job down with it (MPI aborts), as MPI does.
// Cost: a submit from another thread is one post to the io_context; ops made ready on the progress thread (a chain of
// collectives on one variable) run there without one. Each poll round tests every outstanding set of requests, and
// the poller keeps polling while any is outstanding, yielding its core between rounds once none has completed for
// kSpin.
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <depengine/executors/executor.h>
#include <depengine/executors/mpi/rank_error.h>
#include <depengine/frontier/axis.h>
#include <depengine/support/small_function.h>

namespace depengine {

class MpiExecutor final : public Executor {
 public:
  // Called once with MPI_SUCCESS, or with the error code of the first request that failed, when every request handed
  // to when_complete() has completed. Runs on the progress thread; must not throw.
  using Continuation = support::SmallFunction<void(int), 48>;
  // A collective's start, run by start_in_order() on the progress thread; must not throw.
  using Start = support::SmallFunction<void(), 48>;

  // How long the poller polls without a completion before it yields its core between rounds (as the thread pool spins
  // before parking: most small messages complete sooner, and a yield costs a system call, or a time slice when other
  // threads are runnable).
  static constexpr std::chrono::microseconds kSpin{50};

  // Duplicates `comm` (a collective: every rank of comm constructs its executor at the same point of its collectives
  // on comm). Throws std::logic_error if MPI is not initialised (or already finalised), or was initialised below
  // MPI_THREAD_SERIALIZED, or if another MpiExecutor lives and the level is below MPI_THREAD_MULTIPLE;
  // std::invalid_argument for MPI_COMM_NULL; std::runtime_error if MPI fails.
  explicit MpiExecutor(MPI_Comm comm = MPI_COMM_WORLD);
  ~MpiExecutor() override;

  // The MpiExecutor `executor` is (an op's RunContext::executor). Throws std::invalid_argument if it is none, so that
  // an op meant for MPI but pushed to another executor fails with a clear error.
  [[nodiscard]] static MpiExecutor& of(Executor* executor);

  [[nodiscard]] std::string_view name() const noexcept override { return "mpi"; }
  // The executor's duplicate of the communicator it was made with: start the ops' MPI calls on it.
  [[nodiscard]] MPI_Comm comm() const noexcept { return comm_; }
  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }

  // The machine index (Axis::machine) of the axes that name the whole job rather than one process.
  static constexpr std::uint8_t kClusterMachine = 255;
  // The communicator's collective axis (AxisDomain::kCollective, machine kClusterMachine, an ordinal counted down from
  // Axis::kMaxOrdinal that the ranks agree on at construction): the same value on every rank. Collective k of the
  // executor (ticket k) completes epoch k + 1 on it, so what follows a collective on any rank knows it as one entry,
  // however many ranks took part (distributed/communicator.h). Collectives may complete out of order: an epoch says
  // that its collective completed, not the ones before it.
  [[nodiscard]] Axis collective_axis() const noexcept { return collective_axis_; }

  void start(ExecutorHost& host) override;
  void submit(Task& task) noexcept override;
  // Ops run only on the progress thread (every MPI call is made there), so a waiting thread cannot help.
  [[nodiscard]] bool try_help() noexcept override { return false; }
  void stop() noexcept override;
  // Its ops need the progress thread: DEPENGINE_ENGINE_TYPE=NaiveEngine keeps it.
  [[nodiscard]] bool inline_replaceable() const noexcept override { return false; }

  // Progress thread: calls `then` once every request of `requests` (copied; they stay the executor's) has completed,
  // with MPI_SUCCESS or the first error a request completed with.
  void when_complete(std::span<const MPI_Request> requests, Continuation then);

  // Any thread: the next collective ticket (0, 1, 2, ...). Every ticket taken must be passed to start_in_order() or
  // post_in_order() exactly once, or later collectives never start.
  [[nodiscard]] std::uint64_t take_ticket() noexcept;
  // Progress thread: runs `start` once every earlier ticket has started (at once if they have). An empty `start` only
  // passes the ticket.
  void start_in_order(std::uint64_t ticket, Start start);
  // Any thread: start_in_order(ticket, start), posted to the progress thread.
  void post_in_order(std::uint64_t ticket, Start start);
  // Any thread: runs `start` on the progress thread.
  void post(Start start);
  // The largest tag MPI accepts on comm() (MPI_TAG_UB, at least 32767).
  [[nodiscard]] int tag_limit() const noexcept { return tag_limit_; }

  // Progress thread: the error exchange of a collective (ticket `ticket`) that found `failures` > 0 ranks failing, this
  // one among them if flag.failed(). A failing rank sends its flag to every other rank, every rank receives the
  // others' flags, and `flag` is left holding the one naming the lowest rank (ties: the lowest sender), the same on
  // every rank; then `then` runs (with MPI's code). The messages travel on a communicator of their own, tagged with the
  // ticket modulo tag_limit() + 1, so they never meet user traffic, nor another collective's exchange unless the two
  // are that many tickets apart and in flight at once. Every rank calls it for the same collective (they all learned
  // `failures` from it). `flag` must live until `then` runs.
  void exchange_errors(std::uint64_t ticket, int failures, RankError& flag, Continuation then);

  // MPI's message for an error code.
  [[nodiscard]] static std::string error_string(int code);

 private:
  struct Outstanding {
    std::vector<MPI_Request> requests;
    Continuation then;
    int error = MPI_SUCCESS;  // the first error a request completed with, while others are still pending
  };
  struct Io;  // the io_context, its work guard and thread

  void run(Task& task) noexcept;
  void settle() noexcept;
  void keep(std::span<const MPI_Request> requests, Continuation then) noexcept;
  void hold(std::uint64_t ticket, Start start) noexcept;
  [[nodiscard]] bool test_round() noexcept;
  void poll() noexcept;
  void require_progress_thread(const char* call) const;

  MPI_Comm comm_ = MPI_COMM_NULL;    // owned: the duplicate the ops use
  MPI_Comm errors_ = MPI_COMM_NULL;  // owned: the duplicate error exchanges use
  int rank_ = 0;
  int size_ = 0;
  int tag_limit_ = 32767;  // MPI_TAG_UB of errors_
  Axis collective_axis_{};
  ExecutorHost* host_ = nullptr;  // not owned: the engine, from start() to stop()
  std::unique_ptr<Io> io_;
  std::thread::id progress_thread_{};

  // Written by any pusher: the next ticket.
  std::atomic<std::uint64_t> tickets_{0};
  // Handlers posted from other threads and not yet run: the poller steps back into the io_context when there are.
  std::atomic<int> posted_{0};
  // Progress thread only:
  TaskList local_;  // ops made ready on the progress thread, run before it returns to the io_context
  std::vector<Outstanding> outstanding_;
  std::vector<MPI_Status> statuses_;                       // test_round()'s scratch
  bool polling_ = false;                                   // a poll round is posted
  std::chrono::steady_clock::time_point last_progress_{};  // when a poll round last completed something
  std::uint64_t next_start_ = 0;                           // the ticket to start next
  std::map<std::uint64_t, Start> held_;  // tickets that arrived early, with their starts (empty: passed)
};

}  // namespace depengine
