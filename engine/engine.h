// depengine's public API: an Engine runs the functions you push as soon as, and only when, the variables they use
// allow.
//
//   depengine::EngineOptions options;
//   auto pool = options.emplace<depengine::ThreadPoolExecutor>();  // an ExecutorId<ThreadPoolExecutor>
//   depengine::Engine engine(std::move(options));
//   depengine::ThreadPoolExecutor& workers = engine.executor(pool);  // typed: no index, no cast (executor_id.h)
//   depengine::Var a = engine.NewVariable(), b = engine.NewVariable();
//   engine.Push([&] { x = 1; }, {}, {a});                // mutates a
//   engine.Push([&] { y = x + 1; }, {a}, {b});           // reads a, mutates b: runs after the first
//   engine.WaitForVar(b);                                // y == 2 here
//
// The contract (docs/architecture.md §2):
// - Order. Ops that use a variable take effect in push order: consecutive reads run concurrently; a mutation waits
//   for every earlier read and mutation of it and holds back every later use. Happens-before: writes made by an op
//   that mutates V are visible to every op pushed later that reads or mutates V, and an op's reads of V happen before
//   any later mutation of V starts.
// - Any thread may push, concurrently. The engine orders all pushes in one total order that respects each thread's
//   program order, and every variable's queue follows it, so concurrent pushers can never deadlock each other.
// - Lists. A variable named twice counts once; one both read and mutated counts as mutated.
// - Errors. An op that throws (or passes an error to its Completion) attaches the exception to every variable it
//   mutates. A later op that uses a variable carrying an error is skipped and passes the error on to the variables it
//   mutates, unless pushed with no_skip. An op keeps its first error; a variable keeps the first error attached to it
//   until a wait clears it. Nothing terminates the process and no error is dropped silently: each error an op raises
//   is rethrown by a wait or handed, with the op's name, to EngineOptions::error_sink (by default, stderr).
// - Waits. WaitForVar(v) returns once every op pushed on v before the call has completed, then rethrows v's error
//   and clears it (v reads clean afterwards). WaitForAll() returns once no op is in flight (an async op is until its
//   Completion was called and its function returned), then rethrows the first error that no wait has reported yet,
//   if any. It clears the errors that the calling thread's ops attached to variables (an op pushed from inside an op
//   belongs to the thread that pushed that op), and hands the calling thread's other unreported errors to the error
//   sink. So with one pushing thread a wait clears what it reports and WaitForAll clears everything, as in MXNet;
//   with several, one thread's WaitForAll never takes from another thread the error its own WaitForVar would rethrow.
//   Both waits run queued work on the calling thread while they wait (and, with ThreadPoolOptions::waiters_work, work
//   as one of the pool's workers). Called from inside a running op of this engine they would wait on that op or on
//   work queued behind it, so they throw Error instead of hanging.
// - Back-pressure. At most EngineOptions::max_in_flight ops are pushed and not yet completed. A push past the bound
//   waits (running queued work meanwhile; a pool with ThreadPoolOptions::work_first may also have a push run its own
//   op when the workers are behind; with EngineOptions::help_above, a push far ahead of the workers runs some of their
//   queued ops first, without waiting). So an op may run on the thread that pushes, and must never wait for anything
//   that thread does after its push (a lock it holds, a flag it sets later). Pushes from inside a running op are
//   exempt: the op they would wait for may be the one pushing. An async op whose Completion only the blocked pushing
//   thread would call cannot complete, so call completions from elsewhere or raise the bound.
// - Deletion. DeleteVariable(v, deleter) is a mutation of v ordered after everything pushed on v before it; the
//   deleter runs then (even if v carries an error), exactly once, and every copy of the handle is dead from the call.
// - Fences. PushOptions::wait_fences and signal_fences order ops through user timelines as well as variables
//   (engine/fence.h): an op runs once its wait fences are reached and raises its signal fences when it completes (or
//   fails them with its error). An op whose wait fence is never reached stays in flight, like an unfinished
//   Completion.
// - Replay. Capture(body) records the pushes that body makes into a Graph without running them; Replay(graph) then
//   behaves exactly as if they were pushed again, in captured order, at a fraction of the cost (graph.h).
// - Cancellation. PushOptions::scope names a CancelScope (cancel_scope.h). Cancelling it makes every op of the scope
//   that has not started complete with Cancelled (errors.h) without running, an error that flows on like any other;
//   running ops finish (they may poll RunContext::cancelled()); deletions still run. WaitForScope(scope) waits for the
//   scope's ops. Replay(graph, {.scope = &s}) puts a replay's ops in scope s. ClearErrors(vars), ordered like a
//   mutation of each, clears what a cancelled epoch left, so the next one starts clean (cancel_scope.h, "Abort an
//   epoch, start the next"). With EngineOptions::cancel_on_destruction, ~Engine() cancels whatever has not started.
// - Shutdown. ~Engine() waits for every pushed op to complete, then calls the functions registered with AtShutdown,
//   then stops the executors. Every error no wait reported goes to the error sink. Once destruction has begun, only
//   the ops still running may push (the rest of their work); a push from anywhere else throws Error.
// - Traces. StartTrace(path), or the environment variable DEPENGINE_TRACE=path when an engine is made, records every
//   op pushed from then on; StopTrace(), or ~Engine(), writes a Chrome trace-event JSON file (Perfetto,
//   chrome://tracing): a lane per host thread and per stream, a slice per op with its name and variables, an arrow
//   per dependency (from a CPU op to the ops its completion made ready; from a stream op to each op ordered after it,
//   marked as a device wait, an elided one, or a host wait), and counters of ops in flight and device waits issued and
//   elided (engine/detail/trace_recorder.h). Each slice also says what its op waited on last (a variable and the op
//   that held it, a fence and the op that raised it, a stream op's device work, room under max_in_flight, or nothing)
//   and how long, from its push to that grant; the file ends with the critical path of the recorded window, which
//   TraceCriticalPath() prints too (docs/pictures.md). With DEPENGINE_TRACE, the first engine of the process writes
//   path, later ones path.2, path.3, ... Tracing adds a few microseconds per op; off, one load per op. A long or stuck
//   run need not end to leave a trace: FlushTrace() writes what has been recorded so far, and so does a stall report
//   (EngineOptions::stall_report_after), which marks in it the ops still in flight; the file is replaced whole, so a
//   run killed at any moment leaves the last one written.
//
// Thread safety: every member may be called from any thread, concurrently, except the destructor.
// Cost: Push takes one spinlock per distinct variable and a pooled record. In steady state it allocates nothing for ops
// that list at most OpRecord::kKeptVars (64) variables (pooled records keep the arrays that more than
// OpRecord::kInlineVars (6) need) and have a function of at most OpFunction::kInlineBytes (56) bytes with a noexcept
// move constructor; longer lists and larger functions cost one allocation each. NewVariable takes a mutex (and
// allocates when the variable table grows). Waits take mutexes.
#pragma once

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <depengine/engine/cancel_scope.h>
#include <depengine/engine/detail/op_function.h>
#include <depengine/engine/engine_hook.h>
#include <depengine/engine/errors.h>
#include <depengine/engine/executor_id.h>
#include <depengine/engine/graph.h>
#include <depengine/engine/observer.h>
#include <depengine/engine/op_statistics.h>
#include <depengine/engine/push_options.h>
#include <depengine/engine/run_context.h>
#include <depengine/engine/var.h>
#include <depengine/executors/executor.h>

