// Replay: a planned graph's joins appended to their queues, its ops run, completed and retired (graph_plan.h); a graph
// of stream ops pushed as one op and run at its issue (stream_graph.h).
#include <algorithm>
#include <string>
#include <string_view>
#include <utility>

#include <depengine/engine/detail/engine_core.h>
#include <depengine/engine/detail/graph_runner.h>
#include <depengine/engine/detail/running.h>
#include <depengine/engine/detail/stream_graph.h>
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

// The index of `op` in its instance, which is its index in the plan.
std::uint32_t index_of(const GraphOp* op) noexcept { return static_cast<std::uint32_t>(op - op->instance->ops.get()); }

// The scope an op of `instance` planned as `planned` belongs to: the replay's (ReplayOptions::scope) if it names one,
// else the op's captured one.
ScopeState* scope_of(const GraphInstance* instance, const GraphPlan::Op& planned) noexcept {
  return instance->scope != nullptr ? instance->scope : planned.scope.get();
}

}  // namespace

void GraphRunner::replay(const Graph& graph, const ReplayOptions& options) {
  if (t_running.capturing != nullptr) {
    throw Error("Replay: called inside a Capture; replay the graph outside it (a capture records pushes only)");
  }
  ScopeState* const scope = options.scope != nullptr ? options.scope->state_ : nullptr;
  if (graph.streams_ != nullptr) {
    replay_streams(graph.streams_, scope);
    return;
  }
  GraphPlan* plan = graph.plan_.get();
  if (plan == nullptr) throw Error("Replay: the graph is empty (default-constructed, moved from, or nothing captured)");
  if (plan->engine_id() != core_.vars().engine_id()) throw Error("Replay: the graph was captured by another engine");
  const std::size_t count = plan->size();
  InFlight& in_flight = core_.in_flight();
  // As a push (EngineOptions::help_above).
  if (t_running.engine == nullptr && in_flight.ahead()) [[unlikely]]
    in_flight.help_while_ahead();
  if (!in_flight.admit_many(count, t_running.engine == &core_)) [[unlikely]] {
    throw Error(
        "Replay: the engine is being destroyed; only ops running in it may still push (the rest of their work)");
  }
  GraphInstance* instance = nullptr;
  try {
    instance = plan->take();
    if (Observers* observers = core_.observing(); observers != nullptr) [[unlikely]]
      observers->replayed(*instance);
  } catch (...) {  // out of memory
    if (instance != nullptr) plan->give_back(instance);
    in_flight.leave(count);
    throw;
  }
  instance->keep = graph.plan_;
  instance->scope = scope;
  instance->owner = current_owner();
  instance->trace_ops = core_.trace().on() ? TraceRecorder::next_ops(count) : 0;
  if (instance->trace_ops != 0) core_.trace().replay_pushed(*plan, instance->trace_ops);

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
        // Granted alone: not counted (graph_plan.h, Sole grants).
        if (plan->op(*target).wait == 1 || op.take_grant_locked() == 0) ready.push_back(&op);
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
    in_flight.leave(count);
    throw Error("Replay: a variable the graph uses was deleted (DeleteVariable) since the capture");
  }
  // The ops granted at append were made ready under the locks, where no observer may be called: told now, before
  // they are submitted below.
  if (Observers* observers = core_.observing(); observers != nullptr) [[unlikely]] {
    for (Task* task = ready.front(); task != nullptr; task = task->next_)
      observers->ready_at_push(*static_cast<GraphOp*>(task));
  }
  // Before our grants below: until then no op of the replay can run, and so none complete and count out.
  if (scope != nullptr) [[unlikely]] {
    scope->op_pushed(static_cast<std::uint32_t>(count));  // every op of the replay is the replay's scope's
  } else {
    for (ScopeState* captured : plan->scoped()) captured->op_pushed();
  }
  // Our grant of each join waiting in its queue: it may be routed now (its queue may have granted it already). Once
  // the last is given, the whole replay may run and retire on other threads, and a concurrent Replay of the graph take
  // the instance again: nothing of it is read after that grant, unless `ready` or a root still holds it back.
  const std::uint64_t traced = instance->trace_ops;  // read before: see above
  GraphOp* const ops = instance->ops.get();
  for (std::size_t j = 0; linked > 0; ++j) {
    GraphJoin& join = instance->joins[j];
    if (!join.linked) continue;
    --linked;
    if (join.grant()) grant_join(&join, ready, nullptr);
  }
  for (const std::uint32_t root : plan->roots()) made_ready(instance->ops[root], ready, nullptr);
  // Traced: the ops in `ready` were ready once the replay was published (replay_ready only tells them apart by their
  // address in `ops`; it touches no instance).
  if (traced != 0 && !ready.empty()) core_.trace().replay_ready(traced, ops, ready);
  submit_in_priority_order(ready);
}

