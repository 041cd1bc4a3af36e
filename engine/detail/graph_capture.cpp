// Capture: the pushes of a capturing thread recorded instead of published, and the plan made of them (graph_plan.h).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>

#include <depengine/engine/detail/engine_core.h>
#include <depengine/engine/detail/graph_lifetime.h>
#include <depengine/engine/detail/graph_plan.h>
#include <depengine/engine/detail/running.h>
#include <depengine/engine/detail/stream_graph.h>

namespace depengine::detail {
namespace {

// What planning keeps per variable while it walks the captured ops in order.
struct VarWalk {
  std::int64_t last_writer = -1;
  std::int64_t first_writer = -1;
  std::int64_t last_writer_use = -1;         // index into the plan's uses of the last writer's use of the variable
  std::vector<std::uint32_t> head_readers;   // reads before the first write
  std::vector<std::uint32_t> readers_since;  // reads since the last write (all reads while there was none)
};

}  // namespace

GraphPlan::GraphPlan(std::uint32_t engine_id, std::vector<CapturedOp> captured) : engine_id_(engine_id) {
  const auto count = static_cast<std::uint32_t>(captured.size());
  ops_.resize(count);
  std::vector<std::vector<std::uint32_t>> successors(count);
  std::vector<std::vector<std::uint32_t>> covers(count);
  std::vector<std::uint32_t> last_edge_to(count, count);  // successors[p] ends with i iff last_edge_to[p] == i
  std::vector<VarState*> order;                           // the variables, in order of first use
  std::vector<VarWalk> walks;
  std::vector<std::uint32_t> tags;
  std::unordered_map<const VarState*, std::size_t> index_of;
  auto walk_of = [&](VarState* var, std::uint32_t tag) -> VarWalk& {
    const auto [it, fresh] = index_of.try_emplace(var, order.size());
    if (!fresh) return walks[it->second];
    order.push_back(var);
    tags.push_back(tag);
    return walks.emplace_back();
  };
  for (std::uint32_t i = 0; i < count; ++i) {
    CapturedOp& from = captured[i];
    Op& op = ops_[i];
    op.fn = std::move(from.fn);
    op.executor = from.executor;
    op.priority = from.priority;
    op.no_skip = from.no_skip;
    op.async = from.async;
    op.named = from.named;
    op.name = std::move(from.name);
    op.scope = std::move(from.scope);
    if (op.scope.get() != nullptr) scoped_.push_back(op.scope.get());
    op.uses.begin = static_cast<std::uint32_t>(uses_.size());
    auto edge = [&](std::int64_t from_op) {
      const auto p = static_cast<std::uint32_t>(from_op);
      if (last_edge_to[p] == i) return;  // already a predecessor through another variable
      last_edge_to[p] = i;
      successors[p].push_back(i);
      ++op.wait;
    };
    for (const CapturedOp::Use& use : from.uses) {
      VarWalk& walk = walk_of(use.var, use.tag);
      if (use.access == Access::kRead) {
        if (walk.last_writer >= 0) {
          edge(walk.last_writer);
        } else {
          walk.head_readers.push_back(i);
          ++op.wait;  // granted by the head join
        }
        walk.readers_since.push_back(i);
      } else {
        if (walk.last_writer >= 0) edge(walk.last_writer);
        for (std::uint32_t reader : walk.readers_since) edge(reader);
        walk.readers_since.clear();
        if (walk.first_writer < 0) {
          walk.first_writer = i;
          ++op.wait;  // granted by the middle join
        }
        walk.last_writer = i;
        walk.last_writer_use = static_cast<std::int64_t>(uses_.size());
      }
      uses_.push_back(Use{use.var, use.tag, use.access, use.access == Access::kWrite, from.ends_var});
    }
    op.uses.end = static_cast<std::uint32_t>(uses_.size());
    if (op.wait == 0) roots_.push_back(i);
  }
  // Joins, in the order of the variables' addresses (the order a push locks them in).
  std::vector<std::size_t> by_address(order.size());
  for (std::size_t v = 0; v < order.size(); ++v) by_address[v] = v;
  std::sort(by_address.begin(), by_address.end(), [&](std::size_t a, std::size_t b) { return order[a] < order[b]; });
  for (const std::size_t v : by_address) {
    VarWalk& walk = walks[v];
    auto add_join = [&](Access access, const std::vector<std::uint32_t>& grants,
                        const std::vector<std::uint32_t>& done) {
      Join join{order[v], tags[v], access, static_cast<std::int32_t>(done.size()), {}};
      join.targets.begin = static_cast<std::uint32_t>(targets_.size());
      targets_.insert(targets_.end(), grants.begin(), grants.end());
      join.targets.end = static_cast<std::uint32_t>(targets_.size());
      for (std::uint32_t op : done) covers[op].push_back(static_cast<std::uint32_t>(joins_.size()));
      joins_.push_back(join);
    };
    if (!walk.head_readers.empty()) add_join(Access::kRead, walk.head_readers, walk.head_readers);
    if (walk.first_writer >= 0) {
      add_join(Access::kWrite, {static_cast<std::uint32_t>(walk.first_writer)},
               {static_cast<std::uint32_t>(walk.last_writer)});
      uses_[static_cast<std::size_t>(walk.last_writer_use)].counts_version = false;  // the middle join counts it
      if (!walk.readers_since.empty()) add_join(Access::kRead, {}, walk.readers_since);
    }
  }
  // Fan-ins (graph_plan.h): each run of consecutive predecessors of a wide fan-in, kRelayGroup at a time, through a
  // relay.
  std::vector<std::uint32_t> fan_in(count, 0);
  for (const std::vector<std::uint32_t>& next : successors) {
    for (const std::uint32_t s : next) ++fan_in[s];
  }
  std::vector<std::vector<std::uint32_t>> wide;     // the predecessors of each wide fan-in, in index order
  std::vector<std::uint32_t> wide_index(count, 0);  // 1 + its index in `wide`, 0 for an op that is not one
  for (std::uint32_t p = 0; p < count; ++p) {
    for (const std::uint32_t s : successors[p]) {
      if (fan_in[s] <= kRelayAbove) continue;
      if (wide_index[s] == 0) {
        wide.emplace_back();
        wide_index[s] = static_cast<std::uint32_t>(wide.size());
      }
      wide[wide_index[s] - 1].push_back(p);
    }
  }
  for (std::uint32_t s = 0; s < count; ++s) {
    if (wide_index[s] == 0) continue;
    const std::vector<std::uint32_t>& preds = wide[wide_index[s] - 1];
    for (std::size_t i = 0; i < preds.size();) {
      std::size_t end = i + 1;  // [i, end): consecutive ops, at most kRelayGroup
      while (end < preds.size() && end - i < kRelayGroup && preds[end] == preds[end - 1] + 1) ++end;
      if (end - i >= kRelayMin) {
        const auto relay = count + static_cast<std::uint32_t>(relays_.size());
        relays_.push_back(Relay{static_cast<std::int32_t>(end - i), s});
        ops_[s].wait -= static_cast<std::int32_t>(end - i) - 1;  // their grants become the relay's one
        for (std::size_t k = i; k < end; ++k)
          *std::find(successors[preds[k]].begin(), successors[preds[k]].end(), s) = relay;
      }
      i = end;
    }
  }
  for (std::uint32_t i = 0; i < count; ++i) {
    ops_[i].successors.begin = static_cast<std::uint32_t>(successors_.size());
    successors_.insert(successors_.end(), successors[i].begin(), successors[i].end());
    ops_[i].successors.end = static_cast<std::uint32_t>(successors_.size());
    ops_[i].covers.begin = static_cast<std::uint32_t>(covered_.size());
    covered_.insert(covered_.end(), covers[i].begin(), covers[i].end());
    ops_[i].covers.end = static_cast<std::uint32_t>(covered_.size());
    ops_[i].retires = successors[i].empty() || ops_[i].async;
    if (ops_[i].retires) ++retirers_;
  }
}

GraphPlan::~GraphPlan() = default;

void GraphPlan::drop_functions() noexcept {
  for (Op& op : ops_) op.fn.reset();
}

GraphInstance* GraphPlan::take() {
  std::lock_guard lock(pool_mutex_);
  if (free_.empty()) {
    instances_.push_back(std::make_unique<GraphInstance>(*this));
    free_.reserve(instances_.size());  // give_back() then never allocates
    return instances_.back().get();
  }
  GraphInstance* instance = free_.back();
  free_.pop_back();
  return instance;
}

void GraphPlan::give_back(GraphInstance* instance) noexcept {
  std::lock_guard lock(pool_mutex_);
  free_.push_back(instance);  // capacity reserved by take()
}

GraphInstance::GraphInstance(GraphPlan& planned_by)
    : plan(planned_by),
      ops(std::make_unique<GraphOp[]>(planned_by.size())),
      joins(std::make_unique<GraphJoin[]>(planned_by.joins().size())),
      relays(std::make_unique<GraphRelay[]>(planned_by.relays().size())) {
  for (std::size_t r = 0; r < planned_by.relays().size(); ++r) relays[r].reset_wait(planned_by.relays()[r].wait);
  for (std::uint32_t i = 0; i < planned_by.size(); ++i) {
    const GraphPlan::Op& op = planned_by.op(i);
    ops[i].prepare(op.executor, op.priority, this);
    ops[i].reset_wait(op.wait);
  }
  for (std::size_t j = 0; j < planned_by.joins().size(); ++j) {
    const GraphPlan::Join& planned = planned_by.joins()[j];
    GraphJoin& join = joins[j];
    join.owner_kind = kGraphJoin;
    join.reset_wait(GraphJoin::kGrants);
    join.use = VarUse{planned.var, &join, nullptr, planned.access, planned.tag};
    join.pending.store(planned.covers, std::memory_order_relaxed);  // relaxed: published with the instance
    join.instance = this;
  }
}

void EngineCore::begin_capture() {
  if (t_running.capturing != nullptr) {
    throw Error("Capture: called inside a Capture; capture the inner step on its own and replay it after");
  }
  if (t_running.engine == this) {
    throw Error(
        "Capture: called from inside a running op of this engine; capture from the thread that pushes the step");
  }
  t_running.capture = new CaptureState();
  t_running.capturing = this;
}

// The body threw: nothing is captured, and the variables it deleted are deleted for real (their handles are dead).
void EngineCore::abandon_capture() noexcept {
  const std::unique_ptr<CaptureState> state(t_running.capture);
  t_running.capturing = nullptr;
  t_running.capture = nullptr;
  delete_all_owned(state->owned);
}

void EngineCore::delete_all_owned(std::vector<OwnedVar>& owned) noexcept {
  for (OwnedVar& var : owned) {
    try {
      delete_owned(var);
    } catch (const std::exception& e) {  // out of memory, or the engine is being destroyed: the variable stays unused
      std::fprintf(stderr, "depengine: the deletion of a variable a graph owned failed: %s\n", e.what());
    }
  }
  owned.clear();
}

Graph EngineCore::end_capture() {
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
    lifetime = std::make_unique<GraphLifetime>(*this, state->owned);
  } catch (...) {  // out of memory: the variables the body deleted are deleted for real
    delete_all_owned(state->owned);
    throw;
  }
  if (!has_streams_ && ops.size() > in_flight_.max()) {
    throw Error("Capture: the graph has " + std::to_string(ops.size()) +
                " ops, more than EngineOptions::max_in_flight (" + std::to_string(in_flight_.max()) +
                "), so no replay of it could be admitted; raise the bound or capture a smaller step");
  }
  if (ops.empty()) return Graph();
  if (has_streams_) {
    const std::uint32_t executor = executor_index(ops.front().executor);
    auto streams = std::make_shared<StreamGraph>(vars_.engine_id(), executor, std::move(ops));
    lifetime->hold(nullptr, streams.get());
    return Graph(nullptr, std::move(streams), std::move(lifetime));
  }
  auto plan = std::make_shared<GraphPlan>(vars_.engine_id(), std::move(ops));
  lifetime->hold(plan.get(), nullptr);
  return Graph(std::move(plan), nullptr, std::move(lifetime));
}

