// Waiting without the GIL, interruptibly: how every blocking call of the module lets Ctrl-C through.
//
// The engine's waits block until work completes, with no timeout, and must run on the caller's thread (WaitForAll's
// errors belong to the thread that calls it: engine.h, "Waits"). So a Python wait is two steps: first wait here, the
// GIL released, for a Signal that something notifies once the wait will not block for long (a marker op ordered after
// what is waited for, or a helper thread blocked in WaitForScope); then make the engine's own call, which returns at
// once and rethrows what it reports. The first step wakes every kTick to take the GIL and run Python's signal
// handlers, so a KeyboardInterrupt raised there (SIGINT, on the main thread) leaves the wait within a tick and the
// engine untouched: what was waited for still runs, and its errors stay where a later wait finds them.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace depengine::python {

// Notified once, from any thread; waited for by one Python thread. Shared (std::shared_ptr) by the waiter and the
// notifier, so that a waiter that left on KeyboardInterrupt leaves nothing dangling.
class Signal {
 public:
  void notify() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    cv_.notify_all();
  }
  // Waits until notified or `timeout` passed; true when notified.
  bool wait_for(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    return cv_.wait_for(lock, timeout, [this] { return done_; });
  }
  [[nodiscard]] bool notified() {
    std::lock_guard<std::mutex> lock(mutex_);
    return done_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;  // guarded by mutex_
};

// How often a waiting thread looks at Python's signals: the bound on how late a KeyboardInterrupt arrives, well inside
// the 0.1 s the module promises, at a cost of one GIL round trip per tick.
inline constexpr std::chrono::milliseconds kTick{20};

// Waits for `signal` with the GIL released (the caller holds it), raising what a signal handler raises
// (pybind11::error_already_set: KeyboardInterrupt) between ticks.
void wait_interruptibly(Signal& signal);

}  // namespace depengine::python