namespace depengine {

namespace detail {
struct OpRecord;
}  // namespace detail

// The function shapes Push accepts: fn(const RunContext&) or fn().
template <class F>
concept SyncOpFunction = (std::invocable<std::decay_t<F>&, const RunContext&>) || (std::invocable<std::decay_t<F>&>);

// The function shapes PushAsync accepts: fn(const RunContext&, Completion) or fn(Completion).
template <class F>
concept AsyncOpFunction = (std::invocable<std::decay_t<F>&, const RunContext&, Completion>) ||
                          (std::invocable<std::decay_t<F>&, Completion>);

struct EngineOptions {
  // The running policies, owned by the engine. PushOptions::context.executor names one (an ExecutorId from add or
  // emplace, or an index into this list); the first is the default. At least one is required.
  std::vector<std::unique_ptr<Executor>> executors{};

  // Appends `executor` to `executors` and returns its typed id (executor_id.h), which names it in push contexts and
  // reaches it as an E through Engine::executor(id), on the engine built from these options only. Throws Error for a
  // null executor (adding nothing). Allocates as the vector's push_back does.
  template <std::derived_from<Executor> E>
  ExecutorId<E> add(std::unique_ptr<E> executor) {
    if (executor == nullptr) throw Error("EngineOptions::add: the executor is null");
    const std::uint32_t serial = executor_ids_.get();
    executors.push_back(std::move(executor));
    return ExecutorId<E>(static_cast<std::uint32_t>(executors.size() - 1), serial);
  }
  // add(std::make_unique<E>(args...)).
  template <std::derived_from<Executor> E, class... Args>
  ExecutorId<E> emplace(Args&&... args) {
    static_assert(std::constructible_from<E, Args&&...>,
                  "EngineOptions::emplace<E>(args...): E has no constructor taking these arguments");
    return add(std::make_unique<E>(std::forward<Args>(args)...));
  }
  // The most ops pushed and not yet completed (see Back-pressure above). At least 1.
  std::size_t max_in_flight = std::size_t{1} << 16;
  // Helping pushes, off by default (0). Otherwise a push or replay from a thread outside every engine's ops that finds
  // more than help_above ops in flight first runs queued ready ops on its own thread, until the count falls by a
  // quarter of help_above or none is queued; it never waits for work (see Back-pressure above). So a pusher faster than
  // the workers stays about help_above ops ahead of them, where what those ops touch is still in the caches, and works
  // as one more worker meanwhile. It pays on ops of several variables that do work (1024 ran randsum with 1 us
  // bodies in about half the time on 2 cores); on empty ops of one variable each, it costs (docs/performance.md,
  // "Helping pushes"). Must be under max_in_flight. Ignored by engines with a stream executor: their pushing thread
  // sets the devices' pace.
  std::size_t help_above = 0;
  // Receives each error that no wait rethrew when the engine stops keeping it (see Errors above; errors.h). Null: one
  // line each on stderr, for the first ErrorLog::kStderrLines (16) errors, and a count of the rest at destruction.
  ErrorSink error_sink{};
  // Stall reports, on by default. When ops are in flight and none has completed for stall_report_after, the engine
  // hands stall_sink a report, once per stall: a first line that says whether ops wait for what has not happened
  // ("stalled") or only run long (busy, not a stall), then InFlightReport(), and a last line saying how to change or
  // silence these reports. It also writes the trace recorded so far if one is on, with the ops in flight marked, and
  // names the file. The watch is a thread per engine that wakes every stall_report_after / 16 (a report comes up to
  // two such periods late); the only cost to ops is the stamp each CPU op takes as it starts, for "running for", which
  // is paid whether reports are on or off (engine/detail/run_clock.h).
  // kDefaultStallReportAfter is generous: a healthy program whose engine completes nothing at all for a minute is rare
  // (one op running long is not enough to be called a stall), while a person or a CI job usually waits longer than
  // that before killing a hung run. kNoStallReport turns reports off. Zero is refused: it meant "off" when reports
  // were off by default. The environment variable DEPENGINE_STALL_REPORT, when set, overrides this value: a number of
  // seconds, or 0 (or "off") for kNoStallReport.
  static constexpr std::chrono::milliseconds kDefaultStallReportAfter{std::chrono::seconds(60)};
  static constexpr std::chrono::milliseconds kNoStallReport = std::chrono::milliseconds::max();
  std::chrono::milliseconds stall_report_after = kDefaultStallReportAfter;
  std::function<void(std::string_view)> stall_sink{};  // null: stderr
  // ~Engine() cancels every op that has not started (as CancelScope::Cancel does for a scope: deletions still run) and
  // waits only for those that have, so that destroying an engine with many ops queued returns in bounded time. Off:
  // every pushed op runs first.
  bool cancel_on_destruction = false;
  // Observers of every op's life and every executor thread (observer.h), told in this order; not owned: each must
  // outlive the engine. None (and statistics off): the engine pays one predictable branch per event of an op's life.
  std::vector<Observer*> observers{};
  // Keeps per-name statistics of the ops (op_statistics.h), read with Engine::Statistics(). The environment variable
  // DEPENGINE_PROFILE=1 turns them on whatever this says, and also prints their table to stderr when the engine is
  // destroyed; DEPENGINE_PROFILE=0 (or unset) leaves this option in charge.
  bool statistics = false;

