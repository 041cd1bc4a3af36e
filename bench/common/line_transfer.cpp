#include "bench/common/line_transfer.h"

#include <atomic>
#include <thread>

namespace depengine::bench {

double line_transfer_ns(std::size_t transfers, std::chrono::nanoseconds budget) {
  using Clock = std::chrono::steady_clock;
  alignas(64) std::atomic<std::size_t> turn{0};
  alignas(64) std::atomic<bool> stop{false};
  const auto start = Clock::now();
  auto player = [&](std::size_t first) {
    for (std::size_t i = first; i < transfers; i += 2) {
      // acquire/release: each store hands the turn (and the line) to the other thread's acquire load.
      while (turn.load(std::memory_order_acquire) != i) {
        // relaxed: only ends the measurement; the count it ends at is read after join().
        if (stop.load(std::memory_order_relaxed)) return;
      }
      if (first == 0 && i % 1024 == 0 && Clock::now() - start > budget) {
        stop.store(true, std::memory_order_relaxed);
        return;
      }
      turn.store(i + 1, std::memory_order_release);
    }
  };
  std::thread other(player, 1);
  player(0);
  other.join();
  const auto stop_time = Clock::now();
  const std::size_t made = turn.load(std::memory_order_relaxed);  // relaxed: both players have been joined
  return std::chrono::duration<double, std::nano>(stop_time - start).count() / static_cast<double>(made > 0 ? made : 1);
}

}  // namespace depengine::bench
