// EventClock (engine/detail/event_clock.h): the clock of observers' events reads steady_clock's time, on its scale,
// whether it reads the time-stamp counter or steady_clock itself; its reads on one thread never go back.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>

#include <depengine/engine/detail/event_clock.h>

namespace depengine::detail {
namespace {

// How far a counter read may be from steady_clock's on a clock `age_ns` old: the anchor's pairing (well under a
// microsecond; 1 us allows for a preemption between the test's own reads) plus the rate's error over the age.
std::int64_t tolerance(std::int64_t age_ns) {
  return 1000 + static_cast<std::int64_t>(EventClock::kRateError * static_cast<double>(age_ns));
}

// Each read lies between two steady_clock reads around it (within the tolerance), and no read goes back.
void require_on_steady_scale(const EventClock& clock) {
  const std::int64_t made = EventClock::steady_now();
  std::int64_t last = clock.now();
  for (int i = 0; i < 10000; ++i) {
    const std::int64_t before = EventClock::steady_now();
    const std::int64_t read = clock.now();
    const std::int64_t after = EventClock::steady_now();
    const std::int64_t slack = clock.on_counter() ? tolerance(after - made) : 0;
    INFO("read " << i << ": " << read << " against [" << before << ", " << after << "], slack " << slack);
    REQUIRE(read >= before - slack);
    REQUIRE(read <= after + slack);
    REQUIRE(read >= last);
    last = read;
  }
}

TEST_CASE("the event clock reads steady_clock's time on its scale", "[engine][observer][clock]") {
  SECTION("the counter, where the CPU's is invariant") {
    const EventClock clock;
    INFO("on the counter: " << clock.on_counter());
    require_on_steady_scale(clock);
  }
  SECTION("steady_clock") {
    const EventClock clock(false);
    REQUIRE_FALSE(clock.on_counter());
    require_on_steady_scale(clock);
  }
}

TEST_CASE("the event clock measures a span as steady_clock does", "[engine][observer][clock]") {
  const EventClock clock;
  const std::int64_t steady_start = EventClock::steady_now();
  const std::int64_t start = clock.now();
  // A spin of 2 ms on steady_clock: long beside the tolerance, so a wrong rate (ticks taken for nanoseconds) shows.
  std::int64_t steady_end = steady_start;
  while (steady_end - steady_start < 2'000'000) steady_end = EventClock::steady_now();
  const std::int64_t end = clock.now();
  const std::int64_t span = end - start, steady_span = steady_end - steady_start;
  INFO("on the counter: " << clock.on_counter() << "; span " << span << " ns, steady_clock's " << steady_span);
  REQUIRE(span >= steady_span - tolerance(steady_span) * 2);
  REQUIRE(span <= steady_span + tolerance(steady_span) * 2 + 1'000'000);  // a preemption between the two reads
}

}  // namespace
}  // namespace depengine::detail
