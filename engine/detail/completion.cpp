// Run and complete: execute a ready CPU op (or skip it on an input error), complete its uses in their queues (granting
// successors into the caller's ready list), retire it and recycle its record; and the completion of async ops.
#include <algorithm>
#include <stdexcept>
#include <utility>

#include <depengine/engine/detail/engine_core.h>
#include <depengine/engine/detail/late_completions.h>
#include <depengine/engine/detail/running.h>
#include <depengine/engine/detail/stream_graph.h>
#include <depengine/executors/ready_queue.h>

namespace depengine::detail {
namespace {

// The signal of an op that ran on the host: nothing to wait for (it completed after everything it waited for had).
const VarSignal kNoSignal;

}  // namespace

// Whether `op` is a replay of stream ops and its use `i` names a variable the graph ends (graph.h, "Variables of a
// graph"): a failure of the whole replay leaves it clean for the next replay. Only an engine with a stream executor
// replays stream ops; elsewhere a pooled record's stream_graph is stale (OpRecord::prepare_cold resets it).
bool EngineCore::ends_graph_var(const OpRecord* op, std::uint32_t i) const noexcept {
  return has_streams_ && op->stream_graph != nullptr && op->stream_graph->uses()[i].ends;
}

// For a no_skip op about to run: the error an input carries, if any, and that input (RunContext::input_error).
void EngineCore::note_input_error(const OpRecord* op, RunContext& ctx) const noexcept {
  const std::uint32_t failed = OpGate::failed_input(op->uses, op->num_uses);
  if (failed == op->num_uses) return;
  VarState* var = state_of(op->uses[failed]);
  ctx.input_error = &var->error;
  ctx.input_error_var = vars_.handle(var, op->uses[failed].tag);
}

void EngineCore::execute(Task& task, int worker, TaskList& ready) noexcept {
  if (task.host_kind_ != kPushedOp) [[unlikely]] {
    if (task.host_kind_ == kGraphOp) {
      graphs_.execute(static_cast<GraphOp*>(&task), worker, ready);
      return;
    }
    // Before the gate: a member reads and writes its variable's error under the token (op_gate.h, failed_input()).
    if (!take_tokens(static_cast<OpRecord*>(&task), ready)) return;  // parked on a group: the holder wakes it
  }
  OpRecord* op = static_cast<OpRecord*>(&task);
  if (stopped(op)) {  // skipped: the error passes on to what the op mutates
    finish(op, ready, skipped_signal(op));
    return;
  }
  const RunningScope running(this, &ready, op->owner);
  RunContext ctx{op->name_view(), worker, op->executor(), nullptr, nullptr, op->scope};
  if (op->no_skip) [[unlikely]]
    note_input_error(op, ctx);
  // With streams, what the op waited for, all of it completed (unless a stream it waited for failed): a message may
  // carry it (RunContext::waits).
  if (has_streams_ && !op->waits_failed) [[unlikely]]
    ctx.waits = &op->requirement;
  TraceRecorder* recorder = op->trace_op != 0 ? trace().recorder() : nullptr;
  const std::int64_t start = recorder != nullptr ? recorder->now() : 0;
  // relaxed, here and below: a time stamp for reports (run_clock.h), which read it under a lock of a queue the op is in
  // and may see it late; the store is to line 0, which the recycling below writes anyway.
  op->run_stamp.store(run_clock_.now(), std::memory_order_relaxed);
  if (observing_ != nullptr) [[unlikely]]
    observing_->started(*op, worker, false);
  if (!op->async) {
    call(op->fn, ctx, op->name_view(), op->owner, op->error);  // the gate let it run: no error yet
    op->run_stamp.store(0, std::memory_order_relaxed);
    if (observing_ != nullptr) [[unlikely]]
      observing_->ended(*op, op->error != nullptr ? OpOutcome::kFailed : OpOutcome::kRan, error_of(op));
    if (recorder != nullptr) trace().cpu_op(*op, worker, start, in_flight_.upper_bound(), ctx.waits);
    finish(op, ready, ran_signal());
    return;
  }
  call_async(op, op->fn, ctx, op->name_view());
  // The record is ours until release_hold below, and the op in flight: its error (above) belongs to the WaitForAll
  // that waits for it.
  op->run_stamp.store(0, std::memory_order_relaxed);
  // No arrows from its wait frontier: its completion may have reused that storage (learned_signal).
  if (recorder != nullptr) trace().cpu_op(*op, worker, start, in_flight_.upper_bound(), nullptr);
  release_hold(op);
}

void EngineCore::call_async(OpRecord* record, OpFunction& fn, const RunContext& ctx, std::string_view name) noexcept {
  // relaxed: the record is ours until the Completion below is handed to the function; the user passes that
  // Completion to other threads through synchronisation of their own, which carries these stores with it.
  record->holds.store(2, std::memory_order_relaxed);
  const std::uint64_t ticket = record->ticket.load(std::memory_order_relaxed);
  const Completion done(record, ticket);
  try {
    fn(ctx, &done);
  } catch (...) {
    async_threw(record, ticket, std::current_exception(), name);
  }
}

void EngineCore::async_threw(OpRecord* op, std::uint64_t ticket, const std::exception_ptr& thrown,
                             std::string_view name) noexcept {
  if (LateCompletions::claim_on_throw(op, ticket, this, op->owner, name)) {
    complete_async(op, thrown, {});  // the function failed before completing its op: that is the op's error
  } else {
    errors().raise(thrown, name, op->owner);  // it failed after completing: not lost, WaitForAll's
  }
}

void EngineCore::complete_async(OpRecord* op, std::exception_ptr error, std::span<const FrontierEntry> learned) {
  if (error != nullptr && !op->replay_completion) {
    op->error = error;
    errors().raise(op->error, op->name_view(), op->owner);
  }
  if (t_running.engine == this) {  // completed from inside an op's function: successors join that executor's list
    complete_async_uses(op, error, learned, *t_running.ready);
    release_hold(op);
    return;
  }
  // A thread of the user's own. Once release_hold() retires the op, shutdown() may find nothing in flight while this
  // thread still reads the engine (leave()'s wake check): see ForeignThread. Pool and inline threads need no such
  // count: their executors' stop() waits for them.
  const ForeignThread foreign(*this);
  TaskList ready;
  complete_async_uses(op, error, learned, ready);
  submit_in_priority_order(ready);
  release_hold(op);
}

// What an async op's completion releases: its fences and uses, or, for the record of a replayed op, the GraphOp's.
void EngineCore::complete_async_uses(OpRecord* op, const std::exception_ptr& error,
                                     std::span<const FrontierEntry> learned, TaskList& ready) noexcept {
  if (op->replay_completion) {  // a replayed op hands on no signal (graphs of CPU ops run on engines without streams)
    graphs_.complete_async(op, error, ready);
    return;
  }
  if (observing_ != nullptr) [[unlikely]]
    observing_->ended(*op, op->error != nullptr ? OpOutcome::kFailed : OpOutcome::kRan, error_of(op));
  signal_fences(op, op->error);
  complete_uses(op, ready, learned.empty() ? ran_signal() : learned_signal(op, learned));
}

void EngineCore::release_hold(OpRecord* op) noexcept {
  // acq_rel: the later party's acquire pairs with the other's release, so the other is done with the record.
  if (op->holds.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  retire(op);
}

void EngineCore::finish(OpRecord* op, TaskList& ready, const VarSignal* signal) noexcept {
  signal_fences(op, op->error);
  complete_uses(op, ready, signal);
  retire(op);
}

const VarSignal* EngineCore::ran_signal() const noexcept { return has_streams_ ? &kNoSignal : nullptr; }

// The signal of an async op completed with `learned` (Completion::operator()(error, learned)): each entry, recorded as
// completed on the tracker (its axis registered there first if the tracker has room; an entry that does not fit is
// left out, which only forgets that it completed), becomes part of what the op hands on. An entry on an axis of this
// engine's own executors is never recorded: it passes on only if the tracker already has it completed (a frontier
// that came back), and is dropped otherwise (an axis of another process that aliases ours, its machine index not set
// apart), since advancing it would declare this engine's own work complete before it is. The op's function has
// returned or no longer reads its wait frontier (RunContext::waits), whose storage this reuses.
const VarSignal* EngineCore::learned_signal(OpRecord* op, std::span<const FrontierEntry> learned) noexcept {
  if (!has_streams_) return nullptr;
  op->requirement.clear();
  for (const FrontierEntry& entry : learned) {
    if (entry.axis.is_null() || entry.epoch == 0 || entry.epoch > kMaxTrackedEpoch) continue;
    const bool ours = std::any_of(executors_.begin(), executors_.end(), [&](const std::unique_ptr<Executor>& e) {
      return e->stream_facet() != nullptr && e->stream_facet()->owns_axis(entry.axis);
    });
    TrackedAxis tracked = tracker_.find(entry.axis);
    if (ours) {
      if (!tracked || tracker_.completed(tracked) < entry.epoch) continue;
    } else {
      // relaxed: a hint that spares a throw per entry once the tracker is full; a stale false only tries once more.
      if (!tracked && !tracker_full_.load(std::memory_order_relaxed)) {
        try {
          tracked = tracker_.register_axis(entry.axis);
        } catch (const std::length_error&) {  // full: entries on new axes are left out from now on
          tracker_full_.store(true, std::memory_order_relaxed);
        } catch (const std::exception&) {  // registered by another completion meanwhile
          tracked = tracker_.find(entry.axis);
        }
      }
      if (!tracked) continue;
      (void)tracker_.advance(tracked, entry.epoch);
    }
    // Never tainted: the signal holds registered axes only, at most as many as a frontier holds.
    op->requirement.insert_or_raise(entry.axis, entry.epoch);
  }
  return &op->requirement;
}

// A skipped op did not wait for its wait frontier, so its successors must: its signal passes the frontier on.
const VarSignal* EngineCore::skipped_signal(const OpRecord* op) const noexcept {
  return has_streams_ ? &op->requirement : nullptr;
}

void EngineCore::poison(VarState* var, std::uint32_t tag, const std::exception_ptr& error,
                        std::uint64_t owner) noexcept {
  if (var->error != nullptr) return;
  var->error = error;
  errors().poison(vars_.handle(var, tag), error, owner);
}

void EngineCore::complete_uses(OpRecord* op, TaskList& ready, const VarSignal* signal) noexcept {
  // Locals: the calls below would otherwise make the compiler reload the list from the record at every step.
  VarUse* const uses = op->uses;
  const std::uint32_t count = op->num_uses;
  // Each completion below writes its variable's completers' line with a locked instruction, which lets nothing after
  // it start until it has the line. Other threads completing uses of the same variables take those lines while the op
  // runs (the other readers of a variable, the neighbouring cells of a stencil), so they are fetched together first.
  if (count > 1) {
    for (std::uint32_t i = 0; i < count; ++i) uses[i].var->prefetch_completion();
  }
  ReadyList granted;
  for (std::uint32_t i = 0; i < count; ++i) {
    VarUse& use = uses[i];
    VarState* var = state_of(use);
    if (op->error != nullptr && (use.access == Access::kWrite || use.access == Access::kAccumulate) && !op->deletes_var)
        [[unlikely]] {
      if (!ends_graph_var(op, i)) poison(var, use.tag, op->error, op->owner);
    }
    var->complete(use, signal, granted);
  }
  if (op->deletes_var) vars_.recycle(state_of(op->uses[0]));
  if (op->trace_op == 0) {
    while (OpNode* node = granted.pop_front()) route(node, ready, op);
    return;
  }
  trace().flows(*op, granted);
  while (OpNode* node = granted.pop_front()) {
    if (node->owner_kind == kGraphJoin) {
      graphs_.grant_join(static_cast<GraphJoin*>(node), ready, op, op->trace_op);
    } else {
      route(node, ready, op);
    }
  }
}

}  // namespace depengine::detail