// Runs an op of a replay, and then each op chained to the one before (graph_plan.h, Chains): each through the op gate
// and the core's run, as a pushed op (EngineCore::execute); then completed (an async op: when its Completion is
// called). What the ops of the run share is set once: the running scope (they have one owner, and a pushed op's scope
// spans its completion too), the run context's worker and replay, and whether a trace records.
void GraphRunner::execute(GraphOp* first, int worker, TaskList& ready) noexcept {
  GraphInstance* const instance = first->instance;
  GraphPlan& plan = instance->plan;
  std::uint32_t index = index_of(first);
  // For the next replay: nothing grants the op again in this one. An op granted alone was never counted down.
  if (const std::int32_t wait = plan.op(index).wait; wait > 1) first->reset_wait(wait);
  const RunningScope running(&core_, &ready, instance->owner);
  TraceRecorder* const trace = instance->trace_ops != 0 ? core_.trace().recorder() : nullptr;
  RunContext ctx;
  ctx.worker = worker;
  ctx.replay = instance->replay;
  for (;;) {
    GraphPlan::Op& planned = plan.op(index);
    GraphOp* const op = &instance->ops[index];  // read only where needed: a chained op's line may be in another cache
    // A member of groups (graph_plan.h, Groups) takes their tokens before the gate, which reads its variables' errors.
    if (planned.tokens.begin != planned.tokens.end && !take_tokens(*op, planned, ready)) [[unlikely]]
      return;  // parked: the member that frees the token wakes it, and it comes back here
    const GraphPlan::Use* uses = plan.uses(planned);
    const std::uint32_t num_uses = planned.uses.end - planned.uses.begin;
    ScopeState* const scope = scope_of(instance, planned);
    std::exception_ptr error;
    const OpGate::Verdict verdict = core_.gate().check(scope, true, planned.no_skip, nullptr, uses, num_uses);
    Observers* const observers = core_.observing();
    if (verdict.error != nullptr) [[unlikely]] {
      error = *verdict.error;
      if (verdict.scope_cancelled) core_.errors().raise(error, plan.name_of(planned), instance->owner);
      if (observers != nullptr) [[unlikely]]
        observers->ended(*op, verdict.cancelled ? OpOutcome::kCancelled : OpOutcome::kSkipped, &error);
    } else {
      // The name goes to call() from here, not read back from ctx: that would be one 16-byte load of two 8-byte stores
      // just made, which waits for them to leave the store buffer (2 ns of a replayed fan-out reader's 28).
      const std::string_view name = plan.name_of(planned);
      ctx.name = name;
      ctx.executor = planned.executor;
      ctx.scope = scope;
      if (planned.no_skip) [[unlikely]]
        note_input_error(uses, num_uses, ctx);
      const std::int64_t start = trace != nullptr ? trace->now() : 0;
      if (observers != nullptr) [[unlikely]]
        observers->started(*op, worker);
      OpRecord* record = nullptr;
      if (planned.async) {
        // A pooled record for the Completion to point at (see Retirement in graph_plan.h).
        record = RecordPool::acquire();
        record->prepare(&core_, planned.executor, planned.priority);
        record->replay_completion = true;
        record->replayed = op;
        record->async = true;
        record->owner = instance->owner;
        core_.call_async(record, planned.fn, ctx, name);
      } else {
        core_.call(planned.fn, ctx, name, instance->owner, error);
        if (observers != nullptr) [[unlikely]]
          observers->ended(*op, error != nullptr ? OpOutcome::kFailed : OpOutcome::kRan,
                           error != nullptr ? &error : nullptr);
      }
      if (planned.no_skip) [[unlikely]] {  // not told to the next op of the run
        ctx.input_error = nullptr;
        ctx.input_error_var = Var{};
      }
      if (trace != nullptr) {
        core_.trace().replayed_op(plan, planned, instance->trace_ops + index, instance->replay, planned.executor,
                                  worker, start, core_.in_flight().upper_bound());
      }
      if (record != nullptr) {
        core_.release_hold(record);  // the function has returned; the op completed, or completes, at its Completion
        return;                      // (its scope counts it out when both are done: retire_async)
      }
    }
    index = complete<true>(instance, index, planned, error, ready);
    // After its effects, as a pushed op's retirement. `scope` was read before: unless the op handed its chain on to
    // this thread, the plan may be gone by now.
    if (scope != nullptr) ScopeState::op_retired(scope);
    if (index == kUnchained) [[likely]]
      return;
  }
}