  // Which EngineOptions issued an id (executor_id.h, Provenance): set by the first add. Not for users to set.
  detail::OptionsSerial executor_ids_{};
};

class Engine {
 public:
  // Starts the executors. Throws Error if options has no executor, a null one, max_in_flight == 0, a help_above of
  // max_in_flight or more, a stall_report_after of zero or below, a null observer, a DEPENGINE_PROFILE other than 0 and
  // 1, a DEPENGINE_STALL_REPORT that is not a number of seconds (or off), or a DEPENGINE_ENGINE_TYPE other than
  // NaiveEngine (every CPU executor replaced by an InlineExecutor) and ThreadedEngine (the default).
  explicit Engine(EngineOptions options);
  // Waits for every pushed op to complete, then stops the executors. Must not be called from inside an op.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // A new variable, with version 0 and no error.
  [[nodiscard]] Var NewVariable();

  // Pushes `fn`, which reads `reads` and mutates `mutates`. It may run before Push returns (it does on the inline
  // executor). Throws Error, pushing nothing, for an empty fn (a null function pointer or an empty std::function), a
  // null, deleted or foreign variable, an unknown context, or a placement the context's stream executor does not have
  // (a device or stream index out of range).
  template <class F>
  void Push(F&& fn, VarList reads, VarList mutates, const PushOptions& options = detail::default_push_options()) {
    static_assert(SyncOpFunction<F>,
                  "Push(fn, ...): fn must be callable as fn(const RunContext&) or fn(); "
                  "a function that completes later takes a Completion and is pushed with PushAsync");
    check_not_empty(fn, "Push");
    detail::OpRecord* op = begin_push(options, false);
    emplace<false>(op, std::forward<F>(fn));
    finish_push(op, reads, mutates);
  }

