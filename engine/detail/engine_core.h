// EngineCore: the engine behind the Engine handle — push, run, complete, wait. See engine.h for the contract and
// README.md in this folder's parent for the protocols.
//
// The class is the meeting point of the engine's parts; each concern lives in a file of its own under engine/detail/:
//
//   engine_core.cpp       construction, the executors, shutdown and its hooks (Engine::AtShutdown)
//   in_flight.{h,cpp}     admission: the in-flight count, its bound (back-pressure) and the threads waiting on it
//   var_table.{h,cpp}     variables: their state beside their queues, handles, recycling of slots
//   op_record.h           op records and their pool (record_pool.cpp)
//   push.cpp              publish and grants: a record from push options, sort and fold the variables, append to every
//                         queue once all their locks are held, the pusher's grant
//   completion.cpp        run and complete: execute a ready CPU op, complete its uses (granting successors), retire it
//   stream_ops.cpp        streams: wait frontiers, parking on the tracker, issue, skip and device completion
//   fences.cpp            timeline fences: arm the waits, promise at issue, raise or fail at completion
//   waits.cpp             WaitForVar, WaitForAll, WaitForFence, StopTrace
//   graph_plan.h, graph_capture.cpp, replay.cpp  Capture and Replay: a step planned once, replayed through joins
//   graph_lifetime.{h,cpp}  what ends with a Graph: the variables it owns, its functions at the engine's shutdown
//   stream_graph.{h,cpp}  a captured graph of stream ops, replayed as one stream op (recorded once on CUDA and HIP)
//   error_log.{h,cpp}     which errors no wait reported yet, and the error sink
//   in_flight_report.{h,cpp}  what the ops in flight wait for, and wait cycles (Engine::InFlightReport)
//   stall_watch.{h,cpp}   the thread that prints that report when nothing completes for a while (on by default)
//   run_clock.h           the coarse clock the stall watch keeps, which CPU ops stamp as they start ("running for")
//   engine_trace.{h,cpp}  where traces hook in (trace_recorder.{h,cpp} writes the file)
//   running.h             what the calling thread is running (nested executors, waits from inside ops)
//
// Push:    admit (in-flight bound) -> take a pooled record -> lock every variable (in list order, folding one listed
//          twice; all again in address order if another thread holds one out of that order) -> check the handles are
//          alive -> append to every queue -> unlock -> drop the pusher's grant; whoever gives the last grant submits
//          the op to its executor.
// Run:     an executor calls execute(): skip if an input carries an error, else call the function; then complete.
// Complete: attach the op's error to the variables it mutates -> complete each use in its queue (granting
//          successors into the caller's ready list) -> retire (in-flight count) -> recycle the record.
// Streams: an engine with a stream executor also carries signals (docs/architecture.md). When an op's last grant
//          arrives, make_ready() builds its wait frontier from its variables' signals; an op whose executor cannot
//          wait for an entry on the device (every entry, for a CPU executor) is parked on the tracker until that
//          entry has completed. A stream op is released at issue() with its (axis, epoch) signal and retired at
//          complete_issued(); a CPU op releases with no signal (it ran after everything it waited for completed).
//
// Thread safety: all public members from any thread; shutdown() once, from the owner, with no op running.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <depengine/engine/detail/engine_trace.h>
#include <depengine/engine/detail/error_log.h>
#include <depengine/engine/detail/graph_plan.h>
#include <depengine/engine/detail/in_flight.h>
#include <depengine/engine/detail/in_flight_report.h>
#include <depengine/engine/detail/op_function.h>
#include <depengine/engine/detail/op_record.h>
#include <depengine/engine/detail/run_clock.h>
#include <depengine/engine/detail/running.h>
#include <depengine/engine/detail/stall_watch.h>
#include <depengine/engine/detail/var_table.h>
#include <depengine/engine/engine.h>
#include <depengine/engine/frontier/tracker.h>
#include <depengine/executors/inline_executor.h>
#include <depengine/support/cache_line.h>

