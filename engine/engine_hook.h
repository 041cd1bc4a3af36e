// EngineHook: a function an Engine calls on behalf of an object that lives beside it, until the object cancels it.
// Two kinds:
//   - ShutdownHook (Engine::AtShutdown): called once when the engine is destroyed, after every op has completed and
//     before its executors stop;
//   - ReportHook (Engine::AtReport): called whenever the engine writes its in-flight report, to add what the object
//     knows is waiting (Buffers: the reservations its bounded pools have queued).
//
// For objects that hold what the engine's executors own and may outlive the engine, such as Buffers, whose pools hold
// blocks of a stream executor's device memory: whichever of the two is destroyed first, the object must let go of the
// engine's resources while they still exist. The hook is that object's side of the handshake:
//   - destroyed (or cancel()ed) before the engine begins a call, the engine never calls it again, and for a shutdown
//     hook the object knows the engine is alive (cancel() returns true);
//   - otherwise a shutdown hook is called, once, and cancel() returns false: the engine is gone or going.
//
// Thread safety: cancel() from any thread. If the engine is calling the function on another thread, cancel() waits for
// it to return, so a destructor that cancels first never races the call. A shutdown hook runs on the thread destroying
// the engine, a report hook on the thread asking for the report (or the engine's stall watch); neither may push ops,
// wait on the engine, or destroy its own hook.
// Cost: registering allocates the hook's state (shared by the hook and the engine) and takes the engine's mutex.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

namespace depengine {

namespace detail {
class Diagnostics;
}  // namespace detail

template <class Signature>
class EngineHook {
 public:
  EngineHook() = default;  // an empty hook: nothing to cancel
  // Moving hands the registration over; assigning cancels the hook assigned to first.
  EngineHook(EngineHook&&) noexcept = default;
  EngineHook& operator=(EngineHook&& other) noexcept {
    if (this != &other) {
      (void)cancel();
      state_ = std::move(other.state_);
    }
    return *this;
  }
  EngineHook(const EngineHook&) = delete;
  EngineHook& operator=(const EngineHook&) = delete;
  ~EngineHook() { (void)cancel(); }

  // Makes sure the engine will not call the function again, waiting for a call in progress to return. Returns true if
  // it had not been called for the last time (a shutdown hook: never called, and never will be), false if it had (or
  // the hook is empty).
  bool cancel() noexcept {
    if (state_ == nullptr) return false;
    const std::shared_ptr<State> state = std::exchange(state_, nullptr);
    std::lock_guard lock(state->mutex);
    const bool pending = !state->done;
    state->done = true;
    state->fn = nullptr;
    return pending;
  }

 private:
  friend class detail::Diagnostics;
  struct State {
    std::mutex mutex;
    std::function<Signature> fn;  // guarded by mutex
    bool done = false;            // called for the last time, or cancelled; guarded by mutex
  };
  explicit EngineHook(std::shared_ptr<State> state) noexcept : state_(std::move(state)) {}

  std::shared_ptr<State> state_;
};

// The handles Engine::AtShutdown and Engine::AtReport return.
using ShutdownHook = EngineHook<void()>;
using ReportHook = EngineHook<std::string()>;

}  // namespace depengine
