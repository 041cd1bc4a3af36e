// Streams: wait frontiers, parking on the tracker, issue, skip and device completion (docs/architecture.md, "Issued
// and complete").
#include <utility>

#include <depengine/engine/detail/engine_core.h>
#include <depengine/engine/detail/running.h>
#include <depengine/engine/detail/stream_graph.h>

namespace depengine::detail {

// A stream the op waited for failed. The op holds every grant, and the token of every group it is a member of (taken
// before it parked: make_ready()), so the variables it uses exclusively take the error (a WaitForVar finds it there);
// the op itself is skipped unless it is no_skip.
void EngineCore::take_input_error(OpRecord* op, const std::exception_ptr& error) noexcept {
  op->waits_failed = true;
  for (std::uint32_t i = 0; i < op->num_uses; ++i) {
    const VarUse& use = op->uses[i];
    VarState* var = state_of(use);
    if (use.access == Access::kRead || var->error != nullptr || op->deletes_var || ends_graph_var(op, i)) continue;
    if (op->internal) {
      var->error = error;  // a wait or a clearing op: it takes the error from the variable itself
    } else {
      poison(var, use.tag, error, op->owner);
    }
  }
  // A replay of stream ops is skipped whole: which of its steps the failed stream fed is not known here.
  if ((!op->no_skip || op->stream_graph != nullptr) && op->error == nullptr) op->error = error;
}

bool EngineCore::issue(Task& task, const StreamPlacement& where, FrontierEntry signal, std::uint32_t waited,
                       TaskList& ready) noexcept {
  OpRecord* op = static_cast<OpRecord*>(&task);
  if (stopped(op)) {
    if (op->stream_graph != nullptr) op->stream_graph->count_extra_mutations();  // skipped whole
    finish(op, ready, skipped_signal(op));
    return false;
  }
  if (op->trace_op != 0) trace().stream_issue(*op, signal, waited);
  if (observing_ != nullptr) [[unlikely]] {
    op->issued_at = signal;  // the stream its observers are told (set again below for every op)
    observing_->started(*op, -1, true);
  }
  {
    const RunningScope running(this, &ready, op->owner);
    RunContext ctx{op->name_view(), -1, op->executor()};
    ctx.scope = op->scope;
    if (op->no_skip) [[unlikely]]
      note_input_error(op, ctx);
    ctx.stream = &where;
    ctx.waits = &op->requirement;
    try {
      op->fn(ctx, nullptr);
    } catch (...) {  // the op failed while issuing: its error, attached to what it mutates; its work may be enqueued
      op->error = std::current_exception();
      errors().raise(op->error, op->name_view(), op->owner);
    }
  }
  op->issued_at = signal;
  if (op->error == nullptr && op->signals_fences) promise_fences(op);
  VarSignal issued;
  issued.insert_or_raise(signal.axis, signal.epoch);
  complete_uses(op, ready, &issued);
  return true;
}

void EngineCore::skip(Task& task, std::exception_ptr error, TaskList& ready) noexcept {
  OpRecord* op = static_cast<OpRecord*>(&task);
  if (op->stream_graph != nullptr) op->stream_graph->count_extra_mutations();  // skipped whole
  errors().raise(error, op->name_view(), op->owner);  // a new error (bad placement), or the failed stream's again
  if (op->error == nullptr) op->error = std::move(error);
  if (observing_ != nullptr) [[unlikely]]
    observing_->ended(*op, OpOutcome::kSkipped, &op->error);
  finish(op, ready, skipped_signal(op));
}

void EngineCore::complete_issued(Task& task, std::exception_ptr error) noexcept {
  OpRecord* op = static_cast<OpRecord*>(&task);
  if (error != nullptr) {
    // The variables it mutates were released at issue and may be in use, so the error is not attached to them here:
    // it reaches their later users through the failed axis on the tracker (take_input_error). Recorded for
    // WaitForAll, whose clearing op on each of them then finds it the same way; unless a wait reported it already,
    // having got it from an op it reached first (error_log.h).
    errors().raise(error, op->name_view(), op->owner, /*issued=*/true);
    for (std::uint32_t i = 0; i < op->num_uses; ++i) {
      const VarUse& use = op->uses[i];
      if ((use.access == Access::kWrite || use.access == Access::kAccumulate) && !op->deletes_var) {
        errors().poison(vars_.handle(state_of(use), use.tag), error, op->owner);
      }
    }
  }
  if (observing_ != nullptr) [[unlikely]] {
    const std::exception_ptr* failed = error != nullptr ? &error : error_of(op);
    observing_->ended(*op, failed != nullptr ? OpOutcome::kFailed : OpOutcome::kRan, failed);
  }
  signal_fences(op, error != nullptr ? error : op->error);
  if (op->trace_op != 0) trace().stream_op(*op, in_flight_.upper_bound(), executors_);
  retire(op);
}

}  // namespace depengine::detail
