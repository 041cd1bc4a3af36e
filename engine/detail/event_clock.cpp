// EventClock: whether the counter may be used, the process's one calibration of its rate, and each clock's anchor.
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

#include <depengine/engine/detail/event_clock.h>

namespace depengine::detail {
namespace {

#if defined(__x86_64__)

// A steady_clock read and the counter at the same moment: the read bracketed by two counter reads, the tightest
// bracket of a few tries (a try that a preemption or an interrupt stretched loses), paired with its middle.
struct Pair {
  std::int64_t ns = 0;
  std::uint64_t ticks = 0;
  std::uint64_t width = 0;  // the bracket, in ticks
};

Pair pair_now() noexcept {
  Pair best;
  best.width = ~std::uint64_t{0};
  for (int i = 0; i < 16; ++i) {
    const std::uint64_t before = __rdtsc();
    const std::int64_t ns = EventClock::steady_now();
    const std::uint64_t after = __rdtsc();
    if (after < before) continue;  // not reachable on an invariant counter; never trust such a pair
    if (after - before < best.width) best = Pair{ns, before + (after - before) / 2, after - before};
  }
  return best;
}

// Whether /proc/cpuinfo flags the counter invariant: one rate whatever the core's frequency (constant_tsc), running
// in every idle state (nonstop_tsc). Without both, a tick is not a fixed span of time.
bool counter_invariant() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line);
    bool constant = false, nonstop = false;
    for (std::string word; words >> word;) {
      constant = constant || word == "constant_tsc";
      nonstop = nonstop || word == "nonstop_tsc";
    }
    return constant && nonstop;
  }
  return false;
}

// The counter's rate in nanoseconds per tick (fixed point, `shift` fraction bits), measured against steady_clock
// over `span` by spinning; 0 if the counter may not be used or the measure is not tight enough for `max_error`.
std::int64_t calibrate(std::chrono::nanoseconds span, int shift, double max_error) {
  const char* forced = std::getenv("DEPENGINE_EVENT_CLOCK");
  if (forced != nullptr && std::string_view(forced) == "steady") return 0;
  if (!counter_invariant()) return 0;
  const Pair first = pair_now();
  Pair last = first;
  while (last.ns - first.ns < span.count()) last = pair_now();  // a spin on steady_clock, once per process
  if (last.ticks <= first.ticks) return 0;
  const auto ticks = static_cast<double>(last.ticks - first.ticks);
  const double ns_per_tick = static_cast<double>(last.ns - first.ns) / ticks;
  // Each pair is off by at most half its bracket (and steady_clock's own read inside it): the rate by their sum over
  // the span.
  const double error = static_cast<double>(first.width + last.width) / 2 / ticks;
  if (error > max_error || ns_per_tick <= 0.01 || ns_per_tick >= 100) return 0;  // 10 MHz to 100 GHz, or not a TSC
  return static_cast<std::int64_t>(ns_per_tick * static_cast<double>(std::int64_t{1} << shift) + 0.5);
}

#endif

}  // namespace

EventClock::EventClock(bool allow_counter) {
#if defined(__x86_64__)
  if (!allow_counter) return;
  // Once per process (a function-local static: thread-safe initialisation); every clock after shares the rate.
  static const std::int64_t rate = calibrate(kCalibration, kShift, kRateError);
  if (rate == 0) return;
  const Pair anchor = pair_now();
  anchor_ns_ = anchor.ns;
  anchor_ticks_ = anchor.ticks;
  mult_ = rate;
  on_counter_ = true;
#else
  (void)allow_counter;
#endif
}

}  // namespace depengine::detail
