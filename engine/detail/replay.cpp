// Replay: a planned graph's joins appended to their queues, its ops run, completed and retired (graph_plan.h).
#include <string>
#include <utility>

#include <depengine/engine/detail/engine_core.h>
#include <depengine/engine/detail/graph_plan.h>
#include <depengine/engine/detail/running.h>
#include <depengine/executors/ready_queue.h>

namespace depengine::detail {
namespace {

// Locks the queue of every variable the plan joins, in address order (joins of one variable are adjacent).
void lock_joins(const std::vector<GraphPlan::Join>& joins) noexcept {
  const VarState* locked = nullptr;
  for (const GraphPlan::Join& join : joins) {
    if (join.var != locked) join.var->lock();
    locked = join.var;
  }
}

void unlock_joins(const std::vector<GraphPlan::Join>& joins) noexcept {
  const VarState* unlocked = nullptr;
  for (const GraphPlan::Join& join : joins) {
    if (join.var != unlocked) join.var->unlock();
    unlocked = join.var;
  }
}

}  // namespace

void EngineCore::replay(const Graph& graph) {
  if (t_running.capturing != nullptr) {
    throw Error("Replay: called inside a Capture; replay the graph outside it (a capture records pushes only)");
  }
  if (graph.streams_ != nullptr) {
    replay_streams(graph.streams_);
    return;
  }
  GraphPlan* plan = graph.plan_.get();
  if (plan == nullptr) throw Error("Replay: the graph is empty (default-constructed, moved from, or nothing captured)");
  if (plan->engine_id() != vars_.engine_id()) throw Error("Replay: the graph was captured by another engine");
  const std::size_t count = plan->size();
  if (!in_flight_.admit_many(count, t_running.engine == this)) [[unlikely]] {
    throw Error(
        "Replay: the engine is being destroyed; only ops running in it may still push (the rest of their work)");
  }
  GraphInstance* instance = nullptr;
  try {
    instance = plan->take();
  } catch (...) {  // out of memory
    in_flight_.leave(count);
    throw;
  }
  instance->keep = graph.plan_;
  instance->owner = current_owner();
  instance->trace_ops = trace_.on() ? TraceRecorder::next_ops(count) : 0;

  // Publish, as a push does: every queue locked at once, the handles checked under the locks, then the appends. An op
  // granted by a join at append is counted down here: no other thread can grant it meanwhile (its other joins wait for
  // our grant, given below; its predecessors have not run).
  const std::vector<GraphPlan::Join>& joins = plan->joins();
  TaskList ready;
  std::size_t linked = 0;  // joins that wait in their queues (not granted at append)
  lock_joins(joins);
  bool alive = true;
  for (std::size_t j = 0; j < joins.size() && alive; ++j) {
    // relaxed: generation is written only under this lock, which we hold.
    alive = joins[j].var->generation.load(std::memory_order_relaxed) == joins[j].tag;
  }
  if (alive) {
    // Numbered under the locks: replays of one graph take effect on its variables in the order of their numbers.
    instance->replay = plan->next_replay();
    for (std::size_t j = 0; j < joins.size(); ++j) {
      GraphJoin& join = instance->joins[j];
      join.linked = !joins[j].var->append_locked(join.use);
      if (join.linked) {
        ++linked;
        continue;
      }
      const std::uint32_t* target = plan->targets(joins[j]);
      for (std::uint32_t t = joins[j].targets.begin; t < joins[j].targets.end; ++t, ++target) {
        GraphOp& op = instance->ops[*target];
        if (op.take_grant_locked() == 0) ready.push_back(&op);
      }
    }
    // relaxed: the later decrements come from the joins' grants, which the replaying thread gives below, or from the
    // ops submitted below, after this store.
    instance->remaining.store(static_cast<std::uint32_t>(plan->retirers() + linked), std::memory_order_relaxed);
  }
  unlock_joins(joins);
  if (!alive) {
    instance->keep.reset();
    plan->give_back(instance);
    in_flight_.leave(count);
    throw Error("Replay: a variable the graph uses was deleted (DeleteVariable) since the capture");
  }
  // Before our grants below: until then no op of the replay can run, and so none complete and count out.
  for (ScopeState* scope : plan->scoped()) scope->op_pushed();
  // Our grant of each join waiting in its queue: it may be routed now (its queue may have granted it already). Once
  // the last is given, the whole replay may run and retire on other threads, and a concurrent Replay of the graph take
  // the instance again: nothing of it is read after that grant, unless `ready` or a root still holds it back.
  for (std::size_t j = 0; linked > 0; ++j) {
    GraphJoin& join = instance->joins[j];
    if (!join.linked) continue;
    --linked;
    if (join.grant()) route(&join, ready);
  }
  for (const std::uint32_t root : plan->roots()) ready.push_back(&instance->ops[root]);
  submit_in_priority_order(ready);
}

// Runs one op of a replay: skipped on an input error (unless no_skip) or at the engine's cancelling teardown, as a
// pushed op is; then completed (an async op: when its Completion is called).
void EngineCore::execute_replayed(GraphOp* op, int worker, TaskList& ready) noexcept {
  GraphInstance* instance = op->instance;
  GraphPlan& plan = instance->plan;
  const auto index = static_cast<std::uint32_t>(op - instance->ops.get());
  GraphPlan::Op& planned = plan.op(index);
  op->reset_wait(planned.wait);  // for the next replay: nothing grants the op again in this one
  const GraphPlan::Use* uses = plan.uses(planned);
  const std::uint32_t num_uses = planned.uses.end - planned.uses.begin;
  std::exception_ptr error;
  const std::exception_ptr* input_error = nullptr;
  for (std::uint32_t i = 0; i < num_uses && input_error == nullptr; ++i) {
    if (uses[i].var->error != nullptr) [[unlikely]]
      input_error = &uses[i].var->error;
  }
  ScopeState* const scope = planned.scope.get();
  // relaxed: as in find_input_error().
  if (cancelling_.load(std::memory_order_relaxed)) [[unlikely]] {
    error = teardown_error_;
  } else if (scope != nullptr && scope->cancelled.load(std::memory_order_acquire)) [[unlikely]] {
    // acquire: pairs with the release store of CancelScope::Cancel(), which wrote the scope's error first.
    error = scope->error;
    errors_.raise(error, planned.name_view(), instance->owner);
  } else if (input_error != nullptr && !planned.no_skip) {
    error = *input_error;
  } else {
    const RunningScope running(this, &ready, instance->owner);
    RunContext ctx{planned.name_view(), worker, op->executor(), nullptr, nullptr, scope, input_error};
    ctx.replay = instance->replay;
    TraceRecorder* trace = instance->trace_ops != 0 ? trace_.recorder() : nullptr;
    const std::int64_t start = trace != nullptr ? trace->now() : 0;
    OpRecord* record = nullptr;
    if (planned.async) {
      record = run_async_replayed(op, planned, ctx);
    } else {
      try {
        planned.fn(ctx, nullptr);
      } catch (...) {
        error = std::current_exception();
        errors_.raise(error, planned.name_view(), instance->owner);
      }
    }
    if (trace != nullptr) {
      trace_.replayed_op(plan, planned, instance->trace_ops + index, instance->replay, op->executor(), worker, start,
                         in_flight_.upper_bound());
    }
    if (record != nullptr) {
      release_hold(record);  // the function has returned; the op completed, or completes, at its Completion
      return;                // (its scope counts it out when both are done: retire_async_replayed)
    }
  }
  complete_replayed(op, planned, error, ready, planned.retires);
  // After its effects, as a pushed op's retirement. `scope` was read before: the plan may be gone by now.
  if (scope != nullptr) ScopeState::op_retired(scope);
}

// Calls an async op's function with a Completion on a pooled record (see Retirement in graph_plan.h), and returns that
// record, which the caller releases (release_hold) as the function's party.
OpRecord* EngineCore::run_async_replayed(GraphOp* op, GraphPlan::Op& planned, const RunContext& ctx) noexcept {
  OpRecord* record = RecordPool::acquire();
  record->prepare(this, op->executor(), op->priority());
  record->replay_completion = true;
  record->replayed = op;
  record->async = true;
  record->owner = op->instance->owner;
  // relaxed: as in execute(): the record is ours until the Completion is handed to the function.
  record->holds.store(2, std::memory_order_relaxed);
  const Completion done(record, record->ticket.load(std::memory_order_relaxed));
  try {
    planned.fn(ctx, &done);
  } catch (...) {
    const std::exception_ptr thrown = std::current_exception();
    try {
      done(thrown);  // the function failed before completing its op: that is the op's error
    } catch (const Error&) {
      errors_.raise(thrown, planned.name_view(), record->owner);  // it failed after completing: WaitForAll's
    }
  }
  return record;
}

// The Completion of a replayed async op was called (complete_async): the op completes now, with `error`.
void EngineCore::complete_async_replayed(OpRecord* record, const std::exception_ptr& error, TaskList& ready) noexcept {
  GraphOp* op = record->replayed;
  const GraphPlan::Op& planned = op->instance->plan.op(static_cast<std::uint32_t>(op - op->instance->ops.get()));
  if (error != nullptr) errors_.raise(error, planned.name_view(), record->owner);
  complete_replayed(op, planned, error, ready, false);
}

// Both parties of a replayed async op are done: its record goes back to the pool, and the op retires.
void EngineCore::retire_async_replayed(OpRecord* record) noexcept {
  GraphOp* op = record->replayed;
  GraphInstance* instance = op->instance;
  ScopeState* const scope = instance->plan.op(static_cast<std::uint32_t>(op - instance->ops.get())).scope.get();
  record->recycle();
  retire_replayed(instance);
  if (scope != nullptr) ScopeState::op_retired(scope);  // both parties done, as a pushed async op's retirement
}

// Completes a replayed op: poisons and counts what it mutates, completes the joins it was the last to cover, grants its
// successors, and retires it if `retire`. An op that does not retire is done with the instance once its last grant
// has landed: each successor leads to a sink that cannot retire before the successor has run (graph_plan.h,
// Retirement).
void EngineCore::complete_replayed(GraphOp* op, const GraphPlan::Op& planned, const std::exception_ptr& error,
                                   TaskList& ready, bool retire) noexcept {
  GraphInstance* instance = op->instance;
  GraphPlan& plan = instance->plan;
  const GraphPlan::Use* uses = plan.uses(planned);
  for (std::uint32_t i = 0; i < planned.uses.end - planned.uses.begin; ++i) {
    if (uses[i].access != Access::kWrite) continue;
    if (uses[i].clears) [[unlikely]] {  // a graph variable's end: the next replay finds it clean (graph.h)
      uses[i].var->error = nullptr;
      continue;
    }
    if (error != nullptr && uses[i].var->error == nullptr) {
      uses[i].var->error = error;
      errors_.poison(vars_.handle(uses[i].var, uses[i].tag), error, instance->owner);
    }
    if (uses[i].counts_version) uses[i].var->count_mutation();
  }
  // The joins first: a tail join is granted by the middle one's completion, before the readers it covers (the
  // successors below) can complete. What their queues grant is routed before our own grants, after which an op with
  // successors may no longer touch the instance.
  GraphOp* const ops = instance->ops.get();
  const std::uint64_t traced = instance->trace_ops;
  const std::uint64_t id = traced + static_cast<std::uint64_t>(op - ops);
  ReadyList granted;
  const std::uint32_t* covered = plan.covered(planned);
  for (std::uint32_t c = planned.covers.begin; c < planned.covers.end; ++c, ++covered) {
    GraphJoin& join = instance->joins[*covered];
    // acq_rel: the last of the covered ops completes the entry, after the others' completions.
    if (join.pending.fetch_sub(1, std::memory_order_acq_rel) != 1) continue;
    join.pending.store(plan.joins()[*covered].covers, std::memory_order_relaxed);  // for the next replay
    join.use.var->complete(join.use, nullptr, granted);
  }
  if (traced != 0) trace_.flows(id, granted);  // the pushed ops this op released, across the replay's boundary
  while (OpNode* node = granted.pop_front()) route(node, ready);
  const std::uint32_t* successor = plan.successors(planned);
  const std::uint32_t* const end = successor + (planned.successors.end - planned.successors.begin);
  const auto size = static_cast<std::uint32_t>(plan.size());
  for (; successor != end; ++successor) {
    std::uint32_t index = *successor;
    if (index >= size) {  // a relay (graph_plan.h, Fan-ins): the last of its predecessors grants its op
      GraphRelay& relay = instance->relays[index - size];
      if (!relay.grant()) continue;
      const GraphPlan::Relay& planned_relay = plan.relays()[index - size];
      relay.reset_wait(planned_relay.wait);  // for the next replay: nothing grants the relay again in this one
      index = planned_relay.target;
    }
    GraphOp& next = ops[index];
    if (!next.grant()) continue;
    if (traced != 0) trace_.flow(id, traced + index);  // next is ours: the instance cannot end meanwhile
    ready.push_back(&next);
  }
  if (retire) retire_replayed(instance);
}

// A join granted by its queue: grants the ops it stands for (graph_plan.h, Joins).
void EngineCore::grant_join(GraphJoin* join, TaskList& ready) noexcept {
  GraphInstance* instance = join->instance;
  const auto index = static_cast<std::size_t>(join - instance->joins.get());
  const GraphPlan::Join& planned = instance->plan.joins()[index];
  join->reset_wait(GraphJoin::kGrants);  // for the next replay
  const std::uint32_t* target = instance->plan.targets(planned);
  for (std::uint32_t t = planned.targets.begin; t < planned.targets.end; ++t, ++target) {
    GraphOp& op = instance->ops[*target];
    if (op.grant()) ready.push_back(&op);
  }
  retire_replayed(instance);  // the join is done: the instance (and its plan) may go once the ops are
}

// A join that the completion of the traced op `from` granted: routed as route() does, with an arrow from that op to
// each replayed op the join made ready (the boundary of a replay, crossed inward). Those ops have not run, so their
// instance is alive while the arrows are drawn.
void EngineCore::route_join(std::uint64_t from, OpNode* join, TaskList& ready) noexcept {
  TaskList joined;
  route(join, joined);
  while (Task* task = joined.pop_front()) {
    const auto* op = static_cast<const GraphOp*>(task);
    const std::uint64_t traced = op->instance->trace_ops;
    if (traced != 0) trace_.flow(from, traced + static_cast<std::uint64_t>(op - op->instance->ops.get()));
    ready.push_back(task);
  }
}

// A sink op or a join of `instance` is done; the last frees the instance and counts its ops out of flight.
void EngineCore::retire_replayed(GraphInstance* instance) noexcept {
  // acq_rel: the last one sees every other's work on the instance before it hands the instance back.
  if (instance->remaining.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  const std::size_t count = instance->plan.size();
  std::shared_ptr<GraphPlan> plan = std::move(instance->keep);
  plan->give_back(instance);
  plan.reset();  // may destroy the plan (and the instance) if the Graph is gone
  in_flight_.leave(count);
}

// Where a node a queue granted goes: a join of a replay to the ops it grants, a pushed op to the ready list (through
// make_ready when signals are carried). A replayed op is never in a queue: its joins are.
void EngineCore::route(OpNode* node, TaskList& ready) noexcept {
  if (node->owner_kind == kGraphJoin) {
    grant_join(static_cast<GraphJoin*>(node), ready);
  } else if (has_streams_) {
    make_ready(static_cast<OpRecord*>(node), ready);
  } else {
    ready.push_back(static_cast<OpRecord*>(node));
  }
}

}  // namespace depengine::detail