// For a no_skip op about to run: the error an input carries, if any, and that input (RunContext::input_error).
void GraphRunner::note_input_error(const GraphPlan::Use* uses, std::uint32_t num_uses, RunContext& ctx) const noexcept {
  const std::uint32_t failed = OpGate::failed_input(uses, num_uses);
  if (failed == num_uses) return;
  ctx.input_error = &uses[failed].var->error;
  ctx.input_error_var = core_.vars().handle(uses[failed].var, uses[failed].tag);
}

void GraphRunner::complete_async(OpRecord* record, const std::exception_ptr& error, TaskList& ready) noexcept {
  GraphOp* op = record->replayed;
  const std::uint32_t index = index_of(op);
  const GraphPlan& plan = op->instance->plan;
  const GraphPlan::Op& planned = plan.op(index);
  if (error != nullptr) core_.errors().raise(error, plan.name_of(planned), record->owner);
  if (Observers* observers = core_.observing(); observers != nullptr) [[unlikely]]
    observers->ended(*op, error != nullptr ? OpOutcome::kFailed : OpOutcome::kRan, error != nullptr ? &error : nullptr);
  (void)complete<false>(op->instance, index, planned, error, ready);
}

void GraphRunner::retire_async(OpRecord* record) noexcept {
  GraphOp* op = record->replayed;
  GraphInstance* instance = op->instance;
  ScopeState* const scope = scope_of(instance, instance->plan.op(index_of(op)));
  record->recycle();
  retire_instance(instance);
  if (scope != nullptr) ScopeState::op_retired(scope);  // both parties done, as a pushed async op's retirement
}

