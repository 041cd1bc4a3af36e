// Timeline (frontier/timeline.h): signal order, the import rule (scheduling vs causality, history eviction,
// the external taint watermark), blocking and asynchronous waits, failure, and cancel racing the firing.
//
// Randomized tests run with DEPENGINE_TEST_SEED (one fixed seed) or DEPENGINE_TEST_REPEAT fresh seeds (default 3), as
// everywhere (test/test_support.h), and CAPTURE the seed. Nothing sleeps to wait for another thread.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <depengine/frontier/timeline.h>

#include "test/test_support.h"

namespace depengine {
namespace {

// Atomics: where a test reads a count after joining the threads that bump it, the join orders it, and the read is
// relaxed; the waits for a count to be reached while they run are acquire, each naming its release.

// The shared test conventions (test/test_support.h): sizes, seeds, the watchdog, bounded waits.
using test::hang_limit;
using test::sized;
using test::test_seeds;
using test::wait_until;
using test::Watchdog;

void linger(int rounds = 64) {
  std::atomic<int> sink{0};
  // relaxed: the loop only burns time.
  for (int i = 0; i < rounds; ++i) sink.fetch_add(1, std::memory_order_relaxed);
}

struct TestError : std::runtime_error {
  TestError() : std::runtime_error("test failure") {}
};

const Axis kQueue = Axis::make(0, 0, AxisDomain::kQueue, 1);
const Axis kOther = Axis::make(0, 0, AxisDomain::kQueue, 2);

// A distinct frontier per value, growing with it: F(i) dominates F(j) exactly when i >= j.
TimelineFrontier F(std::uint64_t value) { return TimelineFrontier{{kQueue, value}, {kOther, 1000 + value}}; }

TimelineFrontier tainted(TimelineFrontier f) {
  f.mark_tainted();
  return f;
}

TimelineFrontier import_of(const Timeline& timeline, std::uint64_t value) {
  const TimelineWaitResult result = timeline.poll(value);
  REQUIRE(result.is_reached());
  return result.knowledge();
}

// ---- signal order ----------------------------------------------------------------------------------------------

TEST_CASE("Timeline: every signal must strictly increase the value", "[timeline]") {
  Timeline timeline({.name = "fence"});
  CHECK(timeline.query() == 0);
  CHECK_THROWS_AS(timeline.signal(0, F(0)), TimelineOrderError);  // 0 does not exceed the initial 0
  timeline.signal(5, F(5));
  CHECK(timeline.query() == 5);
  try {
    timeline.signal(3, F(3));
    FAIL("a decreasing signal was accepted");
  } catch (const TimelineOrderError& error) {
    CHECK(error.current() == 5);
    CHECK(error.requested() == 3);
    const std::string message = error.what();
    CHECK(message.find("timeline 'fence'") != std::string::npos);
    CHECK(message.find("signal(3)") != std::string::npos);
    CHECK(message.find("current value 5") != std::string::npos);
  }
  CHECK_THROWS_AS(timeline.signal(5, F(5)), TimelineOrderError);  // equal is not an increase
  try {
    timeline.signal_external(4);
    FAIL("a decreasing external signal was accepted");
  } catch (const TimelineOrderError& error) {
    CHECK(std::string(error.what()).find("signal_external(4)") != std::string::npos);
  }
  CHECK_THROWS_AS(timeline.signal_external(5), std::invalid_argument);  // TimelineOrderError is one
  // A rejected signal changes nothing.
  CHECK(timeline.query() == 5);
  CHECK(import_of(timeline, 5) == F(5));
  timeline.signal_external(7);
  CHECK_THROWS_AS(timeline.signal(6, F(6)), TimelineOrderError);  // must exceed the external value too
  timeline.signal(8, F(8));
  CHECK(timeline.query() == 8);
  CHECK(timeline.watermark() == 8);
}

TEST_CASE("Timeline: a larger frontier is converted to the timeline's capacity, evicting into taint", "[timeline]") {
  Timeline timeline;
  KnowledgeFrontier<kTimelineFrontierCapacity + 4> big;
  for (std::uint64_t i = 1; i <= kTimelineFrontierCapacity + 4; ++i) {
    big.insert_or_raise(Axis::make(0, 0, AxisDomain::kQueue, i), 100 + i);
  }
  timeline.signal(1, big);
  const TimelineFrontier imported = import_of(timeline, 1);
  CHECK(imported.size() == kTimelineFrontierCapacity);
  CHECK(imported.tainted());
  CHECK(dominates(big, imported));  // less knowledge, never more
}

// ---- the import rule -------------------------------------------------------------------------------------------

TEST_CASE("Timeline: a late wait imports the frontier of the signal that first reached its value", "[timeline]") {
  // The seed's "Scheduling vs. Causality": S is signalled 1..5; a waiter on S >= 2 that arrives when S is at 5
  // depends on the work before the signal of 2, not on the work that pushed S on to 5.
  Timeline s;
  for (std::uint64_t v = 1; v <= 5; ++v) s.signal(v, F(v));
  CHECK(import_of(s, 2) == F(2));
  CHECK(import_of(s, 2) != F(5));
  CHECK_FALSE(import_of(s, 2).tainted());
  const TimelineWaitResult blocking = s.wait(2, std::chrono::seconds(1));
  CHECK(blocking.is_reached());
  CHECK(blocking.knowledge() == F(2));
  bool fired = false;
  TimelineCallbackWaiter late(
      [&](const TimelineWaitResult& r) noexcept { fired = r.is_reached() && r.knowledge() == F(2); });
  s.wait_async(late, 2);
  CHECK(fired);  // already reached: the callback ran before wait_async returned
  CHECK(import_of(s, 5) == F(5));
  CHECK(import_of(s, 0) == TimelineFrontier{});  // value 0 needs nothing: empty and untainted

  // With gaps, the first signal to reach v is the first whose value is >= v.
  Timeline gaps;
  gaps.signal(2, F(2));
  gaps.signal(5, F(5));
  CHECK(import_of(gaps, 1) == F(2));
  CHECK(import_of(gaps, 3) == F(5));
  CHECK(import_of(gaps, 5) == F(5));
  CHECK(gaps.poll(6).is_timed_out());
}

TEST_CASE("Timeline: when history is gone, the import is the newest retained frontier at or below v, tainted",
          "[timeline]") {
  // history 4, checkpoints 2 every 4th signal: after values 1..20 (sequences 0..19) the recent ring holds 17..20 and
  // the checkpoints, of 1, 5, 9, 13 (sequences 0, 4, 8, 12), hold the newest two: 9 and 13.
  Timeline t({.history = 4, .checkpoints = 2, .checkpoint_stride = 4});
  for (std::uint64_t v = 1; v <= 20; ++v) t.signal(v, F(v));
  CHECK(import_of(t, 20) == F(20));
  CHECK(import_of(t, 17) == F(17));  // the oldest recent record: its predecessor (16) is gone, but 16 < 17
  CHECK(import_of(t, 13) == F(13));  // a checkpoint that first reached 13: exact
  CHECK(import_of(t, 9) == F(9));
  CHECK(import_of(t, 16) == tainted(F(13)));  // 16's record is gone: newest retained <= 16 is 13
  CHECK(import_of(t, 15) == tainted(F(13)));
  CHECK(import_of(t, 12) == tainted(F(9)));
  CHECK(import_of(t, 10) == tainted(F(9)));
  CHECK(import_of(t, 8) == tainted(TimelineFrontier{}));  // nothing retained is <= 8
  CHECK(import_of(t, 1) == tainted(TimelineFrontier{}));

  Timeline bare({.history = 2, .checkpoints = 0});
  for (std::uint64_t v = 1; v <= 5; ++v) bare.signal(v, F(v));
  CHECK(import_of(bare, 4) == F(4));
  CHECK(import_of(bare, 3) == tainted(TimelineFrontier{}));
}

TEST_CASE("Timeline: randomized imports know exactly the first signal's frontier, or less and tainted", "[timeline]") {
  for (const std::uint64_t seed : test_seeds()) {
    CAPTURE(seed);
    std::mt19937_64 rng(seed);
    auto pick = [&rng](std::uint64_t lo, std::uint64_t hi) {
      return std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng);
    };
    const auto history = static_cast<std::uint32_t>(pick(1, 6));
    const auto checkpoints = static_cast<std::uint32_t>(pick(0, 3));
    const auto stride = static_cast<std::uint32_t>(pick(0, 5));
    CAPTURE(history, checkpoints, stride);
    Timeline t({.history = history, .checkpoints = checkpoints, .checkpoint_stride = stride});
    std::vector<std::uint64_t> signalled;
    std::uint64_t value = 0;
    for (int i = 0; i < 40; ++i) {
      value += pick(1, 3);
      t.signal(value, F(value));
      signalled.push_back(value);
    }
    for (std::uint64_t v = 1; v <= value; ++v) {
      CAPTURE(v);
      const std::uint64_t first = *std::lower_bound(signalled.begin(), signalled.end(), v);
      const TimelineFrontier imported = import_of(t, v);
      CHECK(dominates(F(first), imported));  // never more than the first signal knew
      if (!imported.tainted()) CHECK(imported == F(first));
      if (first >= signalled[signalled.size() - history]) CHECK(imported == F(first));  // in the recent ring: exact
    }
  }
}

TEST_CASE("Timeline: external signals taint values above the watermark until the engine signals past them",
          "[timeline]") {
  // The rule: watermark = the highest value signal() reached. A wait for v with watermark < v <= query() was reached
  // only from outside, so it imports the newest engine frontier (value <= watermark), tainted. Once signal() passes
  // v, a wait for v imports the first engine signal >= v, untainted.
  Timeline t;
  for (std::uint64_t v = 1; v <= 5; ++v) t.signal(v, F(v));
  TimelineFrontier early;
  bool early_fired = false;
  TimelineCallbackWaiter waiter8([&](const TimelineWaitResult& r) noexcept {
    early_fired = r.is_reached();
    early = r.knowledge();
  });
  t.wait_async(waiter8, 8);
  t.signal_external(10);
  CHECK(t.query() == 10);
  CHECK(t.watermark() == 5);
  REQUIRE(early_fired);  // fired by the external signal itself
  CHECK(early == tainted(F(5)));
  CHECK(import_of(t, 3) == F(3));  // at or below the watermark: exact
  CHECK(import_of(t, 5) == F(5));
  CHECK(import_of(t, 6) == tainted(F(5)));  // (5, 10]: tainted
  CHECK(import_of(t, 10) == tainted(F(5)));
  CHECK(t.poll(11).is_timed_out());

  TimelineFrontier late;
  TimelineCallbackWaiter waiter11([&](const TimelineWaitResult& r) noexcept { late = r.knowledge(); });
  t.wait_async(waiter11, 11);
  t.signal(11, F(11));  // the engine passes the tainted range
  CHECK(late == F(11));
  CHECK(t.watermark() == 11);
  CHECK(import_of(t, 6) == F(11));  // recovered: the first engine signal >= 6 is 11
  CHECK(import_of(t, 10) == F(11));
  CHECK(import_of(t, 5) == F(5));  // values below the old watermark keep their own signal

  // The other way round: several external steps, then an engine signal that passes only some of them.
  t.signal_external(20);
  t.signal_external(30);
  CHECK(import_of(t, 25) == tainted(F(11)));
  CHECK_THROWS_AS(t.signal(25, F(25)), TimelineOrderError);  // the engine must exceed the external value
  t.signal(31, F(31));
  CHECK(import_of(t, 25) == F(31));
  CHECK(import_of(t, 12) == F(31));

  // Only external signals: nothing retained, so the import is empty and tainted.
  Timeline outside;
  outside.signal_external(3);
  CHECK(import_of(outside, 2) == tainted(TimelineFrontier{}));
}

// ---- waits -----------------------------------------------------------------------------------------------------

TEST_CASE("Timeline: a host wait times out, or returns the import once another thread signals", "[timeline]") {
  Watchdog watchdog("host wait");
  Timeline t;
  CHECK(t.wait(1, std::chrono::milliseconds(1)).is_timed_out());
  CHECK(t.wait(1, std::chrono::nanoseconds(0)).is_timed_out());  // a poll
  CHECK(t.wait(1, std::chrono::nanoseconds(-5)).is_timed_out());

  std::atomic<bool> waiting{false};
  TimelineFrontier got;
  TimelineWaitStatus status = TimelineWaitStatus::kTimedOut;
  std::thread waiter([&] {
    // release: pairs with the acquire in the main thread's wait_until.
    waiting.store(true, std::memory_order_release);
    const TimelineWaitResult r = t.wait(3);  // forever
    status = r.status();
    got = r.knowledge();
  });
  REQUIRE(wait_until([&] { return waiting.load(std::memory_order_acquire); }));
  t.signal(1, F(1));
  t.signal(3, F(3));
  t.signal(4, F(4));
  waiter.join();
  CHECK(status == TimelineWaitStatus::kReached);
  CHECK(got == F(3));

  // A deadline racing the signal: either outcome is fine, nothing else is, and the waiter's stack state must be
  // safe to drop either way (ASAN would see a callback writing to a returned wait's blocker).
  const std::size_t rounds = sized(2000, 300, 500);
  std::atomic<std::uint64_t> go{0};
  std::uint64_t reached = 0, timed_out = 0, wrong = 0;
  std::thread racer([&] {
    for (std::uint64_t v = 1; v <= rounds; ++v) {
      const TimelineWaitResult r = t.wait(10 + v, std::chrono::microseconds(v % 7 * 20));
      if (r.is_reached() && r.knowledge() == F(10 + v)) {
        ++reached;
      } else if (r.is_timed_out()) {
        ++timed_out;
      } else {
        ++wrong;
      }
      go.store(v, std::memory_order_release);  // release: pairs with the acquire below; hands over the round
    }
  });
  for (std::uint64_t v = 1; v <= rounds; ++v) {
    t.signal(10 + v, F(10 + v));
    REQUIRE(wait_until([&] { return go.load(std::memory_order_acquire) >= v; }));
  }
  racer.join();
  CHECK(wrong == 0);
  CHECK(reached + timed_out == rounds);
}

TEST_CASE("Timeline: fail() fails armed waiters, later waits and later signals", "[timeline]") {
  Watchdog watchdog("fail");
  Timeline t({.name = "doomed"});
  t.signal(2, F(2));
  int failed_callbacks = 0;
  auto on_result = [&](const TimelineWaitResult& r) noexcept {
    if (r.is_failed()) ++failed_callbacks;
  };
  TimelineCallbackWaiter a(on_result), b(on_result);
  t.wait_async(a, 3);
  t.wait_async(b, 4);
  std::atomic<bool> waiting{false};
  TimelineWaitResult blocked = TimelineWaitResult::timed_out();
  std::thread blocker([&] {
    waiting.store(true, std::memory_order_release);  // release: pairs with the acquire in wait_until below
    blocked = t.wait(10);
  });
  REQUIRE(wait_until([&] { return waiting.load(std::memory_order_acquire); }));
  const std::exception_ptr error = std::make_exception_ptr(TestError());
  CHECK(t.fail(error));
  blocker.join();
  CHECK(failed_callbacks == 2);
  CHECK(blocked.is_failed());
  CHECK_THROWS_AS(blocked.rethrow_if_failed(), TestError);
  CHECK(t.failed());
  CHECK(t.error() == error);
  // Every later wait fails, even for a value reached before the failure.
  CHECK(t.poll(1).is_failed());
  CHECK(t.wait(100, std::chrono::seconds(5)).is_failed());
  TimelineCallbackWaiter c(on_result);
  t.wait_async(c, 1);
  CHECK(failed_callbacks == 3);  // inline
  // Every later signal rethrows the failure.
  CHECK_THROWS_AS(t.signal(5, F(5)), TestError);
  CHECK_THROWS_AS(t.signal_external(6), TestError);
  CHECK(t.query() == 2);
  // The first failure wins.
  CHECK_FALSE(t.fail(std::make_exception_ptr(std::runtime_error("second"))));
  CHECK(t.error() == error);
  CHECK_THROWS_AS(t.fail(nullptr), std::invalid_argument);
}

// ---- raise (>= signals) and promises ---------------------------------------------------------------------------

TEST_CASE("Timeline: raise() signals like signal() but leaves a timeline already at or past the value alone",
          "[timeline]") {
  Timeline t;
  std::uint64_t fired_with = 0;
  TimelineCallbackWaiter waiter([&](const TimelineWaitResult& r) noexcept {
    if (r.is_reached() && r.knowledge() == F(3)) fired_with = 3;
  });
  t.wait_async(waiter, 2);
  CHECK(t.raise(3, F(3)));
  CHECK(fired_with == 3);
  CHECK(t.query() == 3);
  CHECK(t.watermark() == 3);
  CHECK_FALSE(t.raise(2, F(2)));  // a signaller that completed late: the value stays, and so does the import
  CHECK_FALSE(t.raise(3, F(4)));
  CHECK(t.query() == 3);
  CHECK(import_of(t, 2) == F(3));
  CHECK(t.raise(5, F(5)));
  CHECK(import_of(t, 4) == F(5));
  CHECK(t.fail(std::make_exception_ptr(TestError())));
  CHECK_FALSE(t.raise(9, F(9)));  // a failed timeline is not raised, and raise() does not throw
  CHECK(t.query() == 5);
}

TEST_CASE("Timeline: a promise fires the waiters of its owner at or below its value, with its requirement",
          "[timeline]") {
  Timeline t;
  int owner = 0, stranger = 0;  // two schedulers: only their addresses matter
  const TimelineRequirement first{{kQueue, 7}};
  const TimelineRequirement second{{kQueue, 9}, {kOther, 3}};
  std::vector<std::string> log;
  auto waiter_for = [&log](std::string name) {
    return [&log, name](const TimelineWaitResult& r) noexcept {
      log.push_back(name + (r.is_promised() ? ":promised" : r.is_reached() ? ":reached" : ":failed"));
    };
  };
  TimelineRequirement got_low, got_high;
  TimelineCallbackWaiter low([&](const TimelineWaitResult& r) noexcept {
    log.push_back("low");
    got_low = r.requirement();
  });
  TimelineCallbackWaiter high([&](const TimelineWaitResult& r) noexcept {
    log.push_back("high");
    got_high = r.requirement();
  });
  TimelineCallbackWaiter other_owner(waiter_for("stranger"));
  TimelineCallbackWaiter no_owner(waiter_for("plain"));
  t.wait_async(low, 2, &owner);
  t.wait_async(high, 4, &owner);
  t.wait_async(other_owner, 1, &stranger);
  t.wait_async(no_owner, 1);
  CHECK(log.empty());

  CHECK(t.promise(3, &owner, first));  // covers `low` (2 <= 3), not `high` (4)
  REQUIRE(log == std::vector<std::string>{"low"});
  CHECK(got_low == first);
  CHECK(t.query() == 0);            // a promise is not a signal
  CHECK(t.poll(2).is_timed_out());  // and polls and blocking waits ignore it

  // A waiter armed after the promise takes it at once; one above every promise waits.
  TimelineRequirement late;
  TimelineCallbackWaiter late_waiter([&](const TimelineWaitResult& r) noexcept {
    if (r.is_promised()) late = r.requirement();
  });
  t.wait_async(late_waiter, 3, &owner);
  CHECK(late == first);

  CHECK(t.promise(6, &owner, second));
  REQUIRE(log.size() == 2);
  CHECK(log[1] == "high");
  CHECK(got_high == second);  // the smallest promise >= 4 is the one of 6

  // The signals themselves: the promised waiters have fired already; the others import the signal.
  t.signal(6, F(6));
  CHECK(log == std::vector<std::string>{"low", "high", "stranger:reached", "plain:reached"});
}

TEST_CASE("Timeline: promises are refused when they could not hold or would not help", "[timeline]") {
  int owner = 0;
  const TimelineRequirement requirement{{kQueue, 1}};
  Timeline t({.name = "p", .promises = 2});
  CHECK_THROWS_AS(t.promise(1, nullptr, requirement), std::invalid_argument);
  t.signal(2, F(2));
  CHECK_FALSE(t.promise(2, &owner, requirement));  // already reached
  CHECK(t.promise(4, &owner, requirement));
  CHECK_FALSE(t.promise(4, &owner, requirement));  // does not exceed the newest promise
  CHECK_FALSE(t.promise(3, &owner, requirement));
  TimelineRequirement incomplete = requirement;
  incomplete.mark_tainted();
  CHECK_FALSE(t.promise(5, &owner, incomplete));  // would not name everything to wait for
  CHECK(t.promise(5, &owner, requirement));
  // The store holds 2: a third promise evicts the oldest (4), so a late waiter for 3 takes the next one, 5's.
  const TimelineRequirement of_six{{kQueue, 6}};
  CHECK(t.promise(6, &owner, of_six));
  const TimelineRequirement of_five{{kQueue, 5}};
  CHECK(t.promise(7, &owner, of_five));  // evicts 5: now {6, 7}
  TimelineRequirement taken;
  TimelineCallbackWaiter late([&](const TimelineWaitResult& r) noexcept { taken = r.requirement(); });
  t.wait_async(late, 3, &owner);
  CHECK(taken == of_six);

  // Reaching a promised value retires the promise: a later waiter imports the signal instead.
  t.signal(6, F(6));
  bool reached = false;
  TimelineCallbackWaiter waiter([&](const TimelineWaitResult& r) noexcept { reached = r.is_reached(); });
  t.wait_async(waiter, 6, &owner);
  CHECK(reached);

  // 7 is still promised; an external signal past it retires it, and a failure drops every promise and fails waiters.
  bool promised = false;
  TimelineCallbackWaiter waiter7([&](const TimelineWaitResult& r) noexcept { promised = r.is_promised(); });
  t.wait_async(waiter7, 7, &owner);
  CHECK(promised);
  CHECK(t.promise(9, &owner, requirement));
  t.signal_external(7);
  TimelineRequirement after_external;
  TimelineCallbackWaiter waiter8([&](const TimelineWaitResult& r) noexcept { after_external = r.requirement(); });
  t.wait_async(waiter8, 8, &owner);
  CHECK(after_external == requirement);  // 9's: 7's promise is gone with the value past it
  CHECK(t.fail(std::make_exception_ptr(TestError())));
  bool failed = false;
  TimelineCallbackWaiter after([&](const TimelineWaitResult& r) noexcept { failed = r.is_failed(); });
  t.wait_async(after, 9, &owner);
  CHECK(failed);
  CHECK_FALSE(t.promise(10, &owner, requirement));

  Timeline none({.promises = 0});
  CHECK_FALSE(none.promise(1, &owner, requirement));
}

TEST_CASE("Timeline: an async waiter fires exactly once, and never under the timeline's lock", "[timeline]") {
  Timeline t;
  int fires = 0;
  std::uint64_t seen_value = 0;
  TimelineFrontier seen;
  TimelineCallbackWaiter w([&](const TimelineWaitResult& r) noexcept {
    ++fires;
    seen = r.knowledge();
    seen_value = t.query();  // a lock-free read
    // Calls that take the lock: they would deadlock if the callback ran under it.
    (void)t.poll(1);
    t.signal(t.query() + 1, F(t.query() + 1));
  });
  t.wait_async(w, 2);
  t.signal(1, F(1));
  CHECK(fires == 0);
  t.signal(2, F(2));  // fires w, whose callback signals 3
  CHECK(fires == 1);
  CHECK(seen == F(2));
  CHECK(seen_value == 2);
  CHECK(t.query() == 3);
  t.signal(4, F(4));
  CHECK(fires == 1);
  CHECK(w.value() == 2);

  // Arming twice is refused; re-arming from the callback is allowed.
  TimelineCallbackWaiter idle([](const TimelineWaitResult&) noexcept {});
  t.wait_async(idle, 10);
  CHECK_THROWS_AS(t.wait_async(idle, 11), std::logic_error);
  CHECK(t.cancel(idle));

  std::vector<std::uint64_t> chain;
  TimelineWaiter* self = nullptr;
  TimelineCallbackWaiter next([&](const TimelineWaitResult& r) noexcept {
    chain.push_back(r.knowledge().epoch(kQueue));
    if (chain.size() < 3) t.wait_async(*self, t.query() + 1);
  });
  self = &next;
  t.wait_async(next, 5);
  for (std::uint64_t v = 5; v <= 8; ++v) t.signal(v, F(v));
  CHECK(chain == std::vector<std::uint64_t>{5, 6, 7});

  // Waiters on one value fire in arming order; waiters fire in value order.
  std::vector<int> order;
  TimelineCallbackWaiter w1([&](const TimelineWaitResult&) noexcept { order.push_back(1); });
  TimelineCallbackWaiter w2([&](const TimelineWaitResult&) noexcept { order.push_back(2); });
  TimelineCallbackWaiter w3([&](const TimelineWaitResult&) noexcept { order.push_back(3); });
  t.wait_async(w3, 12);
  t.wait_async(w1, 10);
  t.wait_async(w2, 10);
  t.signal(12, F(12));
  CHECK(order == std::vector<int>{1, 2, 3});
}

// ---- cancel ----------------------------------------------------------------------------------------------------

TEST_CASE("Timeline: cancel prevents an armed callback, and reports a fired one", "[timeline]") {
  Timeline t;
  int fires = 0;
  auto count = [&](const TimelineWaitResult&) noexcept { ++fires; };
  TimelineCallbackWaiter w(count);
  CHECK_FALSE(t.cancel(w));  // never armed
  t.wait_async(w, 5);
  CHECK(t.cancel(w));
  CHECK_FALSE(t.cancel(w));
  t.signal(5, F(5));
  CHECK(fires == 0);
  t.wait_async(w, 6);
  t.signal(6, F(6));
  CHECK(fires == 1);
  CHECK_FALSE(t.cancel(w));  // already fired

  // From inside its own callback: returns false at once (it is running) instead of waiting for itself.
  bool self_cancel = true;
  TimelineWaiter* self = nullptr;
  TimelineCallbackWaiter selfish([&](const TimelineWaitResult&) noexcept { self_cancel = t.cancel(*self); });
  self = &selfish;
  t.wait_async(selfish, 7);
  t.signal(7, F(7));
  CHECK_FALSE(self_cancel);

  // A callback cancels another waiter released by the same signal and not yet called: it never runs.
  bool cancelled_other = false;
  int other_fires = 0;
  TimelineCallbackWaiter other([&](const TimelineWaitResult&) noexcept { ++other_fires; });
  TimelineCallbackWaiter first([&](const TimelineWaitResult&) noexcept { cancelled_other = t.cancel(other); });
  t.wait_async(first, 8);
  t.wait_async(other, 8);
  t.signal(8, F(8));
  CHECK(cancelled_other);
  CHECK(other_fires == 0);
}

TEST_CASE("Timeline: destroying a timeline fails its armed waiters", "[timeline]") {
  bool failed = false;
  TimelineCallbackWaiter w([&](const TimelineWaitResult& r) noexcept { failed = r.is_failed(); });
  {
    Timeline t;
    t.wait_async(w, 1);
  }
  CHECK(failed);
}

TEST_CASE("Timeline: cancel racing the signal either prevents the callback or returns after it", "[timeline][race]") {
  Watchdog watchdog("cancel racing signal");
  Timeline t;
  const std::uint64_t rounds = sized(20000, 2000, 5000);
  std::atomic<std::uint64_t> go{0}, started{0}, signalled{0};
  std::thread signaller([&] {
    for (std::uint64_t v = 1; v <= rounds; ++v) {
      // acquire: pairs with the main thread's release of `go`: the waiter for v is armed.
      while (go.load(std::memory_order_acquire) < v) std::this_thread::yield();
      started.store(v, std::memory_order_relaxed);  // relaxed: only a hint of when to cancel
      t.signal(v, F(v));
      signalled.store(v, std::memory_order_release);  // release: pairs with the acquire below
    }
  });
  std::uint64_t prevented = 0, finished_first = 0, violations = 0;
  for (std::uint64_t v = 1; v <= rounds; ++v) {
    std::atomic<int> running{0}, fired{0};
    {
      TimelineCallbackWaiter w([&](const TimelineWaitResult& r) noexcept {
        // relaxed: the flags are read by the cancelling thread only after cancel(), which synchronises with us.
        running.store(1, std::memory_order_relaxed);
        if (!(r.knowledge() == F(v))) fired.fetch_add(100, std::memory_order_relaxed);
        linger(static_cast<int>(v % 5) * 50);
        fired.fetch_add(1, std::memory_order_relaxed);
        running.store(0, std::memory_order_relaxed);
      });
      t.wait_async(w, v);
      go.store(v, std::memory_order_release);  // release: pairs with the signaller's acquire
      // Vary which side tends to win: cancel at once, after a pause, or just as the signal begins (spinning
      // rather than yielding, so as not to miss the moment), then after a pause that sweeps across its duration.
      if (v % 4 == 1) linger(static_cast<int>(v % 7) * 60);
      if (v % 4 >= 2) {
        for (int spins = 0; started.load(std::memory_order_relaxed) < v; ++spins) {
          if (spins > 100000) std::this_thread::yield();  // the other thread was descheduled
        }
        linger(static_cast<int>(v % 29) * 4);
      }
      const bool cancelled = t.cancel(w);
      // After cancel returns the callback is not running: either it never ran, or it has finished.
      if (running.load(std::memory_order_relaxed) != 0) ++violations;
      if (cancelled) {
        ++prevented;
        if (fired.load(std::memory_order_relaxed) != 0) ++violations;
      } else {
        ++finished_first;
        if (fired.load(std::memory_order_relaxed) != 1) ++violations;
      }
      REQUIRE(wait_until([&] { return signalled.load(std::memory_order_acquire) >= v; }));
      // ... and it will not run later either: the signal has come and gone.
      if (fired.load(std::memory_order_relaxed) != (cancelled ? 0 : 1)) ++violations;
    }  // the waiter dies here, right after the race
  }
  signaller.join();
  CHECK(violations == 0);
  CHECK(prevented + finished_first == rounds);
  WARN("cancel won " << prevented << " of " << rounds << " races");
}

// An async waiter that checks its import against the frontier of the first signal >= its value.
struct CheckedWaiter : TimelineWaiter {
  CheckedWaiter(std::uint64_t expected, std::atomic<std::uint64_t>& fired, std::atomic<std::uint64_t>& wrong)
      : TimelineWaiter(&CheckedWaiter::on_result), expected_(expected), fired_(fired), wrong_(wrong) {}