namespace depengine::detail {

class StreamGraph;

class EngineCore final : public ExecutorHost {
 public:
  explicit EngineCore(EngineOptions options);
  EngineCore(const EngineCore&) = delete;
  EngineCore& operator=(const EngineCore&) = delete;
  ~EngineCore();

  Var new_variable() {
    Var var = vars_.make();
    if (t_running.capturing == this) [[unlikely]]
      note_made(var);
    return var;
  }
  [[nodiscard]] std::uint64_t version(Var var) const { return vars_.checked(var, "Version")->version(); }
  [[nodiscard]] Executor& executor_at(std::uint32_t index) const;
  // The index in EngineOptions::executors of one of the engine's executors.
  [[nodiscard]] std::uint32_t executor_index(const Executor* executor) const noexcept;
  // The ops in flight at one moment during the call (Engine::InFlight).
  [[nodiscard]] std::size_t in_flight_now() const noexcept { return in_flight_.now(); }
  // Engine::InFlightReport (in_flight_report.h), with what the report hooks add.
  [[nodiscard]] std::string in_flight_report() { return snapshot_in_flight().text; }
  [[nodiscard]] std::optional<std::string> failed_op_name(const std::exception_ptr& error) {
    return errors_.op_of(error);
  }

  // push.cpp. Push in two halves (see Engine::begin_push): a record for the op, then its variables and publication.
  // push() gives the record back if it throws; abandon() gives back a record whose push is abandoned before that.
  [[nodiscard]] OpRecord* make_record(const PushOptions& options, bool async);
  void push(OpRecord* op, VarList reads, VarList mutates);
  static void abandon(OpRecord* op) noexcept { op->recycle(); }
  void delete_variable(Var var, OpFunction deleter, const PushOptions& options);
  // The real deletion of a variable a graph owned (graph_lifetime.h), with its captured deleter; of each of `owned`,
  // reporting a refused one on stderr.
  void delete_owned(OwnedVar& owned);
  void delete_all_owned(std::vector<OwnedVar>& owned) noexcept;

  // graph_capture.cpp (Engine::Capture): capture() takes a push made inside a capture instead of publishing it.
  void begin_capture();
  void abandon_capture() noexcept;
  [[nodiscard]] Graph end_capture();
  [[nodiscard]] bool capturing() const noexcept { return t_running.capturing == this; }
  // replay.cpp (Engine::Replay).
  void replay(const Graph& graph, const ReplayOptions& options);

  // waits.cpp.
  void wait_for_var(Var var);
  void wait_for_all();
  void wait_for_fence(const Fence& fence);
  void wait_for_scope(const CancelScope& scope);
  // Engine::ClearErrors.
  void clear_errors(VarList vars);
  // Tracing (Engine::StartTrace): start_trace throws Error if a trace is on; stop_trace waits for every op in flight,
  // then writes the file, and throws Error if no trace is on or the file cannot be written.
  void start_trace(std::string path) { trace_.start(std::move(path)); }
  void stop_trace();
  // Engine::FlushTrace: writes the trace on now as recorded so far; throws Error if none is on.
  void flush_trace() const;
  // Waits for every op, calls the shutdown hooks, reports an unreported error to stderr, writes a trace that is on,
  // and stops the executors.
  void shutdown() noexcept;
  [[nodiscard]] ShutdownHook at_shutdown(std::function<void()> fn);
  [[nodiscard]] ReportHook at_report(std::function<std::string()> describe);

