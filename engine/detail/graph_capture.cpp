// Capture: the pushes of a capturing thread recorded instead of published, then planned (graph_plan.h) or made a graph
// of stream ops (stream_graph.h).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>

#include <depengine/engine/detail/engine_core.h>
#include <depengine/engine/detail/graph_lifetime.h>
#include <depengine/engine/detail/graph_plan.h>
#include <depengine/engine/detail/graph_runner.h>
#include <depengine/engine/detail/running.h>
#include <depengine/engine/detail/stream_graph.h>

namespace depengine::detail {

void GraphRunner::begin_capture() {
  if (t_running.capturing != nullptr) {
    throw Error("Capture: called inside a Capture; capture the inner step on its own and replay it after");
  }
  if (t_running.engine == &core_) {
    throw Error(
        "Capture: called from inside a running op of this engine; capture from the thread that pushes the step");
  }
  t_running.capture = new CaptureState();
  t_running.capturing = &core_;
}

bool GraphRunner::capturing() const noexcept { return t_running.capturing == &core_; }

// The body threw: nothing is captured, and the variables it deleted are deleted for real (their handles are dead).
void GraphRunner::abandon_capture() noexcept {
  const std::unique_ptr<CaptureState> state(t_running.capture);
  t_running.capturing = nullptr;
  t_running.capture = nullptr;
  delete_all_owned(state->owned);
}

void GraphRunner::delete_all_owned(std::vector<OwnedVar>& owned) noexcept {
  for (OwnedVar& var : owned) {
    try {
      core_.delete_owned(var);
    } catch (const std::exception& e) {  // out of memory, or the engine is being destroyed: the variable stays unused
      std::fprintf(stderr, "depengine: the deletion of a variable a graph owned failed: %s\n", e.what());
    }
  }
  owned.clear();
}

Graph GraphRunner::end_capture() {
  std::unique_ptr<CaptureState> state(t_running.capture);
  t_running.capturing = nullptr;
  t_running.capture = nullptr;
  std::vector<CapturedOp>& ops = state->ops;
  // Uses captured before a variable's deletion carry the generation it killed (the one before its tag): they name the
  // graph's variable now. A use of an older variable in the same slot, dead since, keeps its tag and fails at replay.
  if (!state->owned.empty()) {
    std::unordered_map<const VarState*, std::uint32_t> tag_of;
    for (const OwnedVar& owned : state->owned) tag_of.emplace(owned.var, owned.tag);
    for (CapturedOp& op : ops) {
      for (CapturedOp::Use& use : op.uses) {
        const auto it = tag_of.find(use.var);
        if (it != tag_of.end() && use.tag + 1 == it->second) use.tag = it->second;
      }
    }
  }
  // Deletes the owned variables (graph_lifetime.h) if the graph is refused below.
  std::unique_ptr<GraphLifetime> lifetime;
  try {
    lifetime = std::make_unique<GraphLifetime>(core_, state->owned);
  } catch (...) {  // out of memory: the variables the body deleted are deleted for real
    delete_all_owned(state->owned);
    throw;
  }
  if (!core_.has_streams() && ops.size() > core_.in_flight().max()) {
    throw Error("Capture: the graph has " + std::to_string(ops.size()) +
                " ops, more than EngineOptions::max_in_flight (" + std::to_string(core_.in_flight().max()) +
                "), so no replay of it could be admitted; raise the bound or capture a smaller step");
  }
  if (ops.size() > GraphPlan::kMaxOps) {
    throw Error("Capture: the graph has " + std::to_string(ops.size()) + " ops, more than a graph holds (" +
                std::to_string(GraphPlan::kMaxOps) + "); capture a smaller step");
  }
  if (ops.empty()) return Graph();
  if (core_.has_streams()) {
    const std::uint32_t executor = core_.executor_index(ops.front().executor);
    auto streams = std::make_shared<StreamGraph>(core_.vars().engine_id(), executor, std::move(ops));
    lifetime->hold(nullptr, streams.get());
    return Graph(nullptr, std::move(streams), std::move(lifetime));
  }
  auto plan = std::make_shared<GraphPlan>(core_.vars().engine_id(), std::move(ops));
  lifetime->hold(plan.get(), nullptr);
  return Graph(std::move(plan), nullptr, std::move(lifetime));
}

// NewVariable on the capturing thread: a variable the body may delete (graph.h, "Variables of a graph").
void GraphRunner::note_made(const Var& var) { t_running.capture->made.insert(var.state_); }

// DeleteVariable inside a capture: the end of a variable made in it, captured as an op whose one use clears the
// variable's error at each replay; the deleter waits for the graph's end (graph_lifetime.h). Every handle to the
// variable dies now, as at a pushed deletion.
void GraphRunner::capture_deletion(Var var, OpFunction deleter, const PushOptions& options) {
  VarState* state = core_.vars().checked(var, "DeleteVariable");
  CaptureState& recorded = *t_running.capture;
  if (!recorded.made.contains(state)) {
    throw Error(
        "DeleteVariable inside Capture: the variable was made before the capture, and every replay would delete it "
        "again; delete it after the replays that use it (a capture may delete only the variables made in it)");
  }
  // Built first, so that nothing throws once the op is captured; without the scope, which a deletion ignores.
  OwnedVar owned{state, 0, std::move(deleter), PushOptions{}};
  owned.options.context = options.context;
  owned.options.priority = options.priority;
  owned.options.name = options.name;
  recorded.owned.reserve(recorded.owned.size() + 1);
  // deletes_var tells capture() that this is a variable's end; the deleter waits for the graph's end.
  capture(core_.deletion_record(state, var.generation_, OpFunction::make<false>([] {}),
                                owned.options));  // throws if refused
  state->lock();
  // relaxed: under the lock, as publish() moves a deleted variable's generation on.
  owned.tag = state->generation.load(std::memory_order_relaxed) + 1;
  state->generation.store(owned.tag, std::memory_order_relaxed);
  state->unlock();
  recorded.owned.push_back(std::move(owned));
}

// On an engine with a stream executor a graph holds stream ops of one executor, device and stream kind, replayed as
// one stream op (stream_graph.h): why `op` cannot join a graph whose first op is `first` (null: the graph is empty), or
// null.
const char* GraphRunner::refuse_in_stream_graph(const OpRecord* op, const CapturedOp* first) const noexcept {
  if (!op->executor()->issues_ahead()) {
    return " inside Capture: the engine has a stream executor, and a graph then holds stream ops only (it replays as "
           "one stream op); push CPU ops outside the capture, or capture them with an engine without streams";
  }
  if (first != nullptr && first->scope.get() != op->scope) {
    return " inside Capture: the ops of a graph of stream ops share one CancelScope, or none (it replays as one op, "
           "which belongs to that scope); capture ops of another scope in a graph of their own, or give each replay "
           "its scope (ReplayOptions::scope)";
  }
  if (first != nullptr &&
      (first->executor != op->executor() || first->device != op->device() || first->stream_kind != op->stream_kind())) {
    return " inside Capture: a graph of stream ops holds ops of one stream executor, one device and one kind of stream "
           "(it replays as one stream op); capture the others in a graph of their own";
  }
  return nullptr;
}

// A push made inside a capture: checks that a graph can hold it, then moves it from its record into the capture.
void GraphRunner::capture(OpRecord* op) {
  const char* refusal = nullptr;
  if (op->waits_fences || op->signals_fences) {
    refusal =
        " inside Capture: an op with wait or signal fences cannot be captured (a fence value cannot repeat); wait for "
        "or signal the fence from an op pushed outside the capture";
  } else if (core_.has_streams()) {
    const std::vector<CapturedOp>& ops = t_running.capture->ops;
    refusal = refuse_in_stream_graph(op, ops.empty() ? nullptr : &ops.front());
  }
  CapturedOp captured;
  captured.scope = ScopeHold(op->scope);
  captured.executor = op->executor();
  captured.priority = op->priority();
  captured.no_skip = op->no_skip;
  captured.async = op->async;
  captured.device = op->device();
  captured.stream_kind = op->stream_kind();
  captured.stream = op->stream();
  captured.ends_var = op->deletes_var;
  try {
    if (op->named) {
      captured.name = op->name;
      captured.named = true;
    }
    // A push folds its uses as it locks them (push.cpp); a captured op is never pushed. A fold that finds two lives of
    // one variable has found a dead handle.
    bool alive = op->sort_and_fold_uses();
    captured.uses.reserve(op->num_uses);
    for (std::uint32_t i = 0; i < op->num_uses && alive; ++i) {
      const VarUse& use = op->uses[i];
      // relaxed: an early check, as a push's; a replay checks again under the variables' locks.
      alive = state_of(use)->generation.load(std::memory_order_relaxed) == use.tag;
      // A graph of stream ops runs its steps one after another, in capture order: an accumulation is a mutation there,
      // in one of the orders its group allows.
      const bool as_mutation = use.access == Access::kAccumulate && core_.has_streams();
      captured.uses.push_back({state_of(use), use.tag, as_mutation ? Access::kWrite : use.access});
    }
    if (!alive && refusal == nullptr) {
      refusal = " inside Capture: a variable of the op was deleted (DeleteVariable) and may not be used again";
    }
    if (refusal == nullptr) {
      captured.fn = std::move(op->fn);
      t_running.capture->ops.push_back(std::move(captured));
    }
  } catch (...) {  // out of memory
    op->recycle();
    throw;
  }
  bool accumulates = false;
  for (std::uint32_t i = 0; i < op->num_uses; ++i)
    accumulates = accumulates || op->uses[i].access == Access::kAccumulate;
  const char* api = op->deletes_var ? "DeleteVariable"
                    : accumulates   ? (op->async ? "PushAccumulateAsync" : "PushAccumulate")
                    : op->async     ? "PushAsync"
                                    : "Push";
  op->recycle();
  if (refusal != nullptr) throw Error(std::string(api) + refusal);
}

}  // namespace depengine::detail
