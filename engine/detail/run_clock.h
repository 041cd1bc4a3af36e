// RunClock: a coarse clock that the stall watch advances and CPU ops read as their function starts, so that a report
// can say how long an op has been running (Engine::InFlightReport, EngineOptions::stall_report_after) without reading
// the system clock per op.
//
// A tick is a 16-bit count that skips 0: an op's stamp (OpNode::run_stamp) is the tick at which its function started,
// 0 while it does not run. The watch advances the clock every period(); an op stamped at tick s and seen at tick n has
// run for (n - s) periods, within one period either way (and less when the watch's thread ran late). The count wraps
// after 65,535 ticks (4,095 report periods: 68 hours at the default 60 s), and an op's time is told modulo that.
// Without a watch (stall reports off) the clock stays at 1 and period() is zero: an op is known to run, not for how
// long.
//
// Thread safety: now() and elapsed() from any thread; advance() from the watch's thread alone.
// Cost: now() is one relaxed load of a line written once per period.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace depengine::detail {

class RunClock {
 public:
  using Tick = std::uint16_t;
  // Ticks per stall_report_after: the precision of "running for", and how late after that time a stall is reported.
  static constexpr int kTicksPerReport = 16;
  static constexpr Tick kLast = 0xffff;

  explicit RunClock(std::chrono::nanoseconds period) noexcept : period_(period) {}

  [[nodiscard]] Tick now() const noexcept {
    return tick_.load(std::memory_order_relaxed);  // relaxed: a time stamp; nothing is read through it
  }
  void advance() noexcept {
    const Tick tick = now();
    tick_.store(tick == kLast ? 1 : tick + 1, std::memory_order_relaxed);  // relaxed: as in now()
  }
  [[nodiscard]] std::chrono::nanoseconds period() const noexcept { return period_; }
  // How long an op stamped `since` (not 0) has run, by now(); zero without a watch.
  [[nodiscard]] std::chrono::nanoseconds elapsed(Tick since) const noexcept {
    const Tick tick = now();
    const int ticks = tick >= since ? tick - since : tick + kLast - since;  // the count skips 0 as it wraps
    return period_ * ticks;
  }

 private:
  const std::chrono::nanoseconds period_;
  std::atomic<Tick> tick_{1};
};

}  // namespace depengine::detail