  // Pushes an asynchronous op: `fn` receives a Completion and the op completes when that is called (see
  // run_context.h), from any thread, possibly after fn returned. If fn throws before calling it, the op completes
  // with that exception, and a later call of the Completion is absorbed (run_context.h). Otherwise as Push.
  template <class F>
  void PushAsync(F&& fn, VarList reads, VarList mutates, const PushOptions& options = detail::default_push_options()) {
    static_assert(AsyncOpFunction<F>,
                  "PushAsync(fn, ...): fn must be callable as fn(const RunContext&, Completion) or fn(Completion)");
    check_not_empty(fn, "PushAsync");
    detail::OpRecord* op = begin_push(options, true);
    emplace<true>(op, std::forward<F>(fn));
    finish_push(op, reads, mutates);
  }

  // Pushes `fn`, which reads `reads`, mutates `mutates` and accumulates into `accumulates` (docs/accumulate.md): a
  // mutation whose order among the accumulations next to it in push order does not matter, such as adding into a sum.
  // Consecutive accumulations of a variable V (no read or mutation of V pushed between them) form a group; the group
  // as a whole comes after every earlier use of V and before every later one, as one mutation would, and its members
  // each run alone on V (mutual exclusion), one after another in the order they become ready (their other variables
  // and fences allow them to run), not in push order. Each member counts as a mutation: it moves V's version on, and
  // its error poisons V for the members that start after it and for every later use. Happens-before: a member's
  // writes are visible to the members that run after it and to every op pushed after the group; the writes of every
  // op before the group are visible to each member. A variable in two lists counts once, as the strongest use:
  // mutate, then accumulate, then read. Otherwise as Push (no_skip, scopes, fences, waits, deletion and traces treat
  // an accumulation as a mutation). On a stream executor a member runs alone on V on the device: it is issued once the
  // member before it has been issued, and its stream waits for that member's device work (one device wait at most,
  // none when the two share a stream). Captured (Capture), a group replays as pushed: its members run alone, in the
  // order they become ready in that replay; in a graph of stream ops, in capture order. Throws Error, pushing nothing,
  // where Push would. Cost: as Push, plus, per accumulated variable, one allocation the first time the variable is
  // accumulated into, and one lock of it as the op starts.
  template <class F>
  void PushAccumulate(F&& fn, VarList reads, VarList mutates, VarList accumulates,
                      const PushOptions& options = detail::default_push_options()) {
    static_assert(SyncOpFunction<F>,
                  "PushAccumulate(fn, ...): fn must be callable as fn(const RunContext&) or fn(); "
                  "a function that completes later takes a Completion and is pushed with PushAccumulateAsync");
    check_not_empty(fn, "PushAccumulate");
    detail::OpRecord* op = begin_push(options, false, "PushAccumulate");
    emplace<false>(op, std::forward<F>(fn));
    finish_push(op, reads, mutates, accumulates);
  }
  // PushAccumulate for an asynchronous op (as PushAsync): its members' mutual exclusion lasts until its Completion is
  // called. A member waiting for its tokens holds none (it takes them all at once), so that Completion may wait for
  // any op a mutation's Completion may wait for.
  template <class F>
  void PushAccumulateAsync(F&& fn, VarList reads, VarList mutates, VarList accumulates,
                           const PushOptions& options = detail::default_push_options()) {
    static_assert(AsyncOpFunction<F>,
                  "PushAccumulateAsync(fn, ...): fn must be callable as fn(const RunContext&, Completion) or "
                  "fn(Completion)");
    check_not_empty(fn, "PushAccumulateAsync");
    detail::OpRecord* op = begin_push(options, true, "PushAccumulateAsync");
    emplace<true>(op, std::forward<F>(fn));
    finish_push(op, reads, mutates, accumulates);
  }