  static void on_result(TimelineWaiter& self, const TimelineWaitResult& r) noexcept {
    auto& me = static_cast<CheckedWaiter&>(self);
    // relaxed: a counter, read after the threads are joined.
    if (!(r.is_reached() && r.knowledge() == F(me.expected_))) me.wrong_.fetch_add(1, std::memory_order_relaxed);
    // release: pairs with the acquire load of the thread that destroys its waiters once every wait has completed;
    // the timeline handed the waiter to this callback, so only this callback can hand it back to its owner.
    me.fired_.fetch_add(1, std::memory_order_release);
  }

  std::uint64_t expected_;
  std::atomic<std::uint64_t>& fired_;
  std::atomic<std::uint64_t>& wrong_;
};

TEST_CASE("Timeline: concurrent waiters on a signalled timeline each import the first signal >= their value",
          "[timeline][race]") {
  Watchdog watchdog("concurrent waiters");
  for (const std::uint64_t seed : test_seeds()) {
    CAPTURE(seed);
    const std::uint64_t top = sized(4000, 400, 800);  // signals 2, 4, ..., 2 * top
    Timeline t({.history = static_cast<std::uint32_t>(top)});
    std::atomic<std::uint64_t> fired{0}, wrong{0}, armed_threads{0};
    constexpr std::uint64_t kThreads = 3;
    const std::uint64_t per_thread = sized(2000, 200, 400);
    std::vector<std::thread> threads;
    for (std::uint64_t k = 0; k < kThreads; ++k) {
      threads.emplace_back([&, k] {
        std::mt19937_64 rng(seed + k);
        std::uniform_int_distribution<std::uint64_t> value(1, 2 * top);
        std::vector<std::unique_ptr<CheckedWaiter>> pending;
        for (std::uint64_t i = 0; i < per_thread; ++i) {
          const std::uint64_t v = value(rng);
          const std::uint64_t first = (v + 1) / 2 * 2;  // the first even value >= v
          // The first eighth only arms async waiters, so that the main thread starts signalling (below) while the
          // rest of the waits, blocking ones included, are being made.
          // release: pairs with the main thread's acquire load of armed_threads.
          if (i == per_thread / 8) armed_threads.fetch_add(1, std::memory_order_release);
          if (i > per_thread / 8 && i % 4 == 0) {
            // a blocking wait
            const TimelineWaitResult r = t.wait(v);
            // relaxed: counters, read after join.
            if (!(r.is_reached() && r.knowledge() == F(first))) wrong.fetch_add(1, std::memory_order_relaxed);
            fired.fetch_add(1, std::memory_order_relaxed);
          } else {  // an async waiter, checked in its callback
            pending.push_back(std::make_unique<CheckedWaiter>(first, fired, wrong));
            t.wait_async(*pending.back(), v);
          }
        }
        // The async waiters must outlive their firing: stay until every wait has completed.
        // acquire: pairs with the release increments of the callbacks (see CheckedWaiter).
        (void)wait_until([&] { return fired.load(std::memory_order_acquire) == kThreads * per_thread; });
      });
    }
    // Signal while the waiters arm, so that some are armed before their value and some after.
    (void)wait_until([&] { return armed_threads.load(std::memory_order_acquire) == kThreads; });
    for (std::uint64_t v = 2; v <= 2 * top; v += 2) {
      t.signal(v, F(v));
      if (v % 64 == 0) std::this_thread::yield();
    }
    for (std::thread& thread : threads) thread.join();
    CHECK(fired.load(std::memory_order_relaxed) == kThreads * per_thread);
    CHECK(wrong.load(std::memory_order_relaxed) == 0);
  }
}

}  // namespace
}  // namespace depengine
