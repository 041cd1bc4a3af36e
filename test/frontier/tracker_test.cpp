// Tracker (frontier/tracker.h): completed epochs and queries, waiters on whole requirements, tainted
// requirements, fail and retire, cancel (alone and racing the advance), and many threads advancing while others arm.
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
#include <initializer_list>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <vector>

#include <depengine/frontier/tracker.h>

#include "test/test_support.h"

namespace depengine {
namespace {

// Atomics: the tallies of fired and cancelled waiters are read by the test thread after it has joined the threads that
// bump them, which orders them, so those reads are relaxed.

// The shared test conventions (test/test_support.h): sizes, seeds, the watchdog, bounded waits.
using test::hang_limit;
using test::linger;
using test::sized;
using test::test_seeds;
using test::wait_until;
using test::Watchdog;

struct TestError : std::runtime_error {
  TestError() : std::runtime_error("test failure") {}
};

Axis queue(std::uint64_t ordinal) { return Axis::make(0, 0, AxisDomain::kQueue, ordinal); }

using Requirement = RequirementFrontier<4>;

// Records how often its callback ran and with what.
struct Probe {
  int fires = 0;
  std::exception_ptr error;
  auto callback() {
    return [this](std::exception_ptr e) noexcept {
      ++fires;
      error = std::move(e);
    };
  }
};

template <class E>
bool holds(const std::exception_ptr& error) {
  try {
    if (error) std::rethrow_exception(error);
  } catch (const E&) {
    return true;
  } catch (...) {
  }
  return false;
}

// ---- completed epochs and queries ------------------------------------------------------------------------------

TEST_CASE("Tracker: advance raises the completed epoch, never lowers it; queries are exact", "[tracker]") {
  Tracker tracker;
  const Axis a = queue(1), b = queue(2), unknown = queue(99);
  const TrackedAxis ha = tracker.register_axis(a);
  tracker.register_axis(b);
  CHECK(ha.axis() == a);
  CHECK(tracker.is_registered(a));
  CHECK_FALSE(tracker.is_registered(unknown));
  CHECK_FALSE(tracker.find(unknown));
  CHECK(tracker.completed(a) == 0);
  CHECK(tracker.advance(a, 3));
  CHECK(tracker.completed(a) == 3);
  CHECK(tracker.completed(ha) == 3);
  CHECK_FALSE(tracker.advance(a, 2));   // lower: a no-op
  CHECK_FALSE(tracker.advance(ha, 3));  // equal: also a no-op
  CHECK(tracker.completed(a) == 3);
  CHECK(tracker.advance(ha, 7));
  CHECK(tracker.completed(a) == 7);
  CHECK(tracker.completed(unknown) == 0);
  CHECK_THROWS_AS(tracker.advance(unknown, 1), std::invalid_argument);
  CHECK_THROWS_AS(tracker.advance(TrackedAxis(), 1), std::invalid_argument);
  CHECK_THROWS_AS(tracker.advance(b, kMaxTrackedEpoch + 1), std::invalid_argument);
  CHECK(tracker.advance(b, kMaxTrackedEpoch));
  CHECK(tracker.completed(b) == kMaxTrackedEpoch);
  CHECK_THROWS_AS(tracker.register_axis(a), std::invalid_argument);  // twice
  CHECK_THROWS_AS(tracker.register_axis(Axis{}), std::invalid_argument);

  CHECK(tracker.satisfied(Requirement{{a, 7}}));
  CHECK_FALSE(tracker.satisfied(Requirement{{a, 8}}));
  CHECK(tracker.satisfied(Requirement{{a, 2}, {b, 5}}));
  CHECK_FALSE(tracker.satisfied(Requirement{{a, 2}, {unknown, 1}}));
  CHECK(tracker.satisfied(Requirement{}));

  Tracker small({.max_axes = 2});
  small.register_axis(a);
  small.register_axis(b);
  CHECK_THROWS_AS(small.register_axis(queue(3)), std::length_error);
  CHECK_THROWS_AS(Tracker({.max_axes = 0}), std::invalid_argument);
}

TEST_CASE("Tracker: many axes share the index without collisions losing any", "[tracker]") {
  Tracker tracker({.max_axes = 300});
  for (std::uint64_t i = 1; i <= 300; ++i) {
    tracker.register_axis(Axis::make(0, static_cast<std::uint8_t>(i % 3), AxisDomain::kQueue, i));
  }
  for (std::uint64_t i = 1; i <= 300; ++i) {
    REQUIRE(tracker.advance(Axis::make(0, static_cast<std::uint8_t>(i % 3), AxisDomain::kQueue, i), i));
  }
  for (std::uint64_t i = 1; i <= 300; ++i) {
    CHECK(tracker.completed(Axis::make(0, static_cast<std::uint8_t>(i % 3), AxisDomain::kQueue, i)) == i);
  }
}

// ---- waiters ---------------------------------------------------------------------------------------------------

TEST_CASE("Tracker: a waiter fires exactly once, when every entry is complete and not before", "[tracker]") {
  Tracker tracker;
  const Axis a = queue(1), b = queue(2), c = queue(3);
  for (const Axis axis : {a, b, c}) tracker.register_axis(axis);
  const Requirement requirement{{a, 2}, {b, 3}, {c, 1}};
  int fires = 0;
  bool satisfied_at_fire = false;
  std::exception_ptr error = std::make_exception_ptr(TestError());
  TrackerCallbackWaiter waiter([&](std::exception_ptr e) noexcept {
    ++fires;
    error = std::move(e);
    satisfied_at_fire = tracker.satisfied(requirement);
  });
  tracker.wait_async(waiter, requirement);
  tracker.advance(a, 1);
  tracker.advance(a, 2);  // moves it on to b
  tracker.advance(c, 5);
  tracker.advance(b, 2);
  CHECK(fires == 0);
  tracker.advance(b, 3);  // the last entry: fires here, on this thread
  CHECK(fires == 1);
  CHECK(error == nullptr);
  CHECK(satisfied_at_fire);
  tracker.advance(a, 10);
  tracker.advance(b, 10);
  CHECK(fires == 1);

  // Already satisfied, or empty: the callback runs inside wait_async.
  Probe now;
  TrackerCallbackWaiter immediate(now.callback());
  tracker.wait_async(immediate, requirement);
  CHECK(now.fires == 1);
  const Requirement nothing;
  tracker.wait_async(immediate, nothing);  // re-arming a fired waiter is allowed
  CHECK(now.fires == 2);
}

TEST_CASE("Tracker: has_waiters tells whether a waiter is parked on an axis", "[tracker]") {
  Tracker tracker;
  const Axis a = queue(1), b = queue(2);
  const TrackedAxis ta = tracker.register_axis(a), tb = tracker.register_axis(b);
  CHECK_FALSE(tracker.has_waiters(ta));
  CHECK_FALSE(tracker.has_waiters(TrackedAxis{}));  // unknown
  Probe probe;
  TrackerCallbackWaiter waiter(probe.callback());
  tracker.wait_async(waiter, Requirement{{a, 2}});
  CHECK(tracker.has_waiters(ta));
  CHECK_FALSE(tracker.has_waiters(tb));
  tracker.advance(a, 1);
  CHECK(tracker.has_waiters(ta));  // not due yet
  tracker.advance(a, 2);
  CHECK(probe.fires == 1);
  CHECK_FALSE(tracker.has_waiters(ta));
  tracker.wait_async(waiter, Requirement{{b, 1}});
  CHECK(tracker.has_waiters(tb));
  CHECK(tracker.cancel(waiter));
  CHECK_FALSE(tracker.has_waiters(tb));
}

TEST_CASE("Tracker: one advance fires every due waiter in epoch order, and only those", "[tracker]") {
  Tracker tracker;
  const Axis a = queue(1);
  tracker.register_axis(a);
  std::vector<std::uint64_t> order;
  struct Record {
    std::vector<std::uint64_t>* order;
    std::uint64_t epoch;
    void operator()(std::exception_ptr) noexcept { order->push_back(epoch); }
  };
  std::vector<std::unique_ptr<Requirement>> requirements;
  std::vector<std::unique_ptr<TrackerCallbackWaiter<Record>>> waiters;
  for (const std::uint64_t epoch : std::initializer_list<std::uint64_t>{7, 2, 12, 5, 1000}) {
    requirements.push_back(std::make_unique<Requirement>(Requirement{{a, epoch}}));
    waiters.push_back(std::make_unique<TrackerCallbackWaiter<Record>>(Record{&order, epoch}));
    tracker.wait_async(*waiters.back(), *requirements.back());
  }
  tracker.advance(a, 10);
  CHECK(order == std::vector<std::uint64_t>{2, 5, 7});
  // A waiter far ahead: the advances below it leave it parked (the bound in min_needed), then it fires.
  for (std::uint64_t e = 11; e < 1000; ++e) tracker.advance(a, e);
  CHECK(order == std::vector<std::uint64_t>{2, 5, 7, 12});
  tracker.advance(a, 1000);
  CHECK(order == std::vector<std::uint64_t>{2, 5, 7, 12, 1000});
}

TEST_CASE("Tracker: a tainted requirement is never satisfied, and waiting on it is rejected", "[tracker]") {
  Tracker tracker;
  RequirementFrontier<2> overflowed;
  for (std::uint64_t i = 1; i <= 3; ++i) {
    tracker.register_axis(queue(i));
    overflowed.insert_or_raise(queue(i), 1);
  }
  REQUIRE(overflowed.tainted());
  for (std::uint64_t i = 1; i <= 3; ++i) tracker.advance(queue(i), 5);
  CHECK_FALSE(tracker.satisfied(overflowed));  // its entries are all complete, but it lost one
  Probe probe;
  TrackerCallbackWaiter waiter(probe.callback());
  CHECK_THROWS_AS(tracker.wait_async(waiter, overflowed), std::invalid_argument);
  CHECK(probe.fires == 0);
  // Other misuse, also refused without a callback.
  const Requirement unregistered{{queue(50), 1}};
  CHECK_THROWS_AS(tracker.wait_async(waiter, unregistered), std::invalid_argument);
  const Requirement too_far{{queue(1), kMaxTrackedEpoch + 1}};
  CHECK_THROWS_AS(tracker.wait_async(waiter, too_far), std::invalid_argument);
  CHECK(probe.fires == 0);
  // The waiter is still usable.
  const Requirement later{{queue(1), 6}};
  tracker.wait_async(waiter, later);
  CHECK_THROWS_AS(tracker.wait_async(waiter, later), std::logic_error);  // armed already
  tracker.advance(queue(1), 6);
  CHECK(probe.fires == 1);
}

TEST_CASE("Tracker: fail(axis) fails its waiters and later waits; what completed stays complete", "[tracker]") {
  Tracker tracker;
  const Axis a = queue(1), b = queue(2);
  tracker.register_axis(a);
  tracker.register_axis(b);
  tracker.advance(a, 2);
  const Requirement r1{{a, 5}}, r2{{a, 3}, {b, 1}}, r3{{a, 9}, {b, 4}};
  Probe p1, p2, p3;
  TrackerCallbackWaiter w1(p1.callback()), w2(p2.callback());
  TrackerCallbackWaiter w3(p3.callback());
  tracker.wait_async(w1, r1);  // parked on a
  tracker.wait_async(w2, r2);  // parked on a
  tracker.advance(b, 1);
  const std::exception_ptr error = std::make_exception_ptr(TestError());
  CHECK(tracker.fail(a, error));
  CHECK(p1.fires == 1);
  CHECK(p1.error == error);
  CHECK(p2.fires == 1);
  CHECK(p2.error == error);
  CHECK(tracker.error(a) == error);
  CHECK(tracker.error(b) == nullptr);
  // The epoch is frozen; what completed before the failure stays complete.
  CHECK_FALSE(tracker.advance(a, 10));
  CHECK(tracker.completed(a) == 2);
  CHECK(tracker.satisfied(Requirement{{a, 2}}));
  CHECK_FALSE(tracker.satisfied(Requirement{{a, 3}}));
  // Later waits: a pending entry on the failed axis fails at once, even behind an open one; a complete one is fine.
  tracker.wait_async(w3, r3);
  CHECK(p3.fires == 1);
  CHECK(p3.error == error);
  Probe p4;
  TrackerCallbackWaiter w4(p4.callback());
  const Requirement done{{a, 2}, {b, 1}};
  tracker.wait_async(w4, done);
  CHECK(p4.fires == 1);
  CHECK(p4.error == nullptr);
  CHECK_FALSE(tracker.fail(a, std::make_exception_ptr(std::runtime_error("again"))));  // the first failure wins
  CHECK(tracker.error(a) == error);
  CHECK_THROWS_AS(tracker.fail(queue(77), error), std::invalid_argument);
  CHECK_THROWS_AS(tracker.fail(b, nullptr), std::invalid_argument);
}

TEST_CASE("Tracker: a waiter parked on another axis fails when it reaches the failed one", "[tracker]") {
  Tracker tracker;
  const Axis a = queue(1), b = queue(2);
  tracker.register_axis(a);
  tracker.register_axis(b);
  const Requirement requirement{{a, 1}, {b, 4}};  // parks on a first (axis order)
  Probe probe;
  TrackerCallbackWaiter waiter(probe.callback());
  tracker.wait_async(waiter, requirement);
  const std::exception_ptr error = std::make_exception_ptr(TestError());
  tracker.fail(b, error);
  CHECK(probe.fires == 0);  // it is parked on a, which has not completed
  tracker.advance(a, 1);    // moves it on to b: failed
  CHECK(probe.fires == 1);
  CHECK(probe.error == error);
}

TEST_CASE("Tracker: retire_axis freezes the axis; waits beyond its final epoch fail", "[tracker]") {
  Tracker tracker;
  const Axis a = queue(1), b = queue(2);
  tracker.register_axis(a);
  tracker.register_axis(b);
  tracker.advance(a, 4);
  const Requirement beyond{{a, 6}};
  Probe parked;
  TrackerCallbackWaiter waiter(parked.callback());
  tracker.wait_async(waiter, beyond);
  tracker.retire_axis(a);
  REQUIRE(parked.fires == 1);
  CHECK(holds<AxisRetiredError>(parked.error));
  try {
    std::rethrow_exception(parked.error);
  } catch (const AxisRetiredError& retired) {
    CHECK(retired.axis() == a);
    CHECK(retired.final_epoch() == 4);
  }
  // What it completed stays known (a death frontier naming it stays decidable).
  CHECK(tracker.completed(a) == 4);
  CHECK(tracker.satisfied(Requirement{{a, 4}}));
  CHECK_FALSE(tracker.advance(a, 8));
  CHECK(tracker.completed(a) == 4);
  Probe ok, late;
  TrackerCallbackWaiter w_ok(ok.callback()), w_late(late.callback());
  const Requirement within{{a, 3}}, after{{a, 5}};
  tracker.wait_async(w_ok, within);
  tracker.wait_async(w_late, after);
  CHECK(ok.fires == 1);
  CHECK(ok.error == nullptr);
  CHECK(late.fires == 1);
  CHECK(holds<AxisRetiredError>(late.error));
  tracker.retire_axis(a);  // twice: nothing
  // Axes are never reused: a retired axis stays registered.
  CHECK_THROWS_AS(tracker.register_axis(a), std::invalid_argument);
  // Retiring a failed axis keeps its error.
  const std::exception_ptr error = std::make_exception_ptr(TestError());
  tracker.fail(b, error);
  tracker.retire_axis(b);
  CHECK(tracker.error(b) == error);
  CHECK_THROWS_AS(tracker.retire_axis(queue(55)), std::invalid_argument);
}

TEST_CASE("Tracker: destroying a tracker fails its parked waiters", "[tracker]") {
  Probe probe;
  TrackerCallbackWaiter waiter(probe.callback());
  const Requirement requirement{{queue(1), 3}};
  {
    Tracker tracker;
    tracker.register_axis(queue(1));
    tracker.wait_async(waiter, requirement);
  }
  CHECK(probe.fires == 1);
  CHECK(holds<std::logic_error>(probe.error));
}

// ---- cancel ----------------------------------------------------------------------------------------------------

TEST_CASE("Tracker: cancel prevents a parked callback and reports a fired one", "[tracker]") {
  Tracker tracker;
  const Axis a = queue(1), b = queue(2);
  tracker.register_axis(a);
  tracker.register_axis(b);
  Probe probe;
  TrackerCallbackWaiter waiter(probe.callback());
  CHECK_FALSE(tracker.cancel(waiter));  // never armed
  const Requirement requirement{{a, 1}, {b, 1}};
  tracker.wait_async(waiter, requirement);
  CHECK(tracker.cancel(waiter));
  CHECK_FALSE(tracker.cancel(waiter));
  tracker.advance(a, 1);
  tracker.advance(b, 1);
  CHECK(probe.fires == 0);
  tracker.wait_async(waiter, requirement);  // re-armed after a cancel; satisfied already, so it fires here
  CHECK(probe.fires == 1);
  CHECK_FALSE(tracker.cancel(waiter));  // fired

  // Cancelled after moving to its second axis.
  const Requirement second{{a, 3}, {b, 3}};
  tracker.wait_async(waiter, second);
  tracker.advance(a, 3);
  CHECK(tracker.cancel(waiter));
  tracker.advance(b, 3);
  CHECK(probe.fires == 1);

  // From inside its own callback: false at once.
  bool self_cancel = true;
  TrackerWaiter* self = nullptr;
  TrackerCallbackWaiter selfish([&](std::exception_ptr) noexcept { self_cancel = tracker.cancel(*self); });
  self = &selfish;
  const Requirement r4{{a, 4}};
  tracker.wait_async(selfish, r4);
  tracker.advance(a, 4);
  CHECK_FALSE(self_cancel);

  // A callback cancels another waiter due on the same advance and not yet moved on: it never runs. The callback may
  // also use the tracker freely (no lock is held): arm, advance, query.
  Probe other_probe;
  TrackerCallbackWaiter other(other_probe.callback());
  bool cancelled_other = false;
  Probe chained;
  TrackerCallbackWaiter next(chained.callback());
  const Requirement r5{{a, 5}}, r6{{b, 6}};
  TrackerCallbackWaiter first([&](std::exception_ptr) noexcept {
    cancelled_other = tracker.cancel(other);
    tracker.wait_async(next, r6);
    tracker.advance(b, 6);
  });
  tracker.wait_async(first, r5);
  tracker.wait_async(other, r5);
  tracker.advance(a, 5);
  CHECK(cancelled_other);
  CHECK(other_probe.fires == 0);
  CHECK(chained.fires == 1);
}

TEST_CASE("Tracker: cancel racing the advance either prevents the callback or returns after it", "[tracker][race]") {
  Watchdog watchdog("cancel racing advance");
  Tracker tracker;
  const Axis a = queue(1), b = queue(2);
  const TrackedAxis ha = tracker.register_axis(a), hb = tracker.register_axis(b);
  const std::uint64_t rounds = sized(20000, 2000, 5000);
  std::atomic<std::uint64_t> go{0}, started{0}, advanced{0};
  std::thread advancer([&] {
    for (std::uint64_t v = 1; v <= rounds; ++v) {
      // acquire: pairs with the main thread's release of `go`: the waiter for v is armed.
      while (go.load(std::memory_order_acquire) < v) std::this_thread::yield();
      started.store(v, std::memory_order_relaxed);  // relaxed: only a hint of when to cancel
      // The first advance moves the waiter on to b (in transit, then parked), where it sometimes stays a while; the
      // second fires it.
      tracker.advance(ha, v);
      if (v % 2 == 0) linger(static_cast<int>(v % 7) * 20);
      tracker.advance(hb, v);
      advanced.store(v, std::memory_order_release);  // release: pairs with the acquire below
    }
  });
  std::uint64_t prevented = 0, violations = 0;
  for (std::uint64_t v = 1; v <= rounds; ++v) {
    std::atomic<int> running{0}, fired{0};
    const Requirement requirement{{a, v}, {b, v}};
    {
      TrackerCallbackWaiter waiter([&](std::exception_ptr error) noexcept {
        // relaxed: read by the cancelling thread only after cancel(), which synchronises with this callback.
        running.store(1, std::memory_order_relaxed);
        if (error || !tracker.satisfied(requirement)) fired.fetch_add(100, std::memory_order_relaxed);
        linger(static_cast<int>(v % 5) * 50);
        fired.fetch_add(1, std::memory_order_relaxed);
        running.store(0, std::memory_order_relaxed);
      });
      tracker.wait_async(waiter, requirement);
      go.store(v, std::memory_order_release);  // release: pairs with the advancer's acquire
      // Vary which side tends to win: cancel at once, after a pause, or just as the advances begin (spinning
      // rather than yielding, so as not to miss the moment), then after a pause that sweeps across its duration.
      if (v % 4 == 1) linger(static_cast<int>(v % 11) * 60);
      if (v % 4 >= 2) {
        for (int spins = 0; started.load(std::memory_order_relaxed) < v; ++spins) {
          if (spins > 100000) std::this_thread::yield();  // the other thread was descheduled
        }
        linger(static_cast<int>(v % 29) * 4);
      }
      const bool cancelled = tracker.cancel(waiter);
      if (running.load(std::memory_order_relaxed) != 0) ++violations;
      if (fired.load(std::memory_order_relaxed) != (cancelled ? 0 : 1)) ++violations;
      prevented += cancelled ? 1 : 0;
      REQUIRE(wait_until([&] { return advanced.load(std::memory_order_acquire) >= v; }));
      if (fired.load(std::memory_order_relaxed) != (cancelled ? 0 : 1)) ++violations;
    }  // the waiter dies right after the race
  }
  advancer.join();
  CHECK(violations == 0);
  WARN("cancel won " << prevented << " of " << rounds << " races");
}

// ---- many threads ----------------------------------------------------------------------------------------------

struct Tally {
  std::atomic<std::uint64_t> fired{0}, twice{0}, early{0}, errors{0}, after_cancel{0};
};

// A waiter that owns its requirement and checks, when it fires, that the tracker itself says it is satisfied.
struct CheckedWaiter : TrackerWaiter {
  CheckedWaiter(Tracker& tracker, const Requirement& requirement, Tally& tally)
      : TrackerWaiter(&CheckedWaiter::on_fire), tracker_(tracker), requirement_(requirement), tally_(tally) {}