  // Schedules the deletion of `var` after every op pushed on it so far; `deleter` (callable as deleter() or
  // deleter(const RunContext&)) runs then, on the executor `options` names (on a stream executor: when the deletion is
  // issued, with RunContext::stream). Every copy of `var` is dead from this call on. Throws Error for an empty deleter
  // (as Push), and a null, deleted or foreign variable.
  template <class F>
  void DeleteVariable(Var var, F&& deleter, const PushOptions& options = detail::default_push_options()) {
    static_assert(SyncOpFunction<F>,
                  "DeleteVariable(var, deleter): deleter must be callable as deleter() or deleter(const RunContext&)");
    check_not_empty(deleter, "DeleteVariable");
    delete_variable(var, detail::OpFunction::make<false>(std::forward<F>(deleter)), options);
  }
  // DeleteVariable with a deleter that does nothing: ends the variable after every op pushed on it.
  void DeleteVariable(Var var) {
    DeleteVariable(var, [] {});
  }

  // Runs `body` on the calling thread and captures the ops it pushes (Push, PushAsync) into a Graph, without running
  // them: see graph.h. Pushes from other threads, and pushes made by ops that run meanwhile, are not captured. Inside
  // the body a push checks its arguments as usual; a push the graph cannot hold throws Error (capturing nothing for
  // it): DeleteVariable of a variable made before the capture (one made inside it is the graph's: graph.h, "Variables
  // of a graph"), an op with wait or signal fences (a fence value cannot repeat), and on an engine with a stream
  // executor (whose graphs hold stream ops of one executor and device: graph.h) a CPU op, an op of another
  // CancelScope than the first op's or of another device; so do waits, StopTrace, Replay and a nested Capture. If the
  // body throws, nothing is captured, the variables it made and deleted are deleted for real, and the exception
  // propagates. Throws Error when called from inside a running op, and for a graph of CPU ops of more than
  // EngineOptions::max_in_flight ops (no replay of it could be admitted).
  template <class F>
  [[nodiscard]] Graph Capture(F&& body) {
    begin_capture();
    try {
      std::forward<F>(body)();
    } catch (...) {
      abandon_capture();
      throw;
    }
    return end_capture();
  }