  // completion.cpp: ExecutorHost::execute, and the completion of async ops.
  void execute(Task& task, int worker, TaskList& ready) noexcept override;
  // For a no_skip op about to run: sets ctx.input_error and input_error_var from its first variable with an error.
  void note_input_error(const OpRecord* op, RunContext& ctx) const noexcept;
  // The function of async op `op` (a pushed op's record, or a replayed op's) threw `thrown` before or after calling the
  // Completion with ticket `ticket` it was handed. Before: that is the op's error, and the op completes with it now
  // (late_completions.h); after: the error is the owner's, for WaitForAll, named `name`.
  void async_threw(OpRecord* op, std::uint64_t ticket, const std::exception_ptr& thrown,
                   std::string_view name) noexcept;
  // A late call of a Completion the engine completed on a throw carried `error` (late_completions.h).
  void raise_late(const std::exception_ptr& error, std::string_view op, std::uint64_t owner) noexcept {
    errors_.raise(error, op, owner);
  }
  // Completes async op `op` on behalf of a Completion that has already claimed the op's ticket.
  // `learned`: see Completion::operator()(error, learned).
  void complete_async(OpRecord* op, std::exception_ptr error, std::span<const FrontierEntry> learned);
  void complete_async_uses(OpRecord* op, const std::exception_ptr& error, std::span<const FrontierEntry> learned,
                           TaskList& ready) noexcept;
  // ExecutorHost: the threads waiting on this engine (InFlight).
  [[nodiscard]] bool helpers_asleep() const noexcept override { return in_flight_.helpers_asleep(); }
  void wake_helpers() noexcept override { in_flight_.wake_helpers(); }

  // stream_ops.cpp: the rest of ExecutorHost.
  [[nodiscard]] Tracker& tracker() noexcept override { return tracker_; }
  [[nodiscard]] const WaitFrontier& requirement(const Task& task) const noexcept override {
    return static_cast<const OpRecord&>(task).requirement;
  }
  [[nodiscard]] bool issue(Task& task, const StreamPlacement& where, FrontierEntry signal, std::uint32_t waited,
                           TaskList& ready) noexcept override;
  void skip(Task& task, std::exception_ptr error, TaskList& ready) noexcept override;
  void complete_issued(Task& task, std::exception_ptr error) noexcept override;
  [[nodiscard]] bool traced(const Task& task) const noexcept override {
    return static_cast<const OpRecord&>(task).trace_op != 0;  // stream ops are pushed ops (never replayed)
  }
  void ran_on_device(Task& task, std::int64_t start, std::int64_t end) noexcept override {
    auto& op = static_cast<OpRecord&>(task);
    op.ran_start = start;
    op.ran_end = end;
  }

 private:
  friend struct ParkWaiter;
  friend struct FenceWaiter;

  // push.cpp
  [[nodiscard]] OpRecord* record_for(Executor* executor, const PushOptions& options, bool async);
  void gather_uses(OpRecord* op, VarList reads, VarList mutates) const;
  void submit_new(OpRecord* op, const char* api);
  // Out of line, as refuse_closed() alone was before it, so that the push's common path keeps its registers.
  [[gnu::cold, gnu::noinline]] void admit_at_bound(OpRecord* op, const char* api);
  void grant(OpRecord* op, TaskList* ready) noexcept;
  void hand_on(OpRecord* op, TaskList* ready) noexcept;
  [[gnu::cold]] void run_pushed(OpRecord* op) noexcept;
  void push_sync_op(VarState* var, std::uint32_t generation, OpFunction fn, const char* api);
  void push_deletion(VarState* var, std::uint32_t generation, OpFunction deleter, const PushOptions& options);
  [[nodiscard]] OpRecord* deletion_record(VarState* var, std::uint32_t generation, OpFunction deleter,
                                          const PushOptions& options);

  // graph_capture.cpp
  void capture(OpRecord* op);
  void note_made(const Var& var);
  void capture_deletion(Var var, OpFunction deleter, const PushOptions& options);
  [[nodiscard]] const char* refuse_in_stream_graph(const OpRecord* op, const CapturedOp* first) const noexcept;

