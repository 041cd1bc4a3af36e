// Dispatch: where an op goes once its last grant has arrived. Every grant a pushed op receives (at its push, from a
// completion in its queues, from a fence) ends in grant() or route(); every granted join of a replay in the graph
// runner; and every ready op in its executor's submit() or the caller's ready list, after make_ready() has built its
// wait frontier when the engine carries signals (parking it on the tracker if its executor cannot wait on the device).
#include <depengine/engine/detail/engine_core.h>
#include <depengine/executors/ready_queue.h>

namespace depengine::detail {

// Runs `op`, ready at its push, on the pushing thread (work-first), and submits what that makes ready.
void EngineCore::run_pushed(OpRecord* op) noexcept {
  if (observing_ != nullptr) [[unlikely]]
    observing_->ready_at_push(*op);
  TaskList ready;
  execute(*op, -1, ready);
  if (observing_ != nullptr) [[unlikely]]
    observing_->pushed_done();
  submit_in_priority_order(ready);
}

// Out of line, so that an engine without observers tests them once per hand-on.
void EngineCore::hand_on_observed(OpRecord* op, TaskList* ready, bool at_push) noexcept {
  if (at_push) {
    observing_->ready_at_push(*op);
  } else {
    observing_->ready(*op, nullptr);
  }
  pass_on(op, ready);
  if (at_push) observing_->pushed_done();
}

// Gives one grant to `op`; the last one hands it on.
void EngineCore::grant(OpRecord* op, TaskList* ready) noexcept {
  if (op->grant()) hand_on(op, ready, false);
}

void EngineCore::route(OpNode* node, TaskList& ready, const void* completed) noexcept {
  if (node->owner_kind == kGraphJoin) {
    graphs_.grant_join(static_cast<GraphJoin*>(node), ready, completed);
    return;
  }
  OpRecord* op = static_cast<OpRecord*>(node);
  if (observing_ != nullptr) [[unlikely]]
    observing_->ready(*op, completed);
  if (has_streams_) {
    make_ready(op, ready);
  } else {
    ready.push_back(op);
  }
}

ParkWaiter::ParkWaiter(OpRecord* owner) noexcept : TrackerWaiter(&EngineCore::unparked), op(owner) {}

// An op whose last grant has arrived: completes its wait frontier (promised fences already in it) and hands it on (to
// `ready`), or parks it on the tracker when its executor cannot wait for an entry that has not completed. An op that
// accumulates takes its groups' tokens first (or parks on a group, to come back here when woken): its wait
// frontier then holds the signal of the member before it, which a stream member waits for on the device and a CPU
// member on the tracker, so that members run alone on the variable on devices too (accumulation.cpp).
void EngineCore::make_ready(OpRecord* op, TaskList& ready) noexcept {
  if (op->host_kind_ == kAccumulatingOp && !take_tokens(op, ready)) [[unlikely]]
    return;
  for (std::uint32_t i = 0; i < op->num_uses; ++i) op->uses[i].var->merge_wait_signal(op->uses[i], op->requirement);
  const StreamFacet* streams = op->executor()->stream_facet();
  for (const FrontierEntry& entry : op->requirement) {
    if ((streams == nullptr || !streams->owns_axis(entry.axis)) && tracker_.completed(entry.axis) < entry.epoch) {
      park(op);
      return;
    }
  }
  ready.push_back(op);
}

// Parks `op` until its whole wait frontier has completed (a stream op waits for its own executor's entries too: rare,
// and only conservative). The waiter's callback hands it to its executor, possibly on this thread before park returns.
void EngineCore::park(OpRecord* op) noexcept {
  try {
    tracker_.wait_async(op->waiter, op->requirement);
  } catch (...) {  // not reachable: the frontier is untainted and its axes are registered; fail the op, never lose it
    unparked(op->waiter, std::current_exception());
  }
}

void EngineCore::unparked(TrackerWaiter& waiter, std::exception_ptr error) noexcept {
  OpRecord* op = static_cast<ParkWaiter&>(waiter).op;
  if (op->trace_op != 0) op->engine->trace().unparked(*op);  // why it waited: the device work
  if (error != nullptr) op->engine->take_input_error(op, error);
  op->executor()->submit(*op);
}

}  // namespace depengine::detail
