// StreamGraph: a captured graph of stream ops, replayed as one stream op (graph.h, "Graphs of stream ops").
//
// On an engine with a stream executor, Capture records stream ops of one executor and one device (graph_capture.cpp).
// A replay pushes one op: it uses every variable the steps use (mutating those that any step mutates), so it is
// ordered against pushes before and after it like one op, and it is issued on one stream chosen as for any stream
// op, with the device waits that op needs. At issue it runs the steps (stream_graph.cpp):
//   - on an executor that records work (StreamFacet::records_work: a stream executor on CUDA or HIP): the first replay
//     records what the steps' functions enqueue into a graph (StreamFacet::replay_recorded) and launches it; later
//     replays launch the recorded graph again, without calling the functions. One launch per replay, whatever the
//     number of steps. (The steps are all on one device, so one recording serves every stream of it.)
//   - otherwise (host streams): the steps' functions, in captured order, on that one stream.
// The steps' own dependencies need no device waits: one stream runs them in captured order.
//
// Cancellation: the steps share one CancelScope or none (graph_capture.cpp refuses a capture that mixes them), which
// the replay's op belongs to, or the replay's own (ReplayOptions::scope): cancelled before the op is issued, the whole
// replay completes with Cancelled, unrun; once issued, it runs whole, as any stream op whose work was enqueued.
//
// Errors, per step on host streams as if each step were pushed: a step whose variable carries an error is skipped
// (unless no_skip) and passes it on to what it mutates; a step that throws attaches its error to what it mutates and
// the steps after it that use those variables are skipped. Recorded work runs as a whole: an input error skips the
// whole replay, and a function that throws while recording fails it (its error on every variable it mutates). On
// every backend, what the replay's op faces as one op is the whole replay's: a failed stream it waits for skips it
// (OpRecord::stream_graph), and a device failure while it runs reaches every variable it mutates.
//
// Thread safety: after capture only the replay counter (an atomic), the steps' functions and the recorded work are
// touched, by the runs of this graph, on the issuing thread of the graph's one executor (one thread at a time: the
// stream executor issues from one thread at a time, and hands over under its queue's mutex).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include <depengine/engine/detail/graph_plan.h>
#include <depengine/engine/push_options.h>
#include <depengine/executors/executor.h>

namespace depengine::detail {

class StreamGraph {
 public:
  struct Use {
    VarState* var = nullptr;
    std::uint32_t tag = 0;  // the handle's generation
    Access access = Access::kRead;
    // In uses(): the steps that mutate the variable, less the one mutation the replay's own completion counts.
    std::uint32_t extra_mutations = 0;
    // In uses(): a step ends the variable (CapturedOp::ends_var), so the replay leaves it clean whatever happens to it
    // (its op's completion does not poison it: EngineCore::complete_uses, take_input_error).
    bool ends = false;
  };
  struct Step {
    OpFunction fn;
    bool no_skip = false;
    bool named = false;
    OpName name;
    std::uint32_t uses_begin = 0;  // [uses_begin, uses_end) of step_uses()
    std::uint32_t uses_end = 0;
    bool ends_var = false;  // CapturedOp::ends_var: its one variable's error is cleared once the replay has run
    [[nodiscard]] std::string_view name_view() const noexcept { return named ? name.view() : std::string_view{}; }
  };

  // Takes stream ops captured in push order, all on `executor_index` (the engine's index of their executor) and on one
  // device, from the engine whose id is `engine_id`.
  StreamGraph(std::uint32_t engine_id, std::uint32_t executor_index, std::vector<CapturedOp> captured);

  [[nodiscard]] std::uint32_t engine_id() const noexcept { return engine_id_; }
  [[nodiscard]] std::size_t size() const noexcept { return steps_.size(); }
  // The replay's placement (the steps' device and kind; their stream if they all named the same one, else -1) and
  // priority (the highest of the steps').
  [[nodiscard]] const PushOptions& options() const noexcept { return options_; }
  // The CancelScope the steps were captured with (one for all of them, or none: null), which a replay's op belongs to
  // unless the replay names its own (ReplayOptions::scope).
  [[nodiscard]] ScopeState* scope() const noexcept { return scope_.get(); }
  // Every variable the steps use, once, sorted by address (as a push folds them): mutated if any step mutates it.
  [[nodiscard]] const std::vector<Use>& uses() const noexcept { return uses_; }
  [[nodiscard]] std::vector<Step>& steps() noexcept { return steps_; }
  [[nodiscard]] const std::vector<Step>& steps() const noexcept { return steps_; }
  [[nodiscard]] const Use* step_uses(const Step& step) const noexcept { return step_uses_.data() + step.uses_begin; }
  // Clears the error of each variable a step ends (Step::ends_var), once a recorded replay has run or been skipped.
  void clear_ended() const noexcept;
  // Counts, on every variable the steps mutate, the mutations beyond the one the replay's own completion counts. Call
  // once per replay, run or skipped, while the replay's op holds its variables (before it completes).
  void count_extra_mutations() const noexcept;
  // Which replay this is, from 0, in the order the replays are issued.
  [[nodiscard]] std::int64_t next_replay() noexcept {
    // relaxed: a count; replays are issued one at a time by the executor's issuing thread.
    return replays_.fetch_add(1, std::memory_order_relaxed);
  }
  // Destroys the steps' functions and the recorded work, with no replay in flight: the engine is being destroyed
  // (graph_lifetime.h).
  void drop_functions() noexcept;
  // The work recorded by the first replay on an executor that records work; null until then.
  [[nodiscard]] std::unique_ptr<RecordedOps>& recorded() noexcept { return recorded_; }

 private:
  const std::uint32_t engine_id_;
  ScopeHold scope_;  // the graph keeps the captured scope alive, as a GraphPlan's ops do
  PushOptions options_;
  std::vector<Use> uses_;
  std::vector<Step> steps_;
  std::vector<Use> step_uses_;
  std::unique_ptr<RecordedOps> recorded_;
  std::atomic<std::int64_t> replays_{0};
};

}  // namespace depengine::detail