// An op that does not retire is done with the instance once its last grant has landed: each successor leads to a sink
// that cannot retire before the successor has run (graph_plan.h, Retirement).
template <bool kRanHere>
std::uint32_t GraphRunner::complete(GraphInstance* instance, std::uint32_t index, const GraphPlan::Op& planned,
                                    const std::exception_ptr& error, TaskList& ready) noexcept {
  GraphOp* const op = &instance->ops[index];  // its address only
  GraphPlan& plan = instance->plan;
  // Read now: after its last grant below, an op with successors may touch neither the instance nor the plan.
  const bool retires = kRanHere && planned.retires;  // an async op retires once its function has returned too
  const GraphPlan::Use* const uses_end = plan.uses(planned) + (planned.uses.end - planned.uses.begin);
  for (const GraphPlan::Use* use = plan.uses(planned); use != uses_end; ++use) {
    if (use->access != Access::kWrite && use->access != Access::kAccumulate) continue;
    if (use->clears) [[unlikely]] {  // a graph variable's end: the next replay finds it clean (graph.h)
      use->var->error = nullptr;
      continue;
    }
    if (error != nullptr) core_.poison(use->var, use->tag, error, instance->owner);
    if (use->counts_version) use->var->count_mutation();
  }
  if (planned.tokens.begin != planned.tokens.end) [[unlikely]]
    hand_on_tokens(*op, planned, ready);
  // The joins first: a tail join is granted by the middle one's completion, before the readers it covers (the
  // successors below) can complete. What their queues grant is routed before our own grants, after which an op with
  // successors may no longer touch the instance.
  GraphOp* const ops = instance->ops.get();
  const std::uint64_t traced = instance->trace_ops;
  ReadyList granted;
  const std::uint32_t* covered = plan.covered(planned);
  for (std::uint32_t c = planned.covers.begin; c < planned.covers.end; ++c, ++covered) {
    GraphJoin& join = instance->joins[*covered];
    // acq_rel: the last of the covered ops completes the entry, after the others' completions.
    if (join.pending.fetch_sub(1, std::memory_order_acq_rel) != 1) continue;
    join.pending.store(plan.joins()[*covered].covers, std::memory_order_relaxed);  // for the next replay
    join.use.var->complete(join.use, nullptr, granted);
  }
  if (traced != 0) core_.trace().flows(plan, index, traced, granted);  // the pushed ops it released
  while (OpNode* node = granted.pop_front()) core_.route(node, ready, op);
  // The chained successor (graph_plan.h, Chains): nothing else grants it, so it is this thread's to run next, ungranted
  // (its count stays at its planned value, as the next replay needs it), unless something else was made ready or the
  // replay is watched.
  if (kRanHere && planned.chained && ready.empty() && traced == 0 && core_.observing() == nullptr) {
    return *plan.successors(planned) & ~GraphPlan::kSole;  // it waits for this op alone
  }
  const std::uint32_t* successor = plan.successors(planned);
  const std::uint32_t* const end = successor + (planned.successors.end - planned.successors.begin);
  const auto size = static_cast<std::uint32_t>(plan.size());
  for (; successor != end; ++successor) {
    const std::uint32_t entry = *successor;
    GraphOp* next;
    if (entry < size) [[likely]] {
      next = &ops[entry];
      if (!next->grant()) continue;
    } else if (entry >= GraphPlan::kSole) {  // it waits for this grant alone (graph_plan.h, Sole grants)
      next = &ops[entry ^ GraphPlan::kSole];
    } else {  // a relay (graph_plan.h, Fan-ins): the last of its predecessors grants its op
      GraphRelay& relay = instance->relays[entry - size];
      if (!relay.grant()) continue;
      const GraphPlan::Relay& planned_relay = plan.relays()[entry - size];
      relay.reset_wait(planned_relay.wait);  // for the next replay: nothing grants the relay again in this one
      next = &ops[planned_relay.target];
      if (!next->grant()) continue;
    }
    // `next` is ours: the instance cannot end while its arrow is drawn.
    if (traced != 0) core_.trace().replay_release(plan, index, static_cast<std::uint32_t>(next - ops), traced);
    made_ready(*next, ready, op);
  }
  if (retires) retire_instance(instance);
  return kUnchained;
}

// With `from`, an arrow from that op to each replayed op the join makes ready (the boundary of a replay, crossed
// inward): those ops have not run, so their instance is alive while the arrows are drawn.
void GraphRunner::grant_join(GraphJoin* join, TaskList& ready, const void* completed, std::uint64_t from) noexcept {
  GraphInstance* instance = join->instance;
  const auto index = static_cast<std::size_t>(join - instance->joins.get());
  const GraphPlan::Join& planned = instance->plan.joins()[index];
  join->reset_wait(GraphJoin::kGrants);  // for the next replay
  const std::uint32_t* target = instance->plan.targets(planned);
  const std::uint64_t traced = from != 0 ? instance->trace_ops : 0;
  for (std::uint32_t t = planned.targets.begin; t < planned.targets.end; ++t, ++target) {
    GraphOp& op = instance->ops[*target];
    if (instance->plan.op(*target).wait != 1 && !op.grant()) continue;  // granted alone: not counted (Sole grants)
    if (traced != 0) core_.trace().join_release(from, traced + *target, planned.var, planned.tag);
    made_ready(op, ready, completed);
  }
  retire_instance(instance);  // the join is done: the instance (and its plan) may go once the ops are
}