  // Whether the calling thread is inside a Capture on this engine (for libraries whose pushes cannot be captured).
  [[nodiscard]] bool Capturing() const noexcept;

  // Replays `graph` (see graph.h): as if its ops were pushed again, in captured order. Its ops are admitted together:
  // a replay waits until all of them fit under EngineOptions::max_in_flight (a replay from inside a running op does
  // not wait), and they count as in flight until the last of them completes. Throws Error, replaying nothing, for an
  // empty graph, a graph of another engine, a graph that names a variable deleted since, and inside a Capture.
  // Cost: one spinlock per distinct variable of the graph and no allocation once as many replays of the graph have
  // been in flight at once as will be; each op then costs its run, a check of its inputs' errors, and one atomic grant
  // per dependency among the graph's ops (none for an op that waits for one alone). In traces, a replayed op's slice
  // is named "<name> (replay k)", with arrows among the ops of one replay, and between them and the pushed ops they
  // release or are released by.
  // With options.scope, every op of this replay belongs to that scope instead of the ones it was captured with
  // (graph.h, "Cancel scopes"); without, the replay pays nothing for the option but a branch.
  void Replay(const Graph& graph, const ReplayOptions& options = {});

  // See Waits above. Throws Error for a bad variable, or when called from inside a running op of this engine.
  void WaitForVar(Var var);
  void WaitForAll();
  // Returns once `fence`'s timeline has reached its value (>=), running queued work meanwhile, then rethrows the
  // timeline's failure if it failed. Ops signal their fences when they complete, so the work before a signal is
  // done, on devices too. Throws Error for a null timeline, or when called from inside a running op of this engine.
  void WaitForFence(const Fence& fence);
  // Returns once every op pushed with `scope` so far has completed (cancelled or not), running queued work meanwhile.
  // Rethrows nothing: the ops' errors are on what they mutate. Throws Error when called from inside a running op of
  // this engine.
  void WaitForScope(const CancelScope& scope);
  // Clears the error each of `vars` carries, as an op ordered like a mutation of each: after every op pushed on it
  // before the call (whether it has run, is running or waits, cancelled or not), before every op pushed on it after.
  // So the ops pushed next find the variables clean, and an error an earlier op attaches later, while this call's op
  // waits, is cleared too. Returns at once, waiting for nothing, even past EngineOptions::max_in_flight (as a wait's
  // own ops). The errors it clears count as reported: no later wait rethrows them from these variables, and neither
  // WaitForAll nor the error sink sees them again (an error that also reached a variable not listed stays there).
  // Versions do not move. For resuming after a cancelled epoch (cancel_scope.h, "Abort an epoch, start the next"); to
  // learn an error first, WaitForVar the variable. Any thread, also from inside an op; throws Error, pushing nothing,
  // for a null, deleted or foreign variable, and inside a Capture. Cost: one internal op per variable.
  void ClearErrors(VarList vars);

