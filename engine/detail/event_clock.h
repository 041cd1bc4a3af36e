// EventClock: the clock of observers' events (observer.h): nanoseconds of std::chrono::steady_clock since its epoch,
// read from the CPU's time-stamp counter where that is cheaper and safe.
//
// Why: an engine with statistics on reads a clock three times per op (push, start, end); through steady_clock (the
// vDSO's clock_gettime) a read costs about 50 ns on the shared 2-core machine, the TSC about 20 (bench note
// 2026-11-28-statistics-cost.md), on ops whose whole engine cost is 60-70 ns.
//
// How: on x86-64 Linux whose /proc/cpuinfo flags the TSC invariant (constant_tsc and nonstop_tsc: one rate, not
// stopped in idle states, synchronised across cores), the counter is read with __rdtsc and converted as
// anchor + (ticks since the anchor) x (nanoseconds per tick). The rate is measured once per process against
// steady_clock over kCalibration (the first EventClock made waits that long, spinning); each EventClock takes its own
// anchor (a steady_clock read paired with the counter) when made. Elsewhere, or with DEPENGINE_EVENT_CLOCK=steady in
// the environment, now() reads steady_clock itself.
//
// Accuracy: on the counter, a time is steady_clock's within the anchor's pairing (tens of nanoseconds) plus the rate's
// error over the clock's age: kRateError (parts of the age) at most, about 10 us for each second since the EventClock
// was made. Differences (run times, waits) are off by at most kRateError of their length. Times read on one thread
// never go back; times read on different threads are ordered as the counter is, which an invariant TSC keeps across
// cores.
//
// Thread safety: now() from any thread; immutable after construction. Cost: construction reads steady_clock and the
// counter a few times (the first in a process also spins for kCalibration); now() one counter read, a multiply and a
// shift, or one steady_clock read.
#pragma once

#include <chrono>
#include <cstdint>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace depengine::detail {

#if defined(__x86_64__)
// 128 bits for ticks x rate, which passes 2^63 after about an hour of ticks (a GCC and Clang extension on x86-64).
__extension__ typedef __int128 EventClockWide;
#endif

class EventClock {
 public:
  // How long the process's one calibration spins, and the bound it gives on the rate's relative error (the pairing's
  // error at each end, over that span; a calibration whose pairs came out less tight than that is refused, and the
  // clock falls back to steady_clock).
  static constexpr std::chrono::milliseconds kCalibration{5};
  static constexpr double kRateError = 2e-5;

  // `allow_counter` false: steady_clock whatever the CPU offers (tests compare the two).
  explicit EventClock(bool allow_counter = true);

  // Nanoseconds of std::chrono::steady_clock since its epoch, now (see Accuracy above).
  [[nodiscard]] std::int64_t now() const noexcept {
#if defined(__x86_64__)
    if (on_counter_) {
      const auto ticks = static_cast<std::int64_t>(__rdtsc() - anchor_ticks_);
      return anchor_ns_ + static_cast<std::int64_t>((static_cast<EventClockWide>(ticks) * mult_) >> kShift);
    }
#endif
    return steady_now();
  }

  // Whether now() reads the time-stamp counter.
  [[nodiscard]] bool on_counter() const noexcept { return on_counter_; }

  // steady_clock's now, as now() gives it.
  [[nodiscard]] static std::int64_t steady_now() noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

 private:
  static constexpr int kShift = 32;  // mult_ is nanoseconds per tick, in fixed point with kShift fraction bits

  bool on_counter_ = false;
  std::int64_t anchor_ns_ = 0;      // steady_clock at anchor_ticks_
  std::uint64_t anchor_ticks_ = 0;  // the counter at anchor_ns_
  std::int64_t mult_ = 0;           // the process's rate (see kShift)
};

}  // namespace depengine::detail
