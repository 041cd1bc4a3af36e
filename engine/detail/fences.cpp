// Timeline fences (PushOptions::wait_fences / signal_fences): arm an op's waits one after another, promise its signal
// fences when a stream op is issued, raise or fail them when it completes.
#include <cassert>

#include <depengine/engine/detail/engine_core.h>
#include <depengine/engine/detail/running.h>

namespace depengine::detail {

FenceWaiter::FenceWaiter(OpRecord* owner) noexcept : TimelineWaiter(&EngineCore::fence_done), op(owner) {}

// Arms the op's fence waiter on its next wait fence. A stream op takes the promises of this engine (whose tracker
// names its axes); a CPU op waits for the value itself.
void EngineCore::arm_fence(OpRecord* op) noexcept {
  const Fence& fence = op->wait_fences[op->next_fence];
  const void* owner = op->executor()->issues_ahead() ? &tracker_ : nullptr;
  try {
    fence.timeline->wait_async(op->fence_waiter, fence.value, owner);
  } catch (...) {  // not reachable: the waiter is armed once at a time; fail the op rather than lose it
    fence_done(op->fence_waiter, TimelineWaitResult::failed(std::current_exception()));
  }
}

// A wait fence was reached (its work has completed: nothing to add), promised (its signaller's work is issued: the op
// waits for that requirement like for a variable's signal) or failed (an input error). Then the next fence, or the
// fences' grant.
void EngineCore::fence_done(TimelineWaiter& waiter, const TimelineWaitResult& result) noexcept {
  OpRecord* op = static_cast<FenceWaiter&>(waiter).op;
  EngineCore* engine = op->engine;
  if (result.is_promised()) {
    // Promised by this engine only: the requirement names its axes, at most kMaxEngineAxes of them, so it fits.
    op->requirement.merge(result.requirement());
    assert(!op->requirement.tainted());
  } else if (result.is_failed() && !op->no_skip && op->error == nullptr) {
    op->error = result.error();  // read after the op's last grant, which this thread's grant below publishes
    engine->errors().raise(op->error, op->name_view(), op->owner);  // for when no op of this engine failed it
  }
  if (++op->next_fence < op->wait_fences.size()) {
    engine->arm_fence(op);
    return;
  }
  if (op->trace_op != 0) engine->trace().fence_reached(*op, op->wait_fences[op->next_fence - 1]);
  // Signalled from inside a running op of this engine (its completion, most often): the op joins that executor's ready
  // list, so a chain of ops ordered by fences runs in the executor's loop instead of nesting callbacks (the inline
  // executor would otherwise run each op inside its predecessor's signal).
  if (t_running.engine == engine) {
    engine->grant(op, t_running.ready);
    return;
  }
  // Any other thread (the user's own, a stream executor's completion thread) may run or issue the op right here, and
  // it can retire while this thread is still inside the engine or its executor (leave()'s wake check, the executor's
  // submit): it is counted as complete_async() counts a user's completing thread, so shutdown() frees nothing first.
  ForeignThread foreign(*engine);
  engine->grant(op, nullptr);
}

// A stream op has been issued: its signal fences are promised to this engine's waiters, with what must complete
// first (its wait frontier and its own epoch). A promise the timeline refuses only means its waiters wait for the
// value.
void EngineCore::promise_fences(OpRecord* op) noexcept {
  TimelineRequirement requirement(op->requirement);
  requirement.insert_or_raise(op->issued_at.axis, op->issued_at.epoch);
  const EngineTrace::FenceRaiser raiser(op);  // the waiters' callbacks run here: a trace names the op
  for (const Fence& fence : op->signal_fences) (void)fence.timeline->promise(fence.value, &tracker_, requirement);
}

// The op has completed (or was skipped): raises its signal fences with what it knew had happened, or fails them with
// its error. Called before the op releases its variables (a CPU op) and before it retires, so a WaitForVar or
// WaitForAll that returns finds its timelines signalled. (A stream op released its variables at issue; its
// executor advances the tracker, which WaitForVar waits on, only after complete_issued.)
void EngineCore::signal_fences(OpRecord* op, const std::exception_ptr& error) noexcept {
  if (!op->signals_fences) return;
  const EngineTrace::FenceRaiser raiser(op);  // the waiters' callbacks run here: a trace names the op
  if (error != nullptr) {
    for (const Fence& fence : op->signal_fences) (void)fence.timeline->fail(error);
    return;
  }
  TimelineFrontier knowledge;
  knowledge.merge_satisfied(op->requirement);
  if (!op->issued_at.axis.is_null()) knowledge.insert_or_raise(op->issued_at.axis, op->issued_at.epoch);
  for (const Fence& fence : op->signal_fences) (void)fence.timeline->raise(fence.value, knowledge);
}

}  // namespace depengine::detail