  // The number of completed mutations of `var`. Exact inside an op that uses var; otherwise a recent value.
  [[nodiscard]] std::uint64_t Version(Var var) const;

  // The name of the op that raised `error` (an exception a wait rethrew: the op's own object, unwrapped, so its type is
  // the user's), while the engine remembers it: an error no wait has reported yet, or one of the last 64 that waits
  // reported. Empty for an op pushed without a name; std::nullopt for an error the engine does not know (or no
  // longer remembers).
  //   try { engine.WaitForVar(loss); } catch (...) { name = engine.FailedOpName(std::current_exception()); }
  [[nodiscard]] std::optional<std::string> FailedOpName(const std::exception_ptr& error) const;

  // What the ops in flight wait for, in words: for each variable with ops waiting, who holds it and who waits; the
  // wait fences not reached yet; a wait cycle among them if there is one (an op waiting on a fence whose signaller
  // queued behind it on a variable), naming the ops and what each waits for; and the pushes blocked at max_in_flight,
  // with how long they have waited and the count they wait for. Exact when the engine has stalled; a snapshot
  // otherwise. Ops appear through the variables they hold or wait on: an op that holds a variable it mutates is named
  // as its holder, with "[running for 12 s]" while its function runs (a CPU op; the time is told only while stall
  // reports are on, to a sixteenth of stall_report_after) and "[async: its function returned; its Completion has not
  // been called]" for an async op waiting for its Completion alone; a running op that only reads or uses no variable,
  // and one waiting on fences alone, are counted but not named. Takes every variable's locks in turn; for diagnosis,
  // not a hot path.
  [[nodiscard]] std::string InFlightReport() const;
  // The same wait-for graph as a Graphviz DOT digraph (render it with `dot -Tsvg`): a node per op the report names,
  // an edge from each op to each op it waits for, labelled with the variable ("v3") or the fence, a node for a fence
  // that no op in flight signals, and the first wait cycle, if there is one, in red (docs/pictures.md). Pushes blocked
  // at max_in_flight and what AtReport hooks add are in the text only. Costs as InFlightReport.
  [[nodiscard]] std::string InFlightReportDot() const;

  // Ops pushed and not yet completed, at some moment during the call. (If completions keep landing between its reads
  // for 64 tries in a row, it returns an upper bound of that count instead.)
  [[nodiscard]] std::size_t InFlight() const noexcept;

  // The per-name statistics of the ops ended so far (op_statistics.h), when EngineOptions::statistics or
  // DEPENGINE_PROFILE=1 turned them on; throws Error otherwise. Any thread; a snapshot while ops run.
  [[nodiscard]] StatisticsTable Statistics() const;

  // The executor that `executor` names: an index of EngineOptions::executors, or an id of these options
  // (executor_id.h). Throws Error if the index is out of range or the id was issued by other options.
  [[nodiscard]] Executor& executor(ExecutorRef executor) const;
  // The executor `id` names, as the type it was added as: no cast. Throws Error as above, and if the executor there is
  // not an E (DEPENGINE_ENGINE_TYPE=NaiveEngine replaced it by an inline one, or the options' vector was edited after
  // the add). A dynamic_cast per call: keep the reference rather than calling this per op.
  template <class E>
  [[nodiscard]] E& executor(ExecutorId<E> id) const {
    Executor& found = executor(ExecutorRef(id));
    if constexpr (std::same_as<E, Executor>) {
      return found;
    } else {
      if (auto* typed = dynamic_cast<E*>(&found)) return *typed;
      throw_not_added_type(id.index(), found);
    }
  }

  // Registers `fn` to be called once when the engine is destroyed, after every op has completed and before the
  // executors stop, unless the returned hook is cancelled (or destroyed) first: see engine_hook.h. For objects that
  // hold what the engine's executors own and may outlive the engine (Buffers).
  [[nodiscard]] ShutdownHook AtShutdown(std::function<void()> fn);
  // Registers `describe`, whose text InFlightReport() appends (an empty string adds nothing), until the returned hook
  // is cancelled or destroyed (engine_hook.h). For objects that keep work waiting outside the engine's queues (Buffers'
  // queued reservations).
  [[nodiscard]] ReportHook AtReport(std::function<std::string()> describe);

