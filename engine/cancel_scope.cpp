#include <depengine/engine/cancel_scope.h>
#include <depengine/engine/errors.h>

namespace depengine {

CancelScope::CancelScope() : state_(new detail::ScopeState) {}

void CancelScope::Cancel() {
  std::call_once(state_->error_once, [this] {
    state_->error = std::make_exception_ptr(
        Cancelled("cancelled: the op's CancelScope was cancelled before the op ran (CancelScope::Cancel)"));
  });
  // release: pairs with the acquire loads of `cancelled` (OpGate::check), publishing the
  // error written above.
  state_->cancelled.store(true, std::memory_order_release);
}

namespace detail {

void ScopeState::op_retired(ScopeState* state) noexcept {
  // release: pairs with the acquire loads of WaitForScope and pending(), publishing what the op did. The op's own
  // reference keeps the state alive through the notification.
  if (state->pending.fetch_sub(1, std::memory_order_release) == 1) state->pending.notify_all();
  release(state);
}

void ScopeState::release(ScopeState* state) noexcept {
  // acq_rel: the last reference's acquire pairs with every other's release, so all are done with the state.
  if (state->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete state;
}

}  // namespace detail
}  // namespace depengine