  // stream_graph.cpp: a graph of stream ops replayed as one stream op (stream_graph.h).
  // `scope`: ReplayOptions::scope's state, or null.
  void replay_streams(const std::shared_ptr<StreamGraph>& graph, ScopeState* scope);
  void run_stream_graph(StreamGraph& graph, const RunContext& ctx, std::uint64_t owner);

  // replay.cpp
  void execute_replayed(GraphOp* op, int worker, TaskList& ready) noexcept;
  [[nodiscard]] OpRecord* run_async_replayed(GraphOp* op, GraphPlan::Op& planned, const RunContext& ctx) noexcept;
  void complete_async_replayed(OpRecord* record, const std::exception_ptr& error, TaskList& ready) noexcept;
  // `retire`: whether this call retires the op (graph_plan.h, Retirement); an async op that ran is retired by its
  // completion record instead (retire_async_replayed).
  void complete_replayed(GraphOp* op, const GraphPlan::Op& planned, const std::exception_ptr& error, TaskList& ready,
                         bool retire) noexcept;
  void retire_async_replayed(OpRecord* record) noexcept;
  void grant_join(GraphJoin* join, TaskList& ready) noexcept;
  void retire_replayed(GraphInstance* instance) noexcept;
  // Where a node that a queue granted goes: to `ready` (a pushed op through make_ready() when signals are carried), or,
  // for a join of a replay, to the ops it grants.
  void route(OpNode* node, TaskList& ready) noexcept;
  void route_join(std::uint64_t from, OpNode* join, TaskList& ready) noexcept;

  // completion.cpp
  [[nodiscard]] bool find_input_error(OpRecord* op) noexcept;
  [[nodiscard]] bool cancelled(OpRecord* op) noexcept;
  void finish(OpRecord* op, TaskList& ready, const VarSignal* signal) noexcept;
  void complete_uses(OpRecord* op, TaskList& ready, const VarSignal* signal) noexcept;
  void poison(const OpRecord* op, VarState* var, const VarUse& use, const std::exception_ptr& error) noexcept;
  // Whether op's use `i` names a variable its replayed graph of stream ops ends.
  [[nodiscard]] bool ends_graph_var(const OpRecord* op, std::uint32_t i) const noexcept;
  [[nodiscard]] const VarSignal* ran_signal() const noexcept;
  [[nodiscard]] const VarSignal* learned_signal(OpRecord* op, std::span<const FrontierEntry> learned) noexcept;
  [[nodiscard]] const VarSignal* skipped_signal(const OpRecord* op) const noexcept;
  void release_hold(OpRecord* op) noexcept;
  // The op is done: out of the in-flight count, its record back to the pool, and out of its scope's count (after the
  // first two, so that a WaitForScope that returns finds the op retired).
  void retire(OpRecord* op) noexcept {
    if (op->replay_completion) [[unlikely]] {
      retire_async_replayed(op);
      return;
    }
    ScopeState* scope = op->scope;
    in_flight_.leave();
    op->recycle();
    if (scope != nullptr) [[unlikely]]
      ScopeState::op_retired(scope);
  }

  // stream_ops.cpp
  void make_ready(OpRecord* op, TaskList& ready) noexcept;
  void park(OpRecord* op) noexcept;
  static void unparked(TrackerWaiter& waiter, std::exception_ptr error) noexcept;
  void take_input_error(OpRecord* op, const std::exception_ptr& error) noexcept;

  // fences.cpp
  void arm_fence(OpRecord* op) noexcept;
  static void fence_done(TimelineWaiter& waiter, const TimelineWaitResult& result) noexcept;
  void promise_fences(OpRecord* op) noexcept;
  static void signal_fences(OpRecord* op, const std::exception_ptr& error) noexcept;

  // waits.cpp
  void forbid_inside_op(const char* api) const;