// As a pushed member's (EngineCore::take_tokens): the tokens locked in ascending index order, all taken or none.
bool GraphRunner::take_tokens(GraphOp& op, const GraphPlan::Op& planned, TaskList& ready) noexcept {
  GroupToken* const tokens = op.instance->tokens.get();
  const std::uint32_t* const indices = op.instance->plan.tokens(planned);
  const std::uint32_t count = planned.tokens.end - planned.tokens.begin;
  for (std::uint32_t i = 0; i < count; ++i) tokens[indices[i]].lock.lock();
  GroupToken* held = nullptr;
  for (std::uint32_t i = 0; i < count && held == nullptr; ++i) {
    const GraphOp* const holder = tokens[indices[i]].holder;
    if (holder != nullptr && holder != &op) held = &tokens[indices[i]];  // its own: handed to it (wake_first)
  }
  for (std::uint32_t i = 0; i < count; ++i) {
    GroupToken& token = tokens[indices[i]];
    if (held == nullptr) {
      token.holder = &op;
    } else if (token.holder == nullptr) {
      // It may have been woken for this free token: the wake passes on, or those parked behind it would wait for a
      // token nobody holds.
      if (GraphOp* next = wake_first(token)) ready.push_back(next);
    }
  }
  for (std::uint32_t i = 0; i < count; ++i) {
    if (&tokens[indices[i]] != held) tokens[indices[i]].lock.unlock();
  }
  if (held == nullptr) return true;
  // Parked last, under the held token's lock alone: once it is let go the op may be woken, run and complete, and its
  // instance retire, so nothing of the instance or its plan is read after.
  held->parked.push_back(&op);
  held->lock.unlock();
  return false;
}

// The token is free: its first parked member is unparked, and handed it if that member is in this group alone (it needs
// nothing else, and members of one group run in the order they parked); a member of several groups is only woken.
GraphOp* GraphRunner::wake_first(GroupToken& token) noexcept {
  auto* const first = static_cast<GraphOp*>(token.parked.pop_front());
  if (first != nullptr) {
    const GraphPlan::Op& planned = first->instance->plan.op(index_of(first));
    if (planned.tokens.end - planned.tokens.begin == 1) token.holder = first;
  }
  return first;
}

// The member's writes happen before the unlock; the next member takes the token under that lock, so it sees them.
void GraphRunner::hand_on_tokens(GraphOp& op, const GraphPlan::Op& planned, TaskList& ready) noexcept {
  GroupToken* const tokens = op.instance->tokens.get();
  const std::uint32_t* index = op.instance->plan.tokens(planned);
  for (std::uint32_t t = planned.tokens.begin; t < planned.tokens.end; ++t, ++index) {
    GroupToken& token = tokens[*index];
    token.lock.lock();
    token.holder = nullptr;  // free, for this replay and the next, unless a member parked alone is handed it
    GraphOp* const next = wake_first(token);
    token.lock.unlock();
    if (next != nullptr) ready.push_back(next);
  }
}

void GraphRunner::made_ready(GraphOp& op, TaskList& ready, const void* completed) noexcept {
  if (Observers* observers = core_.observing(); observers != nullptr) [[unlikely]] {
    if (completed == nullptr) {
      observers->ready_at_push(op);
    } else {
      observers->ready(op, completed);
    }
  }
  ready.push_back(&op);
}

