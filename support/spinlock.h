// support/: small concurrency primitives shared by every layer; this folder includes nothing of ours.
//
// A test-and-test-and-set spinlock for critical sections of a few dozen instructions (a variable's queue, an
// executor's ready list). It spins with a pause, then yields the processor, so a holder preempted on a 2-core machine
// does not cost the waiter a whole scheduling quantum of burnt cycles.
//
// Thread safety: any thread may lock/unlock; unlock only by the holder. Not recursive. Cost: one uncontended
// exchange to lock and one store to unlock; no allocation. Satisfies Lockable, so std::lock_guard works.
#pragma once

#include <atomic>
#include <thread>

namespace depengine::support {

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

class Spinlock {
 public:
  void lock() noexcept {
    for (int spins = 0;; ++spins) {
      // acquire: pairs with the release in unlock(), so the previous holder's writes are visible to us.
      if (!locked_.exchange(true, std::memory_order_acquire)) return;
      // relaxed: only a hint that the lock looks free; the exchange above is what takes it.
      while (locked_.load(std::memory_order_relaxed)) {
        if (++spins < kSpinsBeforeYield) {
          cpu_relax();
        } else {
          std::this_thread::yield();
        }
      }
    }
  }

  [[nodiscard]] bool try_lock() noexcept {
    // relaxed load: a hint only; acquire exchange: pairs with the release in unlock().
    return !locked_.load(std::memory_order_relaxed) && !locked_.exchange(true, std::memory_order_acquire);
  }

  // One attempt, without looking first: for a caller that expects the lock to be free, and has something better to do
  // than wait when it is not. Costs what lock() costs when the lock is free.
  [[nodiscard]] bool try_acquire() noexcept {
    return !locked_.exchange(true, std::memory_order_acquire);  // acquire: as in lock()
  }

  // Whether some thread holds the lock: a hint, stale by the time the caller acts on it (nothing is ordered by it).
  [[nodiscard]] bool is_locked() const noexcept {
    return locked_.load(std::memory_order_relaxed);  // relaxed: a hint, as said above
  }

  void unlock() noexcept {
    // release: pairs with the acquire exchange in lock(), try_lock() or try_acquire() of the next holder.
    locked_.store(false, std::memory_order_release);
  }

 private:
  static constexpr int kSpinsBeforeYield = 64;
  std::atomic<bool> locked_{false};
};

}  // namespace depengine::support
