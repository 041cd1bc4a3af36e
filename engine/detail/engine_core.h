// EngineCore: the engine behind the Engine handle — push, run, complete, wait. See engine.h for the contract and
// README.md in this folder's parent for the protocols.
//
// Push:    admit (in-flight bound) -> take a pooled record -> sort and fold the variable list -> lock every variable
//          in address order -> check the handles are alive -> append to every queue -> unlock -> drop the pusher's
//          grant; whoever gives the last grant submits the op to its executor.
// Run:     an executor calls execute(): skip if an input carries an error, else call the function; then complete.
// Complete: attach the op's error to the variables it mutates -> complete each use in its queue (granting
//          successors into the caller's ready list) -> retire (in-flight count) -> recycle the record.
// Streams: an engine with a stream executor also carries signals (DESIGN.md section 3). When an op's last grant
//          arrives, make_ready() builds its wait frontier from its variables' signals; an op whose executor cannot
//          wait for an entry on the device (every entry, for a CPU executor) is parked on the tracker until that
//          entry has completed. A stream op is released at issue() with its (axis, epoch) signal and retired at
//          complete_issued(); a CPU op releases with no signal (it ran after everything it waited for completed).
//
// Thread safety: all public members from any thread; shutdown() once, from the owner, with no op running.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/detail/op_function.h"
#include "engine/detail/op_record.h"
#include "engine/detail/trace_recorder.h"
#include "engine/engine.h"
#include "engine/frontier/tracker.h"
#include "engine/var_queue/var_queue.h"

namespace depengine::detail {

// One variable: its queue plus what the engine keeps beside it. The queue comes first so that a VarUse's VarQueue*
// converts back with a static_cast.
struct VarState : VarQueue {
  // Moves on when DeleteVariable is pushed; handles made earlier are dead. Written under the queue's lock (or while
  // the slot is free); relaxed loads elsewhere only detect misuse early.
  std::atomic<std::uint32_t> generation{0};
  // The first error attached since the last clear. Ordered by the queue itself: written only by ops that mutate or
  // sync the variable (which run alone), read by any op that uses it (which runs after them).
  std::exception_ptr error;
  VarState* free_next = nullptr;  // guarded by EngineCore::vars_mutex_ while the slot is free
  std::uint32_t slot = 0;         // its index in EngineCore::vars_, for traces ("v<slot>")
};

class EngineCore final : public ExecutorHost {
 public:
  explicit EngineCore(EngineOptions options);
  EngineCore(const EngineCore&) = delete;
  EngineCore& operator=(const EngineCore&) = delete;
  ~EngineCore();

  Var new_variable();
  // Push in two halves (see Engine::begin_push): a record for the op, then its variables and publication. push()
  // gives the record back if it throws; abandon() gives back a record whose push is abandoned before that.
  [[nodiscard]] OpRecord* make_record(const PushOptions& options, bool async);
  void push(OpRecord* op, VarList reads, VarList mutates);
  static void abandon(OpRecord* op) noexcept;
  void delete_variable(Var var, OpFunction deleter, const PushOptions& options);
  void wait_for_var(Var var);
  void wait_for_all();
  void wait_for_fence(const Fence& fence);
  [[nodiscard]] std::uint64_t version(Var var) const;
  // An upper bound of the ops in flight during the call (what waits rely on: never too low).
  [[nodiscard]] std::size_t in_flight() const noexcept;
  // The ops in flight at one moment during the call (Engine::InFlight); see the definition for the rare fallback.
  [[nodiscard]] std::size_t in_flight_now() const noexcept;
  [[nodiscard]] Executor& executor_at(std::uint32_t index) const;

  // Tracing (Engine::StartTrace): start_trace throws Error if a trace is on; stop_trace waits for every op in flight,
  // then writes the file, and throws Error if no trace is on or the file cannot be written.
  void start_trace(std::string path);
  void stop_trace();

  // Waits for every op, reports an unreported error to stderr, writes a trace that is on, and stops the executors.
  void shutdown() noexcept;

  // ExecutorHost.
  void execute(Task& task, int worker, TaskList& ready) noexcept override;
  [[nodiscard]] Tracker& tracker() noexcept override { return tracker_; }
  [[nodiscard]] const WaitFrontier& requirement(const Task& task) const noexcept override {
    return static_cast<const OpRecord&>(task).requirement;
  }
  [[nodiscard]] bool issue(Task& task, const StreamPlacement& where, FrontierEntry signal,
                           TaskList& ready) noexcept override;
  void skip(Task& task, std::exception_ptr error, TaskList& ready) noexcept override;
  void complete_issued(Task& task, std::exception_ptr error) noexcept override;

  // Completes async op `op` on behalf of a Completion that has already claimed the op's ticket.
  void complete_async(OpRecord* op, std::exception_ptr error);

 private:
  [[nodiscard]] VarState* checked_state(const Var& var, const char* api) const;
  [[nodiscard]] OpRecord* record_for(Executor* executor, const PushOptions& options, bool async);
  static void check_fences(const FenceList& fences, const char* field);
  void gather_uses(OpRecord* op, VarList reads, VarList mutates) const;
  [[nodiscard]] bool publish(OpRecord* op);
  void submit_new(OpRecord* op, const char* api);
  void grant(OpRecord* op, TaskList* ready) noexcept;
  void push_sync_op(VarState* var, std::uint32_t generation, OpFunction fn);