void GraphRunner::retire_instance(GraphInstance* instance) noexcept {
  // acq_rel: the last one sees every other's work on the instance before it hands the instance back.
  if (instance->remaining.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  const std::size_t count = instance->plan.size();
  std::shared_ptr<GraphPlan> plan = std::move(instance->keep);
  plan->give_back(instance);
  plan.reset();  // may destroy the plan (and the instance) if the Graph is gone
  core_.in_flight().leave(count);
}

// One op, using every variable of the graph, pushed to the graph's executor, in the replay's scope if it names one,
// else in the one its steps were captured with (graph.h, "Cancel scopes").
void GraphRunner::replay_streams(const std::shared_ptr<StreamGraph>& graph, ScopeState* scope) {
  if (graph->engine_id() != core_.vars().engine_id()) throw Error("Replay: the graph was captured by another engine");
  Executor* executor = &core_.executor_at(graph->options().context.executor);
  OpRecord* op = core_.record_for(executor, graph->options(), false);
  op->scope = scope != nullptr ? scope : graph->scope();  // counted in by submit(), as a pushed op's
  op->no_skip = true;                                     // input errors are handled step by step (run_stream_graph)
  op->stream_graph = graph.get();  // the op's function keeps the graph alive until the record is recycled
  try {
    op->fn = OpFunction::make<false>([runner = this, graph, owner = op->owner](const RunContext& ctx) {
      runner->run_stream_graph(*graph, ctx, owner);
    });
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
  core_.submit(op, "Replay");
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
// variables' errors and count their versions as the ops they stand for would. Each step passes the op gate as an op
// of no scope (the replay's op passed it for the scope).
void GraphRunner::run_stream_graph(StreamGraph& graph, const RunContext& outer, std::uint64_t owner) {
  RunContext ctx = outer;
  ctx.replay = graph.next_replay();
  ctx.input_error = nullptr;
  ctx.input_error_var = Var();
  graph.count_extra_mutations();
  auto poison_writes = [&](const StreamGraph::Use* uses, std::size_t count, const std::exception_ptr& error) {
    for (std::size_t i = 0; i < count; ++i) {
      if (uses[i].access == Access::kWrite) core_.poison(uses[i].var, uses[i].tag, error, owner);
    }
  };
  if (outer.executor->stream_facet()->records_work()) {  // a stream graph's executor has the facet
    // The recorded work runs whole: an input error skips all of it.
    const std::vector<StreamGraph::Use>& uses = graph.uses();
    const auto count = static_cast<std::uint32_t>(uses.size());
    const OpGate::Verdict verdict = core_.gate().check(nullptr, false, false, nullptr, uses.data(), count);
    if (verdict.error != nullptr) {
      poison_writes(uses.data(), uses.size(), *verdict.error);
    } else {
      Recording recording{&graph, &ctx};
      outer.executor->stream_facet()->replay_recorded(*outer.stream, graph.recorded(), &Recording::enqueue, &recording);
    }
    graph.clear_ended();  // the graph's variables end clean, as after the steps below
    return;
  }
  for (StreamGraph::Step& step : graph.steps()) {
    const StreamGraph::Use* uses = graph.step_uses(step);
    const std::uint32_t count = step.uses_end - step.uses_begin;
    std::exception_ptr error;
    const OpGate::Verdict verdict = core_.gate().check(nullptr, false, step.no_skip, nullptr, uses, count);
    if (verdict.error != nullptr) {
      error = *verdict.error;  // skipped: passes the error on to what it mutates
    } else {
      ctx.name = step.name_view();
      const std::uint32_t failed = OpGate::failed_input(uses, count);
      ctx.input_error = failed != count ? &uses[failed].var->error : nullptr;
      ctx.input_error_var = failed != count ? core_.vars().handle(uses[failed].var, uses[failed].tag) : Var();
      core_.call(step.fn, ctx, step.name_view(), owner, error);
    }
    if (error != nullptr) poison_writes(uses, count, error);
    if (step.ends_var) uses->var->error = nullptr;  // a graph variable's end: the next replay finds it clean (graph.h)
  }
}

}  // namespace depengine::detail