// NewVariable on the capturing thread: a variable the body may delete (graph.h, "Variables of a graph").
void EngineCore::note_made(const Var& var) { t_running.capture->made.insert(var.state_); }

// DeleteVariable inside a capture: the end of a variable made in it, captured as an op whose one use clears the
// variable's error at each replay; the deleter waits for the graph's end (graph_lifetime.h). Every handle to the
// variable dies now, as at a pushed deletion.
void EngineCore::capture_deletion(Var var, OpFunction deleter, const PushOptions& options) {
  VarState* state = vars_.checked(var, "DeleteVariable");
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
  capture(deletion_record(state, var.generation_, OpFunction::make<false>([] {}), owned.options));  // throws if refused
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
const char* EngineCore::refuse_in_stream_graph(const OpRecord* op, const CapturedOp* first) const noexcept {
  if (!op->executor()->issues_ahead()) {
    return " inside Capture: the engine has a stream executor, and a graph then holds stream ops only (it replays as "
           "one stream op); push CPU ops outside the capture, or capture them with an engine without streams";
  }
  if (op->scope != nullptr) {
    return " inside Capture: a stream op with a CancelScope cannot be captured (a graph of stream ops replays as "
           "one op); push it outside the capture";
  }
  if (first != nullptr &&
      (first->executor != op->executor() || first->device != op->device() || first->stream_kind != op->stream_kind())) {
    return " inside Capture: a graph of stream ops holds ops of one stream executor, one device and one kind of stream "
           "(it replays as one stream op); capture the others in a graph of their own";
  }
  return nullptr;
}

// A push made inside a capture: checks that a graph can hold it, then moves it from its record into the capture.
void EngineCore::capture(OpRecord* op) {
  const char* refusal = nullptr;
  if (op->waits_fences || op->signals_fences) {
    refusal =
        " inside Capture: an op with wait or signal fences cannot be captured (a fence value cannot repeat); wait for "
        "or signal the fence from an op pushed outside the capture";
  } else if (has_streams_) {
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
      captured.uses.push_back({state_of(use), use.tag, use.access});
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
  const char* api = op->deletes_var ? "DeleteVariable" : op->async ? "PushAsync" : "Push";
  op->recycle();
  if (refusal != nullptr) throw Error(std::string(api) + refusal);
}

}  // namespace depengine::detail
