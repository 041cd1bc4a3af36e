// WaitForVar, WaitForAll, WaitForFence, WaitForScope and StopTrace: the calls that block the caller until work has
// completed. Each helps run queued work while it waits (WaitForVar, WaitForAll and StopTrace as a worker of the
// executors that ask for it: InFlight::help_until), and refuses to be called from inside an op of the same engine.
// Beside them ClearErrors, which clears variables' errors with the same internal ops as the waits, waiting for nothing.
#include <atomic>
#include <string>
#include <utility>

#include <depengine/engine/detail/engine_core.h>
#include <depengine/engine/detail/notification.h>
#include <depengine/engine/detail/running.h>

namespace depengine::detail {
namespace {

// Waits for `done`, running queued work of `in_flight`'s executors meanwhile. For a `done` notified from outside the
// engine's ops (a timeline's callback), which the engine may not outlive: Notification::notify() touches only the
// Notification, which the waiter keeps until it has seen it.
void help_until_notified(const Notification& done, InFlight& in_flight) {
  while (!done.notified()) {
    if (!in_flight.help()) done.wait();
  }
}

}  // namespace

void EngineCore::forbid_inside_op(const char* api) const {
  if (t_running.capturing == this) {
    throw Error(std::string(api) +
                " called inside a Capture: the captured ops run only when the graph is replayed, so there is nothing "
                "to wait for yet; wait after the Replay");
  }
  if (t_running.engine == this) {
    throw Error(std::string(api) +
                " called from inside a running op of the same engine: it would wait for that op, or for work queued "
                "behind it, and never return; push a dependent op instead");
  }
}

void EngineCore::wait_for_var(Var var) {
  forbid_inside_op("WaitForVar");
  VarState* state = vars_.checked(var, "WaitForVar");
  std::atomic<bool> done{false};
  std::exception_ptr error;
  push_sync_op(state, var.generation_, OpFunction::make<false>([this, state, &done, &error] {
                 error = std::exchange(state->error, nullptr);
                 // release: pairs with the acquire load below, so `error` is visible; the last touch of this frame.
                 done.store(true, std::memory_order_release);
                 in_flight_.notify_waiters();  // the engine outlives this op
               }),
               "WaitForVar");
  in_flight_.help_until([&done] { return done.load(std::memory_order_acquire); });
  if (error != nullptr) {
    errors().reported(error, var);
    std::rethrow_exception(error);
  }
}

void EngineCore::wait_for_all() {
  forbid_inside_op("WaitForAll");
  in_flight_.wait_for_zero();
  ErrorLog::Taken taken = errors().take(current_owner());
  // Clear the errors this thread's ops attached, in push order, so ops pushed meanwhile by other threads see a
  // consistent state. A variable that carries another error by then (a WaitForVar cleared ours, another thread's op
  // attached its own) keeps it.
  for (const ErrorLog::Poisoning& poisoning : taken.clear) {
    const Var& var = poisoning.var;
    // relaxed: an early filter for variables deleted since; push re-checks under the lock.
    if (var.state_->generation.load(std::memory_order_relaxed) != var.generation_) continue;
    VarState* state = var.state_;
    try {
      push_sync_op(state, var.generation_, OpFunction::make<false>([state, error = poisoning.error] {
                     if (state->error == error) state->error = nullptr;
                   }),
                   "WaitForAll");
    } catch (const Error&) {
      // deleted concurrently: nothing left to clear
    }
  }
  if (!taken.clear.empty()) in_flight_.wait_for_zero();
  errors().sink(taken.unreported, UnreportedError::When::kClearedByWaitForAll);
  if (taken.first != nullptr) std::rethrow_exception(taken.first);
}

void EngineCore::wait_for_fence(const Fence& fence) {
  forbid_inside_op("WaitForFence");
  if (fence.timeline == nullptr) throw Error("WaitForFence: the fence names a null timeline");
  Notification done;
  std::exception_ptr error;
  TimelineCallbackWaiter waiter([&done, &error](const TimelineWaitResult& result) noexcept {
    error = result.error();
    done.notify();
  });
  fence.timeline->wait_async(waiter, fence.value);  // no promises: the value itself, that is completed work
  help_until_notified(done, in_flight_);
  if (error != nullptr) std::rethrow_exception(error);
}

void EngineCore::wait_for_scope(const CancelScope& scope) {
  forbid_inside_op("WaitForScope");
  std::atomic<std::uint32_t>& pending = scope.state_->pending;
  // acquire: pairs with the release decrement of ScopeState::op_retired(): the ops' effects are visible on return.
  for (std::uint32_t left; (left = pending.load(std::memory_order_acquire)) != 0;) {
    if (!in_flight_.help()) pending.wait(left, std::memory_order_acquire);
  }
}

void EngineCore::clear_errors(VarList vars) {
  if (t_running.capturing == this) {
    throw Error(
        "ClearErrors called inside a Capture: it would clear the errors once, now, not at each replay; call it between "
        "replays");
  }
  for (const Var& var : vars) (void)vars_.checked(var, "ClearErrors");  // every handle first: a bad one pushes nothing
  for (const Var& var : vars) {
    // A mutation's exclusive use: the op runs once every op pushed on the variable before has completed, and holds
    // back every op pushed after, so the error it takes is the last one the earlier ops left.
    push_sync_op(var.state_, var.generation_, OpFunction::make<false>([this, var] {
                   const std::exception_ptr error = std::exchange(var.state_->error, nullptr);
                   if (error != nullptr) errors().reported(error, var);
                 }),
                 "ClearErrors");
  }
}

void EngineCore::stop_trace() {
  forbid_inside_op("StopTrace");
  TraceRecorder& recorder = trace().stop_begin();
  in_flight_.wait_for_zero();
  trace().stop_end();
  recorder.write();
}

}  // namespace depengine::detail