  // See Traces above. StartTrace throws Error if a trace is already on. StopTrace waits for every op in flight (as
  // WaitForAll does, without rethrowing errors), then writes the file; it throws Error if no trace is on, if the
  // file cannot be written, or when called from inside a running op of this engine.
  void StartTrace(std::string path);
  void StopTrace();
  // Writes the trace recorded so far (the ops finished by now) to the trace's file, and goes on recording; StopTrace
  // or a later FlushTrace rewrites it. Does not wait for anything; may be called from inside an op. Throws Error if no
  // trace is on or the file cannot be written.
  void FlushTrace();
  // The critical path of the trace on now (of what it recorded so far), or else of the last trace stopped, in words:
  // the chain of ops and waits that set the length of the recorded window, from the op that ended last back through
  // what each op waited for last (a variable and the op that held it, a fence and the op that raised it, a stream op's
  // device work) to a push that waited for nothing recorded, each step with its start and length in ms on the trace's
  // clock; the trace file ends with the same (docs/pictures.md, "The critical path"; scripts/critical_path.py prints it
  // from a file). Throws Error if this engine recorded no trace. For diagnosis: takes the trace's mutex and allocates.
  [[nodiscard]] std::string TraceCriticalPath() const;

 private:
  // A push in three steps, so that the function is constructed in place in the op's record: take a record (throws
  // Error for an unknown context), store the function (if that throws, the record is given back), then gather the
  // variables and publish (throws Error, giving the record back, for a bad variable).
  detail::OpRecord* begin_push(const PushOptions& options, bool async);
  // The same, its errors naming `api` (Push and PushAsync: the two-argument form).
  detail::OpRecord* begin_push(const PushOptions& options, bool async, const char* api);
  // Throws Error for a function that is empty (a null function pointer or an empty std::function), which would
  // otherwise fail only when the op runs.
  template <class F>
  static void check_not_empty(const F& fn, const char* api) {
    if constexpr (detail::NullableCallable<F>) {
      if (fn == nullptr) throw_empty_function(api);
    }
  }
  [[noreturn]] static void throw_empty_function(const char* api);
  [[noreturn]] static void throw_not_added_type(std::uint32_t index, const Executor& found);
  // Whether `executor` is an id that other options issued (executor_id.h, Provenance): a load and a compare for an
  // index. Callers throw with throw_foreign_id, naming the API only on that cold path.
  [[nodiscard]] bool foreign(ExecutorRef executor) const noexcept {
    return executor.options() != 0 && executor.options() != options_serial_;
  }
  [[noreturn]] void throw_foreign_id(ExecutorRef executor, const char* api) const;
  template <bool Async, class F>
  void emplace(detail::OpRecord* op, F&& fn) {
    try {
      function_of(op).emplace<Async>(std::forward<F>(fn));
    } catch (...) {
      abandon_push(op);
      throw;
    }
  }
  static detail::OpFunction& function_of(detail::OpRecord* op) noexcept;
  void abandon_push(detail::OpRecord* op) noexcept;
  void finish_push(detail::OpRecord* op, VarList reads, VarList mutates);
  void finish_push(detail::OpRecord* op, VarList reads, VarList mutates, VarList accumulates);
  void delete_variable(Var var, detail::OpFunction deleter, const PushOptions& options);
  void begin_capture();
  void abandon_capture() noexcept;
  [[nodiscard]] Graph end_capture();

  // The serial of the options the engine was built from (0 when they issued no id); declared before core_, which
  // takes the options. Immutable.
  std::uint32_t options_serial_;
  std::unique_ptr<detail::EngineCore> core_;
};

}  // namespace depengine
