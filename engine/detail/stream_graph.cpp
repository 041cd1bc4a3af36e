// A graph of stream ops: planned at capture, pushed as one stream op per replay, and run at its issue (stream_graph.h).
#include <algorithm>
#include <string>
#include <utility>

#include <depengine/engine/detail/engine_core.h>
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

// Replay of a graph of stream ops: one op, using every variable of the graph, pushed to the graph's executor, in the
// replay's scope if it names one, else in the one its steps were captured with (graph.h, "Cancel scopes").
void EngineCore::replay_streams(const std::shared_ptr<StreamGraph>& graph, ScopeState* scope) {
  if (graph->engine_id() != vars_.engine_id()) throw Error("Replay: the graph was captured by another engine");
  Executor* executor = &executor_at(graph->options().context.executor);
  OpRecord* op = record_for(executor, graph->options(), false);
  op->scope = scope != nullptr ? scope : graph->scope();  // counted in by submit_new, as a pushed op's
  op->no_skip = true;                                     // input errors are handled step by step (run_stream_graph)
  op->stream_graph = graph.get();  // the op's function keeps the graph alive until the record is recycled
  try {
    op->fn = OpFunction::make<false>(
        [core = this, graph, owner = op->owner](const RunContext& ctx) { core->run_stream_graph(*graph, ctx, owner); });
    const std::vector<StreamGraph::Use>& uses = graph->uses();
    op->reserve_uses(uses.size());
    for (std::size_t i = 0; i < uses.size(); ++i) {
      op->uses[i] = VarUse{uses[i].var, op, nullptr, uses[i].access, uses[i].tag};
    }
    op->num_uses = static_cast<std::uint32_t>(uses.size());
  } catch (...) {  // out of memory
    op->recycle();
    throw;
  }
  submit_new(op, "Replay");
}

namespace {

// What StreamFacet::replay_recorded calls to enqueue the steps, once, while it records them.
struct Recording {
  StreamGraph* graph;
  RunContext* ctx;

  static void enqueue(void* context) {
    const Recording& recording = *static_cast<Recording*>(context);
    for (StreamGraph::Step& step : recording.graph->steps()) {
      recording.ctx->name = step.name_view();
      step.fn(*recording.ctx, nullptr);
    }
  }
};

}  // namespace

// A replay's op, issued on a stream (`outer`): runs the steps there, or launches their recording (stream_graph.h).
// The op holds every variable of the graph (exclusively those it mutates), so the steps may read and set the
// variables' errors and count their versions as the ops they stand for would.
void EngineCore::run_stream_graph(StreamGraph& graph, const RunContext& outer, std::uint64_t owner) {
  RunContext ctx = outer;
  ctx.replay = graph.next_replay();
  ctx.input_error = nullptr;
  ctx.input_error_var = Var();
  graph.count_extra_mutations();
  auto poison_writes = [&](const StreamGraph::Use* uses, std::size_t count, const std::exception_ptr& error) {
    for (std::size_t i = 0; i < count; ++i) {
      if (uses[i].access != Access::kWrite || uses[i].var->error != nullptr) continue;
      uses[i].var->error = error;
      errors_.poison(vars_.handle(uses[i].var, uses[i].tag), error, owner);
    }
  };
  if (outer.executor->stream_facet()->records_work()) {  // a stream graph's executor has the facet
    // The recorded work runs whole: an input error skips all of it.
    const auto failed = std::find_if(graph.uses().begin(), graph.uses().end(),
                                     [](const StreamGraph::Use& use) { return use.var->error != nullptr; });
    if (failed != graph.uses().end()) {
      poison_writes(graph.uses().data(), graph.uses().size(), failed->var->error);
    } else {
      Recording recording{&graph, &ctx};
      outer.executor->stream_facet()->replay_recorded(*outer.stream, graph.recorded(), &Recording::enqueue, &recording);
    }
    graph.clear_ended();  // the graph's variables end clean, as after the steps below
    return;
  }
  for (StreamGraph::Step& step : graph.steps()) {
    const StreamGraph::Use* uses = graph.step_uses(step);
    const std::size_t count = step.uses_end - step.uses_begin;
    const std::exception_ptr* input_error = nullptr;
    std::size_t failed = 0;  // the use whose variable carries input_error
    for (; failed < count; ++failed) {
      if (uses[failed].var->error != nullptr) {
        input_error = &uses[failed].var->error;
        break;
      }
    }
    std::exception_ptr error;
    if (input_error != nullptr && !step.no_skip) {
      error = *input_error;  // skipped: passes the error on to what it mutates
    } else {
      ctx.name = step.name_view();
      ctx.input_error = input_error;
      ctx.input_error_var = input_error != nullptr ? vars_.handle(uses[failed].var, uses[failed].tag) : Var();
      try {
        step.fn(ctx, nullptr);
      } catch (...) {
        error = std::current_exception();
        errors_.raise(error, step.name_view(), owner);
      }
    }
    if (error != nullptr) poison_writes(uses, count, error);
    if (step.ends_var) uses->var->error = nullptr;  // a graph variable's end: the next replay finds it clean (graph.h)
  }
}

}  // namespace depengine::detail
