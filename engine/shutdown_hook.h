// ShutdownHook: a call an Engine makes once when it is destroyed, after every op has completed and before its
// executors stop (Engine::AtShutdown).
//
// For objects that live beside an engine and hold what its executors own, such as Buffers, whose pools hold blocks of
// a stream executor's device memory: whichever of the two is destroyed first, the object must let go of the engine's
// resources while they still exist. The hook is that object's side of the handshake:
//   - destroyed (or cancel()ed) before the engine's destruction begins calling it, the engine never calls it, and the
//     object knows the engine is alive (cancel() returns true);
//   - otherwise the engine calls it, once, and cancel() returns false: the engine is gone or going.
//
// Thread safety: cancel() from any thread. If the engine is calling the function on another thread, cancel() waits for
// it to return, so a destructor that cancels first never races the call. The function runs on the thread destroying
// the engine; it must not push ops, wait on the engine, or destroy its own ShutdownHook.
// Cost: AtShutdown allocates the hook's state (shared by the hook and the engine) and takes the engine's mutex.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <utility>

namespace depengine {

namespace detail {
class EngineCore;
}  // namespace detail

class ShutdownHook {
 public:
  ShutdownHook() = default;  // an empty hook: nothing to cancel
  ShutdownHook(ShutdownHook&&) noexcept = default;
  ShutdownHook& operator=(ShutdownHook&& other) noexcept {
    if (this != &other) {
      (void)cancel();
      state_ = std::move(other.state_);
    }
    return *this;
  }
  ShutdownHook(const ShutdownHook&) = delete;
  ShutdownHook& operator=(const ShutdownHook&) = delete;
  ~ShutdownHook() { (void)cancel(); }

  // Makes sure the engine will not call the function, waiting for a call in progress to return. Returns true if it was
  // not called (and never will be), false if it was (or the hook is empty).
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
  friend class detail::EngineCore;
  struct State {
    std::mutex mutex;
    std::function<void()> fn;  // guarded by mutex
    bool done = false;         // called or cancelled; guarded by mutex
  };
  explicit ShutdownHook(std::shared_ptr<State> state) noexcept : state_(std::move(state)) {}

  std::shared_ptr<State> state_;
};

}  // namespace depengine