  // engine_core.cpp
  void call_hooks() noexcept;
  void start_stall_watch(std::function<void(std::string_view)> sink);
  // What the ops in flight wait for (in_flight_report.h), the pushes blocked at the bound, and what the report hooks
  // add.
  [[nodiscard]] InFlightSnapshot snapshot_in_flight();
  // The stall watch's report, after `quiet` without a completion; writes the trace on, if any, with the ops in flight.
  [[nodiscard]] std::string stall_report(std::chrono::nanoseconds quiet);
  [[nodiscard]] std::string flush_trace_for_report(const InFlightSnapshot& snapshot) const;

  // Immutable after construction.
  std::vector<std::unique_ptr<Executor>> executors_;
  // Runs engine-internal ops (waits, error clearing) on the thread that makes them ready. They are tiny, and they
  // must run on the host even when the default executor is a stream executor.
  InlineExecutor internal_;
  const bool has_streams_;  // an executor issues ahead: signals are carried and wait frontiers built
  // EngineOptions::cancel_on_destruction: shutdown() sets cancelling_, and every op not started then completes with
  // teardown_error_ (made at construction, so destruction allocates nothing). Read by every op before it runs.
  const bool cancel_on_destruction_;
  std::atomic<bool> cancelling_{false};
  // EngineOptions::stall_report_after, or DEPENGINE_STALL_REPORT's; EngineOptions::kNoStallReport when off.
  const std::chrono::milliseconds stall_after_;
  // Stamped on every CPU op as its function starts (execute()), beside cancelling_, which every op reads too; advanced
  // by the stall watch (run_clock.h).
  RunClock run_clock_;
  std::exception_ptr teardown_error_;

  VarTable vars_;
  // Completed epochs of every stream axis; stream executors register their axes in start(). Declared before nothing
  // that outlives it: executors are stopped (shutdown) before the tracker is destroyed.
  Tracker tracker_;
  // Set once registering a learned axis found the tracker full (learned_signal); relaxed, a hint.
  std::atomic<bool> tracker_full_{false};
  EngineTrace trace_;
  ErrorLog errors_;
  InFlight in_flight_;
  // Engine::AtShutdown. The engine's share of each hook; those whose handle is gone are dropped at the next
  // registration.
  std::mutex hooks_mutex_;
  std::vector<std::shared_ptr<ShutdownHook::State>> hooks_;       // guarded by hooks_mutex_
  std::vector<std::shared_ptr<ReportHook::State>> report_hooks_;  // Engine::AtReport; guarded by hooks_mutex_
  // Threads that are not running an op of this engine and are inside it on an op's behalf: a user's thread completing
  // an async op (complete_async) or reaching an op's wait fence (fence_done), a stream executor's completion thread
  // raising a fence. Such a thread may run or retire the op and still be inside the engine or an executor afterwards,
  // so shutdown() frees nothing until none is. Written by those threads only, on a line of its own.
  alignas(support::kCacheLine) std::atomic<std::uint32_t> foreign_threads_{0};
  // Null when stall reports are off. Stopped by shutdown() once every op has completed.
  std::unique_ptr<StallWatch> stall_watch_;

  // Counts the calling thread in foreign_threads_ for its lifetime.
  class ForeignThread {
   public:
    explicit ForeignThread(EngineCore& engine) noexcept : engine_(engine) {
      // relaxed: whatever this thread then retires publishes the increment: the retire in leave() is seq_cst, and
      // shutdown() reads the counts with seq_cst before it reads foreign_threads_.
      engine_.foreign_threads_.fetch_add(1, std::memory_order_relaxed);
    }
    ~ForeignThread() {
      // release: pairs with the acquire in shutdown(); this thread's last access to the engine.
      engine_.foreign_threads_.fetch_sub(1, std::memory_order_release);
    }
    ForeignThread(const ForeignThread&) = delete;
    ForeignThread& operator=(const ForeignThread&) = delete;

   private:
    EngineCore& engine_;
  };
};

}  // namespace depengine::detail