  [[nodiscard]] bool find_input_error(OpRecord* op) const noexcept;
  void finish(OpRecord* op, TaskList& ready, const VarSignal* signal) noexcept;
  void complete_uses(OpRecord* op, TaskList& ready, const VarSignal* signal) noexcept;
  [[nodiscard]] const VarSignal* ran_signal() const noexcept;
  [[nodiscard]] const VarSignal* skipped_signal(const OpRecord* op) const noexcept;
  void make_ready(OpRecord* op, TaskList& ready) noexcept;
  void park(OpRecord* op) noexcept;
  void take_input_error(OpRecord* op, const std::exception_ptr& error) noexcept;
  static void unparked(TrackerWaiter& waiter, std::exception_ptr error) noexcept;
  friend struct ParkWaiter;
  void arm_fence(OpRecord* op) noexcept;
  static void fence_done(TimelineWaiter& waiter, const TimelineWaitResult& result) noexcept;
  friend struct FenceWaiter;
  void promise_fences(OpRecord* op) noexcept;
  void signal_fences(OpRecord* op, const std::exception_ptr& error) noexcept;
  void release_hold(OpRecord* op) noexcept;
  void recycle_var(VarState* var) noexcept;
  void trace_cpu_op(OpRecord* op, int worker, std::int64_t start) noexcept;
  void trace_stream_op(OpRecord* op) noexcept;
  void note_error(const std::exception_ptr& error) noexcept;

  void admit(bool exempt);
  void leave() noexcept;
  bool help() noexcept;
  void wait_in_flight_at_most(std::size_t level);
  void forbid_inside_op(const char* api) const;

  // Runs engine-internal ops (waits, error clearing) on the thread that makes them ready. They are tiny, and they
  // must run on the host even when the default executor is a stream executor.
  class InternalExecutor final : public Executor {
   public:
    [[nodiscard]] std::string_view name() const noexcept override { return "internal"; }
    void start(ExecutorHost& host) override { host_ = &host; }
    void submit(Task& task) noexcept override;
    [[nodiscard]] bool try_help() noexcept override { return false; }
    void stop() noexcept override {}

   private:
    ExecutorHost* host_ = nullptr;
  };

  const std::uint32_t id_;  // never reused in the process (see Var)
  const std::size_t max_in_flight_;
  const std::size_t low_water_;  // a push held back by the bound resumes once in_flight_ falls to this
  std::vector<std::unique_ptr<Executor>> executors_;
  InternalExecutor internal_;
  // Completed epochs of every stream axis; stream executors register their axes in start(). Declared before nothing
  // that outlives it: executors are stopped (shutdown) before the tracker is destroyed.
  Tracker tracker_;
  bool has_streams_ = false;  // an executor issues ahead: signals are carried and wait frontiers built
  // Variable table: stable addresses, recycled through a free list.
  std::mutex vars_mutex_;
  std::deque<VarState> vars_;      // guarded by vars_mutex_ (growth); elements are owned by their users meanwhile
  VarState* free_vars_ = nullptr;  // guarded by vars_mutex_

  // Tracing: the recorder on now (null: off), and every recorder this engine made (kept until it is destroyed, so an
  // op that loaded the pointer just before a trace stopped still records into live memory).
  std::atomic<TraceRecorder*> trace_{nullptr};
  std::mutex traces_mutex_;
  std::vector<std::unique_ptr<TraceRecorder>> traces_;  // guarded by traces_mutex_

  // Errors for WaitForAll.
  std::mutex errors_mutex_;
  std::exception_ptr first_error_;     // guarded by errors_mutex_
  bool first_error_reported_ = false;  // a WaitForVar rethrew first_error_ (so shutdown need not); errors_mutex_
  std::vector<Var> poisoned_;          // variables given an error since the last WaitForAll; guarded by errors_mutex_

  // In flight = pushed_ - retired_. The two counts live on separate cache lines, written by separate parties
  // (pushers; completing threads), so a push and a completion on different cores do not trade a line per op.
  // Pushers check the bound against retired_view_, their own cached lower bound of retired_, and re-read retired_
  // only when the cached view says the bound is reached.
  alignas(64) std::atomic<std::size_t> pushed_{0};
  std::atomic<std::size_t> retired_view_{0};
  alignas(64) std::atomic<std::size_t> retired_{0};
  // Threads asleep in wait_in_flight_at_most(): the low 32 bits count those waiting for low_water_, the high 32 bits
  // those waiting for zero. Read by every completion, written only by waiters, so it stays cached everywhere.
  alignas(64) std::atomic<std::uint64_t> sleepers_{0};
  // Threads of the user's own inside complete_async(); shutdown() frees nothing while one is (see complete_async()).
  std::atomic<std::uint32_t> foreign_completers_{0};
  std::mutex wake_mutex_;
  std::condition_variable wake_cv_;
};

}  // namespace depengine::detail
