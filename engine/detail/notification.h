// Notification: a one-shot event one thread waits for and another signals (after absl::Notification).
//
// Happens-before: everything done before notify() is visible after wait() returns or notified() returns true.
// Lifetime: the waiter may destroy the Notification as soon as wait() returns (or notified() returned true):
// notify() touches it only while holding mutex_, which wait() must reacquire before it can return.
// Thread safety: notify() once, from any thread; wait()/notified() from any threads. Cost: a mutex and, when a thread
// waits, a condition-variable wake. For slow paths only (waits), never for op hand-off.
#pragma once

#include <condition_variable>
#include <mutex>

namespace depengine::detail {

class Notification {
 public:
  void notify() {
    std::lock_guard lock(mutex_);
    done_ = true;
    cv_.notify_all();
  }

  [[nodiscard]] bool notified() const {
    std::lock_guard lock(mutex_);
    return done_;
  }

  void wait() const {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [this] { return done_; });
  }

 private:
  mutable std::mutex mutex_;
  mutable std::condition_variable cv_;
  bool done_ = false;  // guarded by mutex_
};

}  // namespace depengine::detail
