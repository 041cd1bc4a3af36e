// A graph of stream ops, made from the captured ops (stream_graph.h); GraphRunner replays it (graph_runner.cpp).
#include <algorithm>
#include <string>
#include <utility>

#include <depengine/engine/detail/stream_graph.h>

namespace depengine::detail {

StreamGraph::StreamGraph(std::uint32_t engine_id, std::uint32_t executor_index, std::vector<CapturedOp> captured)
    : engine_id_(engine_id), scope_(std::move(captured.front().scope)) {
  const CapturedOp& first = captured.front();
  options_.context = Context{
      .executor = executor_index, .device = first.device, .stream_kind = first.stream_kind, .stream = first.stream};
  options_.priority = first.priority;
  options_.name = "graph of " + std::to_string(captured.size()) + " stream ops";
  std::vector<Use> all;
  steps_.reserve(captured.size());
  for (CapturedOp& op : captured) {
    if (op.stream != options_.context.stream) options_.context.stream = -1;  // the executor chooses
    options_.priority = std::max(options_.priority, op.priority);
    Step& step = steps_.emplace_back();
    step.fn = std::move(op.fn);
    step.no_skip = op.no_skip;
    step.named = op.named;
    step.name = std::move(op.name);
    step.ends_var = op.ends_var;
    step.uses_begin = static_cast<std::uint32_t>(step_uses_.size());
    for (const CapturedOp::Use& use : op.uses) {
      step_uses_.push_back(Use{use.var, use.tag, use.access});
      all.push_back(Use{use.var, use.tag, use.access, use.access == Access::kWrite ? 1U : 0U, op.ends_var});
    }
    step.uses_end = static_cast<std::uint32_t>(step_uses_.size());
  }
  // Sorted by address and folded, as a push folds its variables; a mutation wins over a read.
  std::stable_sort(all.begin(), all.end(), [](const Use& a, const Use& b) { return a.var < b.var; });
  for (const Use& use : all) {
    if (!uses_.empty() && uses_.back().var == use.var) {
      Use& folded = uses_.back();
      if (use.access == Access::kWrite) folded.access = Access::kWrite;
      folded.extra_mutations += use.extra_mutations;
      folded.ends = folded.ends || use.ends;
    } else {
      uses_.push_back(use);
    }
  }
  for (Use& use : uses_) use.extra_mutations = use.extra_mutations > 0 ? use.extra_mutations - 1 : 0;
}

void StreamGraph::drop_functions() noexcept {
  for (Step& step : steps_) step.fn.reset();
  recorded_.reset();
}

void StreamGraph::clear_ended() const noexcept {
  for (const Step& step : steps_) {
    if (step.ends_var) step_uses(step)->var->error = nullptr;
  }
}

void StreamGraph::count_extra_mutations() const noexcept {
  for (const Use& use : uses_) {
    for (std::uint32_t k = 0; k < use.extra_mutations; ++k) use.var->count_mutation();
  }
}

}  // namespace depengine::detail