  static void on_fire(TrackerWaiter& self, std::exception_ptr error) noexcept {
    auto& me = static_cast<CheckedWaiter&>(self);
    // relaxed: counters and flags read after the threads are joined (or by the owner after cancel()).
    if (me.fires_.fetch_add(1, std::memory_order_relaxed) != 0) me.tally_.twice.fetch_add(1, std::memory_order_relaxed);
    if (error) me.tally_.errors.fetch_add(1, std::memory_order_relaxed);
    if (!me.tracker_.satisfied(me.requirement_)) me.tally_.early.fetch_add(1, std::memory_order_relaxed);
    if (me.cancelled_.load(std::memory_order_relaxed)) me.tally_.after_cancel.fetch_add(1, std::memory_order_relaxed);
    me.tally_.fired.fetch_add(1, std::memory_order_relaxed);
  }

  Tracker& tracker_;
  const Requirement requirement_;
  Tally& tally_;
  std::atomic<int> fires_{0};
  std::atomic<bool> cancelled_{false};  // set by the owner when cancel() returned true
};

TEST_CASE("Tracker: concurrent advances and arming: every waiter fires once, after its requirement holds",
          "[tracker][race]") {
  Watchdog watchdog("concurrent advances and waiters");
  for (const std::uint64_t seed : test_seeds()) {
    CAPTURE(seed);
    constexpr std::uint64_t kAxes = 4;
    const std::uint64_t top = sized(3000, 300, 600);  // every axis ends at this epoch
    const std::uint64_t per_armer = sized(3000, 300, 600);
    Tracker tracker;
    std::vector<TrackedAxis> axes;
    for (std::uint64_t i = 1; i <= kAxes; ++i) axes.push_back(tracker.register_axis(queue(i)));
    Tally tally;
    std::atomic<std::uint64_t> cancelled{0}, armers_done{0};
    std::vector<std::vector<std::unique_ptr<CheckedWaiter>>> owned(2);
    std::vector<std::thread> threads;
    for (std::uint64_t k = 0; k < 2; ++k) {  // armers
      threads.emplace_back([&, k] {
        std::mt19937_64 rng(seed * 31 + k);
        std::uniform_int_distribution<std::uint64_t> epoch(1, top), axis(1, kAxes), width(1, 3), coin(0, 9);
        for (std::uint64_t i = 0; i < per_armer; ++i) {
          Requirement requirement;
          for (std::uint64_t n = width(rng); n > 0; --n) requirement.insert_or_raise(queue(axis(rng)), epoch(rng));
          owned[k].push_back(std::make_unique<CheckedWaiter>(tracker, requirement, tally));
          CheckedWaiter& waiter = *owned[k].back();
          tracker.wait_async(waiter, waiter.requirement_);
          // Some are cancelled, racing the advances.
          if (coin(rng) == 0 && tracker.cancel(waiter)) {
            waiter.cancelled_.store(true, std::memory_order_relaxed);  // relaxed: a tally, read after join
            cancelled.fetch_add(1, std::memory_order_relaxed);
          }
        }
        armers_done.fetch_add(1, std::memory_order_release);  // release: pairs with the advancers' acquire
      });
    }
    for (std::uint64_t k = 0; k < 2; ++k) {  // advancers: both advance every axis, racing each other
      threads.emplace_back([&, k] {
        std::mt19937_64 rng(seed * 17 + k);
        std::uniform_int_distribution<std::uint64_t> step(1, 3);
        std::vector<std::uint64_t> at(kAxes, 0);
        for (bool busy = true; busy;) {
          busy = false;
          for (std::uint64_t i = 0; i < kAxes; ++i) {
            // Slow down until the armers are done, so that arming and advancing overlap throughout.
            if (armers_done.load(std::memory_order_acquire) < 2) std::this_thread::yield();
            at[i] = std::min(top, at[i] + step(rng));
            tracker.advance(axes[i], at[i]);
            busy |= at[i] < top;
          }
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
    const std::uint64_t armed = 2 * per_armer;
    CHECK(tally.fired.load(std::memory_order_relaxed) + cancelled.load(std::memory_order_relaxed) ==
          armed);  // everything complete: every waiter fired or cancelled
    CHECK(tally.twice.load(std::memory_order_relaxed) == 0);
    CHECK(tally.early.load(std::memory_order_relaxed) == 0);
    CHECK(tally.errors.load(std::memory_order_relaxed) == 0);
    CHECK(tally.after_cancel.load(std::memory_order_relaxed) == 0);
  }
}

}  // namespace
}  // namespace depengine
