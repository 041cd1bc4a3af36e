// EngineCore: the engine behind the Engine handle — push, run, complete, wait. See engine.h for the contract and
// README.md in this folder's parent for the protocols.
//
// The core runs a pushed op's life and owns the three objects it hands the rest to:
//   OpGate        (op_gate.h)       whether an op about to run runs: cancelled, torn down, an input's error, no_skip;
//                                   every op passes it, pushed or replayed
//   GraphRunner   (graph_runner.h)  Capture and Replay; it reaches the core through the calls listed in its header
//   Diagnostics   (diagnostics.h)   the error log, the trace, the in-flight report, the stall watch, the hooks, the
//                                   observers (observers.h: told at each step of an op's life)
// Its own members are grouped by step of an op's life, a file each:
//   push.cpp        publish: a record from push options, sort and fold the variables, append to every queue once all
//                   their locks are held
//   accumulation.cpp  ops that accumulate (Access::kAccumulate): their push, and the group tokens they take to run
//   dispatch.cpp    grant, hand on, route: where an op goes once its last grant arrives (its wait frontier and
//                   parking on the tracker when signals are carried)
//   completion.cpp  run and complete: the gate, the function (call(), call_async(): replayed ops' too), complete the
//                   op's uses (granting successors), retire it; the completion of async ops
//   stream_ops.cpp  streams: issue, skip and device completion
//   fences.cpp      timeline fences: arm the waits, promise at issue, raise or fail at completion
//   waits.cpp       WaitForVar, WaitForAll, WaitForFence, WaitForScope, ClearErrors, StopTrace
//   engine_core.cpp construction, the executors, shutdown
// and use: in_flight.h (admission and back-pressure), var_table.h (variables), op_record.h (records and their pool),
// run_clock.h (the clock CPU ops stamp as they start, for "running for"), running.h (what the calling thread runs).
//
// Push:    admit (in-flight bound) -> take a pooled record -> lock every variable (in list order, folding one listed
//          twice; all again in address order if another thread holds one out of that order) -> check the handles are
//          alive -> append to every queue -> unlock -> drop the pusher's grant; whoever gives the last grant submits
//          the op to its executor.
// Run:     an executor calls execute(): the gate skips it (cancelled, or an input carries an error), or call() runs
//          its function; then complete.
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
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <depengine/engine/detail/diagnostics.h>
#include <depengine/engine/detail/graph_plan.h>
#include <depengine/engine/detail/graph_runner.h>
#include <depengine/engine/detail/in_flight.h>
#include <depengine/engine/detail/observers.h>
#include <depengine/engine/detail/op_function.h>
#include <depengine/engine/detail/op_gate.h>
#include <depengine/engine/detail/op_record.h>
#include <depengine/engine/detail/run_clock.h>
#include <depengine/engine/detail/running.h>
#include <depengine/engine/detail/var_table.h>
#include <depengine/engine/engine.h>
#include <depengine/executors/inline_executor.h>
#include <depengine/frontier/tracker.h>
#include <depengine/support/cache_line.h>
#include <depengine/support/prefetch.h>

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
      GraphRunner::note_made(var);
    return var;
  }
  [[nodiscard]] std::uint64_t version(Var var) const { return vars_.checked(var, "Version")->version(); }
  [[nodiscard]] Executor& executor_at(std::uint32_t index) const;
  // The index in EngineOptions::executors of one of the engine's executors.
  [[nodiscard]] std::uint32_t executor_index(const Executor* executor) const noexcept;
  // The ops in flight at one moment during the call (Engine::InFlight).
  [[nodiscard]] std::size_t in_flight_now() const noexcept { return in_flight_.now(); }
  // Engine::InFlightReport, Engine::failed_op_name, traces, hooks (diagnostics.h).
  [[nodiscard]] Diagnostics& diagnostics() noexcept { return diagnostics_; }

  // push.cpp. Push in two halves (see Engine::begin_push): a record for the op, then its variables and publication.
  // push() gives the record back if it throws; abandon() gives back a record whose push is abandoned before that.
  // refuse_async_on_streams() throws, naming `api`, if `options` place an async op on a stream executor: make_record()
  // calls it for PushAsync, and PushAccumulateAsync before make_record(), so that its error names it.
  [[nodiscard]] OpRecord* make_record(const PushOptions& options, bool async);
  [[gnu::cold]] void refuse_async_on_streams(const PushOptions& options, std::string_view api) const;
  void push(OpRecord* op, VarList reads, VarList mutates);
  // accumulation.cpp: Engine::PushAccumulate(Async): as push(), with the variables it accumulates into.
  void push_accumulating(OpRecord* op, VarList reads, VarList mutates, VarList accumulates);
  static void abandon(OpRecord* op) noexcept { op->recycle(); }
  void delete_variable(Var var, OpFunction deleter, const PushOptions& options);
  // The real deletion of a variable a graph owned (graph_lifetime.h), with its captured deleter.
  void delete_owned(OwnedVar& owned);

  // Engine::Capture and Engine::Replay (graph_runner.h).
  [[nodiscard]] GraphRunner& graphs() noexcept { return graphs_; }

  // waits.cpp.
  void wait_for_var(Var var);
  void wait_for_all();
  void wait_for_fence(const Fence& fence);
  void wait_for_scope(const CancelScope& scope);
  // Engine::ClearErrors.
  void clear_errors(VarList vars);
  // Engine::StopTrace: waits for every op in flight, then writes the file; throws Error if no trace is on or the file
  // cannot be written.
  void stop_trace();
  // Waits for every op, calls the shutdown hooks, reports an unreported error to stderr, writes a trace that is on,
  // and stops the executors.
  void shutdown() noexcept;

  // completion.cpp: ExecutorHost::execute, the run of an op's function, and the completion of async ops.
  void execute(Task& task, int worker, TaskList& ready) noexcept override;
  // Calls `fn`, the function of a sync op named `name` of `owner`, with `ctx`; an error it throws goes to `error`
  // (null before the call) and the error log, and nothing is written when it returns: a returned exception_ptr would
  // cost every op a move and a destructor call. Every op's function, pushed or replayed, is called here or by
  // call_async().
  void call(OpFunction& fn, const RunContext& ctx, std::string_view name, std::uint64_t owner,
            std::exception_ptr& error) noexcept {
    try {
      fn(ctx, nullptr);
    } catch (...) {
      error = std::current_exception();
      errors().raise(error, name, owner);
    }
  }
  // Calls `fn`, the function of an async op named `name`, with `ctx` and a Completion pointing at `record` (the op's,
  // or one taken for a replayed op), which the caller then releases as the function's party (release_hold()).
  void call_async(OpRecord* record, OpFunction& fn, const RunContext& ctx, std::string_view name) noexcept;
  // The function of async op `op` (a pushed op's record, or a replayed op's) threw `thrown` before or after calling the
  // Completion with ticket `ticket` it was handed. Before: that is the op's error, and the op completes with it now
  // (late_completions.h); after: the error is the owner's, for WaitForAll, named `name`.
  void async_threw(OpRecord* op, std::uint64_t ticket, const std::exception_ptr& thrown,
                   std::string_view name) noexcept;
  // A late call of a Completion the engine completed on a throw carried `error` (late_completions.h).
  void raise_late(const std::exception_ptr& error, std::string_view op, std::uint64_t owner) noexcept {
    errors().raise(error, op, owner);
  }
  // Completes async op `op` on behalf of a Completion that has already claimed the op's ticket.
  // `learned`: see Completion::operator()(error, learned).
  void complete_async(OpRecord* op, std::exception_ptr error, std::span<const FrontierEntry> learned);
  void complete_async_uses(OpRecord* op, const std::exception_ptr& error, std::span<const FrontierEntry> learned,
                           TaskList& ready) noexcept;
  // The graph runner's way into the core (graph_runner.h), and nothing else's but the core's own.
  [[nodiscard]] InFlight& in_flight() noexcept { return in_flight_; }
  [[nodiscard]] VarTable& vars() noexcept { return vars_; }
  [[nodiscard]] ErrorLog& errors() noexcept { return diagnostics_.errors(); }
  [[nodiscard]] EngineTrace& trace() noexcept { return diagnostics_.trace(); }
  [[nodiscard]] const OpGate& gate() const noexcept { return gate_; }
  [[nodiscard]] bool has_streams() const noexcept { return has_streams_; }
  // The engine's observers (observers.h), or null when it has none.
  [[nodiscard]] Observers* observing() const noexcept { return observing_; }
  // Engine::Statistics: the engine's own OpStatistics; throws Error when statistics are off.
  [[nodiscard]] const OpStatistics& statistics() const;
  // completion.cpp: gives `var`, mutated by an op of `owner` through a handle of generation `tag`, the error `error`
  // unless it already has one, and records it for WaitForAll: how every failed or skipped op, pushed or replayed,
  // passes its error on.
  void poison(VarState* var, std::uint32_t tag, const std::exception_ptr& error, std::uint64_t owner) noexcept;
  // dispatch.cpp: where a node that a queue granted goes: to `ready` (a pushed op through make_ready() when signals
  // are carried), or, for a join of a replay, to the ops it grants.
  // `completed`: the op (a pushed op's record, a replayed GraphOp) whose completion granted it, on this thread; its
  // end time is the node's ready time for observers (observers.h).
  void route(OpNode* node, TaskList& ready, const void* completed) noexcept;
  // An async op's successors are granted at its completion, but it stays in flight until its function has returned
  // too (an error it throws after completing belongs to the WaitForAll that waits for it), so the later of the two
  // parties retires it and recycles its record.
  void release_hold(OpRecord* op) noexcept;
  // push.cpp: a pooled record for an op of `executor`, with every field a push sets from `options`; the publication of
  // a record made so (`api`: the call, for errors).
  [[nodiscard]] OpRecord* record_for(Executor* executor, const PushOptions& options, bool async);
  void submit(OpRecord* op, const char* api);
  // The record of a deletion of `var` (whose handles are of `generation`), with `deleter` as its function.
  [[nodiscard]] OpRecord* deletion_record(VarState* var, std::uint32_t generation, OpFunction deleter,
                                          const PushOptions& options);
  // The record of a deletion of `var` (whose handles are of `generation`), with `deleter` as its function.

  // ExecutorHost: the executors' threads, told to the observers.
  [[nodiscard]] bool observes_threads() const noexcept override { return observing_ != nullptr; }
  void thread_started(const Executor& executor, int worker) noexcept override {
    observing_->thread_started(executor, worker);
  }
  void thread_stopped(const Executor& executor, int worker) noexcept override {
    observing_->thread_stopped(executor, worker);
  }

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
  void gather_uses(OpRecord* op, VarList reads, VarList mutates) const;
  // The use of `var` by `op`, its handle checked for its engine (throws Error for a foreign or null one) before its
  // pointer is followed; whether it is still alive is checked by publish() under the variable's lock, the only place
  // where the answer cannot change.
  [[nodiscard, gnu::always_inline]] VarUse use_of(OpRecord* op, const Var& var, Access access) const {
    if (var.engine_ != vars_.engine_id() || var.is_null()) [[unlikely]]
      (void)vars_.checked(var, op->async ? "PushAsync" : "Push");
    // publish() takes the variable's lock, whose line the last completion of the variable most often wrote on another
    // core: fetched now, the lines of all the op's variables cross together, not one lock after another.
    support::prefetch_for_write(var.state_);
    return VarUse{var.state_, op, nullptr, access, var.generation_};
  }
  // accumulation.cpp: whether `op`, an op that accumulates (host kind kAccumulatingOp), holds the token of every group
  // it is a member of, taking them all at once or none; false: parked on one, holding none, to be run again when its
  // holder wakes it (var_queue.h, Groups). Members it passes a wake on to go to `ready`.
  [[nodiscard]] bool take_tokens(OpRecord* op, TaskList& ready) noexcept;
  // Out of line, as refuse_closed() alone was before it, so that the push's common path keeps its registers.
  [[gnu::cold, gnu::noinline]] void admit_slow(OpRecord* op, const char* api, InFlight::Admitted admitted);
  void push_sync_op(VarState* var, std::uint32_t generation, OpFunction fn, const char* api);
  void push_deletion(VarState* var, std::uint32_t generation, OpFunction deleter, const PushOptions& options);

  // dispatch.cpp (and route() above): grant() gives one grant to `op`, the last hands it on; hand_on() hands on an op
  // whose last grant the caller gave, to `ready` (a running executor's list) if given, else to its executor (inline:
  // every push ends in it; `at_push`: from the push); run_pushed() runs an op ready at its push on the pushing thread
  // (work-first).
  void grant(OpRecord* op, TaskList* ready) noexcept;
  void hand_on(OpRecord* op, TaskList* ready, bool at_push) noexcept {
    if (observing_ != nullptr) [[unlikely]] {
      hand_on_observed(op, ready, at_push);
      return;
    }
    pass_on(op, ready);
  }
  // hand_on() without the observers; with them, told ready first and, from the push, done with the push after.
  void pass_on(OpRecord* op, TaskList* ready) noexcept {
    if (has_streams_) {
      TaskList own;
      // The op, if ready (else parked), and any member whose wake its taking of tokens passed on (accumulation.cpp).
      make_ready(op, ready != nullptr ? *ready : own);
      while (Task* task = own.pop_front()) task->executor()->submit(*task);
    } else if (ready != nullptr) {
      ready->push_back(op);
    } else {
      op->executor()->submit(*op);
    }
  }
  [[gnu::cold]] void hand_on_observed(OpRecord* op, TaskList* ready, bool at_push) noexcept;
  [[gnu::cold]] void run_pushed(OpRecord* op) noexcept;

  // completion.cpp
  // Whether the op is stopped at the gate (op_gate.h), with its error set; on its scope's cancellation, recorded. A
  // stopped op's end is told to the observers here, as skipped or cancelled.
  [[nodiscard]] bool stopped(OpRecord* op) noexcept {
    const OpGate::Verdict verdict =
        gate_.check(op->scope, !op->deletes_var && !op->internal, op->no_skip, &op->error, op->uses, op->num_uses);
    if (verdict.error == nullptr) [[likely]]
      return false;
    if (verdict.error != &op->error) op->error = *verdict.error;
    if (verdict.scope_cancelled) errors().raise(op->error, op->name_view(), op->owner);
    if (observing_ != nullptr) [[unlikely]]
      observing_->ended(*op, verdict.cancelled ? OpOutcome::kCancelled : OpOutcome::kSkipped, &op->error);
    return true;
  }
  // The op's error, or null: what observers are told at its end.
  [[nodiscard]] static const std::exception_ptr* error_of(const OpRecord* op) noexcept {
    return op->error != nullptr ? &op->error : nullptr;
  }
  // For a no_skip op about to run: sets ctx.input_error and input_error_var from its first variable with an error.
  void note_input_error(const OpRecord* op, RunContext& ctx) const noexcept;
  void finish(OpRecord* op, TaskList& ready, const VarSignal* signal) noexcept;
  void complete_uses(OpRecord* op, TaskList& ready, const VarSignal* signal) noexcept;
  // Whether op's use `i` names a variable its replayed graph of stream ops ends.
  [[nodiscard]] bool ends_graph_var(const OpRecord* op, std::uint32_t i) const noexcept;
  [[nodiscard]] const VarSignal* ran_signal() const noexcept;
  [[nodiscard]] const VarSignal* learned_signal(OpRecord* op, std::span<const FrontierEntry> learned) noexcept;
  [[nodiscard]] const VarSignal* skipped_signal(const OpRecord* op) const noexcept;
  // The op is done: out of the in-flight count, its record back to the pool, and out of its scope's count (after the
  // first two, so that a WaitForScope that returns finds the op retired).
  void retire(OpRecord* op) noexcept {
    if (op->replay_completion) [[unlikely]] {
      graphs_.retire_async(op);
      return;
    }
    ScopeState* scope = op->scope;
    in_flight_.leave();
    op->recycle();
    if (scope != nullptr) [[unlikely]]
      ScopeState::op_retired(scope);
  }

  // dispatch.cpp: make_ready() builds a granted op's wait frontier and hands it on, or parks it on the tracker until
  // that frontier has completed (unparked() then submits it).
  void make_ready(OpRecord* op, TaskList& ready) noexcept;
  void park(OpRecord* op) noexcept;
  static void unparked(TrackerWaiter& waiter, std::exception_ptr error) noexcept;
  // stream_ops.cpp
  void take_input_error(OpRecord* op, const std::exception_ptr& error) noexcept;

  // fences.cpp
  void arm_fence(OpRecord* op) noexcept;
  static void fence_done(TimelineWaiter& waiter, const TimelineWaitResult& result) noexcept;
  void promise_fences(OpRecord* op) noexcept;
  static void signal_fences(OpRecord* op, const std::exception_ptr& error) noexcept;

  // waits.cpp
  void forbid_inside_op(const char* api) const;

  // Immutable after construction.
  std::vector<std::unique_ptr<Executor>> executors_;
  // Runs engine-internal ops (waits, error clearing) on the thread that makes them ready. They are tiny, and they
  // must run on the host even when the default executor is a stream executor.
  InlineExecutor internal_;
  const bool has_streams_;  // an executor issues ahead: signals are carried and wait frontiers built
  // The engine's observers (Diagnostics owns them), or null: tested at each event of an op's life (observers.h).
  Observers* observing_ = nullptr;
  // DEPENGINE_PROFILE=1: shutdown() prints the statistics' table to stderr.
  bool profile_at_exit_ = false;
  // Read by every op before it runs; closed by shutdown().
  OpGate gate_;
  // EngineOptions::stall_report_after, or DEPENGINE_STALL_REPORT's; EngineOptions::kNoStallReport when off.
  const std::chrono::milliseconds stall_after_;
  // Stamped on every CPU op as its function starts (execute()), beside the gate, which every op reads too; advanced
  // by the stall watch (run_clock.h).
  RunClock run_clock_;

  VarTable vars_;
  // Completed epochs of every stream axis; stream executors register their axes in start(). Declared before nothing
  // that outlives it: executors are stopped (shutdown) before the tracker is destroyed.
  Tracker tracker_;
  // Set once registering a learned axis found the tracker full (learned_signal); relaxed, a hint.
  std::atomic<bool> tracker_full_{false};
  Diagnostics diagnostics_;
  InFlight in_flight_;
  GraphRunner graphs_{*this};
  // Threads that are not running an op of this engine and are inside it on an op's behalf: a user's thread completing
  // an async op (complete_async) or reaching an op's wait fence (fence_done), a stream executor's completion thread
  // raising a fence. Such a thread may run or retire the op and still be inside the engine or an executor afterwards,
  // so shutdown() frees nothing until none is. Written by those threads only, on a line of its own.
  alignas(support::kCacheLine) std::atomic<std::uint32_t> foreign_threads_{0};

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
