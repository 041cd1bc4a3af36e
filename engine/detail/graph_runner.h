// GraphRunner: the engine's graph machinery (Engine::Capture and Engine::Replay; graph.h for the contract). It captures
// a step's pushes (graph_capture.cpp), plans them (a GraphPlan, graph_plan.h; on an engine with a stream executor a
// StreamGraph, stream_graph.h) and replays them (graph_runner.cpp). What ends with a Graph handle is GraphLifetime's.
//
// The runner and the core (engine_core.h) meet at a narrow interface, and nowhere else:
//   runner -> core: a replay's admission and its ops counted out (InFlight: admit_many, leave); the variables' locks
//     and queues, where a replay's joins are appended and completed as a push's uses are (var_queue.h); the error log;
//     the trace; the op gate (op_gate.h); and the core's own calls route() (a pushed op granted by a join's
//     completion), release_hold() (the record a replayed async op's Completion points at), submit() (the one pushed op
//     a replay of stream ops is) and the record makers for a capture's deletions.
//   core -> runner: execute() for a replayed op an executor runs, grant_join() for a join its queue granted,
//     complete_async() and retire_async() for the record of a replayed async op, and the Capture and Replay calls.
// A replayed op passes the gate and runs its function as a pushed op does (EngineCore::call, call_async); it completes
// through the plan's edges (complete()) instead of queues, which is all that differs.
//
// Thread safety: capture on the capturing thread; replays from any thread, concurrently; the rest on the threads that
// run, grant and complete the replayed ops.
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <vector>

#include <depengine/engine/detail/graph_plan.h>
#include <depengine/engine/detail/op_record.h>
#include <depengine/engine/graph.h>
#include <depengine/engine/run_context.h>
#include <depengine/executors/executor.h>

namespace depengine::detail {

class EngineCore;
class StreamGraph;

class GraphRunner {
 public:
  explicit GraphRunner(EngineCore& core) noexcept : core_(core) {}
  GraphRunner(const GraphRunner&) = delete;
  GraphRunner& operator=(const GraphRunner&) = delete;

  // graph_capture.cpp (Engine::Capture): begin_capture() starts recording the calling thread's pushes; a push made
  // while it records comes to capture() (deletions to capture_deletion()) instead of being published.
  void begin_capture();
  void abandon_capture() noexcept;
  [[nodiscard]] Graph end_capture();
  [[nodiscard]] bool capturing() const noexcept;
  // NewVariable on the capturing thread: a variable the step may delete (graph.h, "Variables of a graph").
  static void note_made(const Var& var);
  void capture(OpRecord* op);
  void capture_deletion(Var var, OpFunction deleter, const PushOptions& options);
  // The real deletion of each variable a graph owned (graph_lifetime.h), reporting a refused one on stderr.
  void delete_all_owned(std::vector<OwnedVar>& owned) noexcept;

  // graph_runner.cpp (Engine::Replay).
  void replay(const Graph& graph, const ReplayOptions& options);
  // Runs replayed op `first` on `worker` (ExecutorHost::execute), and the ops chained to it (graph_plan.h, Chains);
  // their other successors to `ready`.
  void execute(GraphOp* first, int worker, TaskList& ready) noexcept;
  // A join its queue granted: grants the ops it stands for (graph_plan.h, Joins). `from`: the trace id of the op whose
  // completion granted it, for arrows to those ops; 0: untraced.
  // `completed`: the op whose completion granted it on this thread, or null at the replay (made_ready()).
  void grant_join(GraphJoin* join, TaskList& ready, const void* completed, std::uint64_t from = 0) noexcept;
  // The Completion of a replayed async op, whose record is `record`, was called with `error`.
  void complete_async(OpRecord* record, const std::exception_ptr& error, TaskList& ready) noexcept;
  // Both parties of a replayed async op are done (EngineCore::release_hold): the record goes back, the op retires.
  void retire_async(OpRecord* record) noexcept;

 private:
  // What complete() returns when no chained op is to run next.
  static constexpr std::uint32_t kUnchained = ~std::uint32_t{0};
  // Completes op `index` of `instance`, planned as `planned`: poisons and counts what it mutates, completes the joins
  // it was the last to cover, and grants its successors. kRanHere: its function returned on this thread (execute());
  // false for an async op's Completion. With it, a sink retires (graph_plan.h, Retirement), and a chained op whose
  // completion made nothing else ready does not grant its successor but returns its index, for the caller to run next
  // (graph_plan.h, Chains; not while an observer or a trace watches the replay). Else it returns kUnchained.
  template <bool kRanHere>
  [[gnu::always_inline]] inline std::uint32_t complete(GraphInstance* instance, std::uint32_t index,
                                                       const GraphPlan::Op& planned, const std::exception_ptr& error,
                                                       TaskList& ready) noexcept;
  // For a no_skip op about to run with `ctx`: the first of its `num_uses` inputs `uses` that carries an error, and that
  // error (RunContext::input_error, input_error_var), if any.
  void note_input_error(const GraphPlan::Use* uses, std::uint32_t num_uses, RunContext& ctx) const noexcept;
  // Groups of accumulations (graph_plan.h, Groups): whether `op` holds the token of each group it is a member of,
  // taking them all at once (false: parked on one, holding none, to be made ready again when its holder completes);
  // its completion's freeing of each; and the unparking of a free token's first parked member, handed the token if it
  // is in that group alone. Members woken go to `ready`. Each requires the token's lock held but take_tokens and
  // hand_on_tokens, which take them.
  [[nodiscard]] static bool take_tokens(GraphOp& op, const GraphPlan::Op& planned, TaskList& ready) noexcept;
  static void hand_on_tokens(GraphOp& op, const GraphPlan::Op& planned, TaskList& ready) noexcept;
  static GraphOp* wake_first(GroupToken& token) noexcept;
  // Replayed op `op` has its last grant: to `ready`, told to the observers first (the one place a replayed op becomes
  // ready, but for those a join grants at append, which replay() tells after letting the locks go). `completed`: the
  // op (a pushed op's record or a GraphOp) whose completion on this thread made it ready, its ready time that
  // completion's end (observers.h); null: made ready by the Replay call, ready at its time.
  void made_ready(GraphOp& op, TaskList& ready, const void* completed) noexcept;
  // A sink op or a join of `instance` is done; the last frees the instance and counts its ops out of flight.
  void retire_instance(GraphInstance* instance) noexcept;
  // A replay of a graph of stream ops: one pushed op (stream_graph.h); and that op's function, issued on a stream.
  void replay_streams(const std::shared_ptr<StreamGraph>& graph, ScopeState* scope);
  void run_stream_graph(StreamGraph& graph, const RunContext& outer, std::uint64_t owner);
  // Why `op` cannot join a graph of stream ops whose first op is `first` (null: the graph is empty), or null.
  [[nodiscard]] const char* refuse_in_stream_graph(const OpRecord* op, const CapturedOp* first) const noexcept;

  EngineCore& core_;
};

}  // namespace depengine::detail
