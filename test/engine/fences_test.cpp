// Fences (engine.h, "Fences"; engine/push_options.h, wait_fences and signal_fences; engine/fence.h): ops ordered by
// user timelines alone, whatever their push order; >= semantics on both sides (a wait fence is reached by any value at
// or past it, a signal fence leaves a timeline that is already past it alone); timelines signalled or failed by the
// user; errors through timelines (an op that fails or is skipped fails its signal timelines, an op waiting on a failed
// timeline is skipped unless no_skip); async ops signalling at their Completion; WaitForFence and misuse (null
// timelines, too many fences, waits from inside an op); timelines raised before WaitForAll and WaitForVar return, and
// before ops ordered after their signaller run; and a randomized chain ordered by one timeline alone, pushed in a
// random order. Every test runs on every executor.
#include <algorithm>
#include <array>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <depengine/engine/engine.h>
#include <depengine/engine/fence.h>
#include <depengine/frontier/timeline.h>

#include "test/engine/test_support.h"
#include "test/executors/executor_factories.h"

namespace depengine::test {
namespace {

// Atomics: counters bumped by ops are read by the test thread after a wait (WaitForAll, WaitForVar, WaitForScope), a
// join or the engine's destruction, which orders every op's writes before the read, so they are relaxed.

PushOptions with_fences(FenceList wait, FenceList signal = {}) {
  PushOptions options;
  options.wait_fences = wait;
  options.signal_fences = signal;
  return options;
}

// The order in which ops ran, noted by the ops themselves (on whatever threads run them).
class Sequence {
 public:
  void note(int id) {
    std::lock_guard lock(mutex_);
    ids_.push_back(id);
  }
  [[nodiscard]] std::vector<int> ids() const {
    std::lock_guard lock(mutex_);
    return ids_;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<int> ids_;  // guarded by mutex_
};

// Pushes an op that uses nothing and waits until it has run. Used before checking that an op has NOT run, so that the
// check is not merely early: on the inline executor and a one-worker pool (one FIFO queue), an op wrongly made ready
// before the probe has run by the time the probe has; on a larger pool it has at least had time to start.
void run_probe(Engine& engine) {
  auto ran = std::make_shared<std::atomic<bool>>(false);
  // release: pairs with the acquire below.
  engine.Push([ran] { ran->store(true, std::memory_order_release); }, {}, {});
  REQUIRE(wait_until([&ran] { return ran->load(std::memory_order_acquire); }));
}

TEST_CASE("ops ordered by fences alone run in fence order, whatever their push order", "[engine][fences]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("fence ordering on " + factory.name);
      Engine engine(factory.options());
      Timeline timeline;
      const Var gate = engine.NewVariable();
      HeldOp held(engine, {}, {gate});  // holds A back; B and C wait for A through the timeline alone
      Sequence sequence;
      std::atomic<int> started{0};
      std::uint64_t b_saw = 0, c_saw = 0;  // the timeline's value when B and C started
      auto count_start = [&started] { started.fetch_add(1, std::memory_order_relaxed); };
      engine.Push(
          [&] {
            count_start();
            c_saw = timeline.query();
            sequence.note(3);
          },
          {}, {}, with_fences({{&timeline, 2}}));
      engine.Push(
          [&] {
            count_start();
            b_saw = timeline.query();
            sequence.note(2);
          },
          {}, {}, with_fences({{&timeline, 1}}, {{&timeline, 2}}));
      engine.Push(
          [&] {
            count_start();
            sequence.note(1);
          },
          {gate}, {}, with_fences({}, {{&timeline, 1}}));
      run_probe(engine);
      CHECK(held.holding());
      // relaxed: a wrong start is what this looks for; the probe above gave it time to happen.
      CHECK(started.load(std::memory_order_relaxed) == 0);
      CHECK(sequence.ids().empty());
      CHECK(timeline.query() == 0);

      REQUIRE(held.release());
      engine.WaitForFence({&timeline, 2});
      CHECK(timeline.query() == 2);
      const std::vector<int> after_fence = sequence.ids();  // A and B have completed; C may be running
      REQUIRE(after_fence.size() >= 2);
      CHECK(after_fence[0] == 1);
      CHECK(after_fence[1] == 2);
      engine.WaitForAll();
      CHECK(sequence.ids() == std::vector<int>{1, 2, 3});
      if (factory.runs_after_completion) {  // else B and C may be issued before A and B complete and raise the timeline
        CHECK(b_saw == 1);
        CHECK(c_saw == 2);
      }
      CHECK(timeline.query() == 2);
    }
  }
}

TEST_CASE("a wait fence is reached by any value at or past it", "[engine][fences]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("wait fence >= on " + factory.name);
      Engine engine(factory.options());
      Timeline by_user, by_op;
      by_user.signal(5, {});
      engine.Push([] {}, {}, {}, with_fences({}, {{&by_op, 5}}));
      engine.WaitForFence({&by_op, 5});
      REQUIRE(by_op.query() == 5);

      std::atomic<int> past{0};  // ops whose fence was already passed when they were pushed
      for (Timeline* timeline : {&by_user, &by_op}) {
        for (std::uint64_t value : {std::uint64_t{0}, std::uint64_t{2}, std::uint64_t{5}}) {
          engine.Push([&past] { past.fetch_add(1, std::memory_order_relaxed); }, {}, {},
                      with_fences({{timeline, value}}));
        }
      }
      // On the inline executor an op that need not wait runs inside its Push.
      if (factory.workers == 0) CHECK(past.load(std::memory_order_relaxed) == 6);
      CHECK(wait_until([&past] { return past.load(std::memory_order_relaxed) == 6; }));

      std::atomic<bool> seven{false}, eight{false}, nine{false};
      // release: pairs with the acquires below.
      engine.Push([&] { seven.store(true, std::memory_order_release); }, {}, {}, with_fences({{&by_user, 7}}));
      engine.Push([&] { eight.store(true, std::memory_order_release); }, {}, {}, with_fences({{&by_user, 8}}));
      engine.Push([&] { nine.store(true, std::memory_order_release); }, {}, {}, with_fences({{&by_user, 9}}));
      run_probe(engine);
      CHECK_FALSE(seven.load(std::memory_order_acquire));
      by_user.signal_external(6);
      run_probe(engine);
      CHECK_FALSE(seven.load(std::memory_order_acquire));
      by_user.signal_external(7);
      CHECK(wait_until([&] { return seven.load(std::memory_order_acquire); }));
      run_probe(engine);
      CHECK_FALSE(eight.load(std::memory_order_acquire));
      by_user.signal_external(12);  // past both remaining fences at once
      CHECK(wait_until([&] { return eight.load(std::memory_order_acquire) && nine.load(std::memory_order_acquire); }));
      engine.WaitForAll();
      CHECK(engine.InFlight() == 0);
    }
  }
}

TEST_CASE("an op waiting on a user timeline runs once a user thread signals it", "[engine][fences]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("user-signalled timeline on " + factory.name);
      Engine engine(factory.options());
      Timeline timeline;
      const Var v = engine.NewVariable();
      int payload = 0;  // written by the signalling thread before its signal, read by the op: the signal orders them
      int seen = -1;
      std::thread::id ran_on;
      std::atomic<bool> ran{false};
      engine.Push(
          [&] {
            seen = payload;
            ran_on = std::this_thread::get_id();
            ran.store(true, std::memory_order_release);  // release: pairs with the acquires below
          },
          {}, {v}, with_fences({{&timeline, 1}}));
      run_probe(engine);
      CHECK_FALSE(ran.load(std::memory_order_acquire));  // nothing has signalled the timeline yet
      std::thread signaller([&] {
        payload = 42;
        timeline.signal(1, {});
      });
      const std::thread::id signaller_id = signaller.get_id();
      signaller.join();
      CHECK(wait_until([&] { return ran.load(std::memory_order_acquire); }));
      engine.WaitForVar(v);
      CHECK(seen == 42);
      // The inline executor runs an op on the thread that makes it ready: here, the signaller.
      if (factory.workers == 0) CHECK(ran_on == signaller_id);
      engine.WaitForAll();
    }
  }
}

TEST_CASE("signal fences raise with >= semantics: a signaller that completes later leaves a higher value alone",
          "[engine][fences]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("signal fence >= on " + factory.name);
      Engine engine(factory.options());
      Timeline timeline;
      const Var v = engine.NewVariable();
      std::vector<int> order;  // written by the ops, which v orders
      engine.Push([&] { order.push_back(3); }, {}, {v}, with_fences({}, {{&timeline, 3}}));
      engine.Push([&] { order.push_back(2); }, {}, {v}, with_fences({}, {{&timeline, 2}}));  // completes second
      std::uint64_t third_saw = 0;
      engine.Push([&] { third_saw = timeline.query(); }, {v}, {}, with_fences({{&timeline, 3}}));
      CHECK_NOTHROW(engine.WaitForAll());
      CHECK(order == std::vector<int>{3, 2});
      // Else the third may be issued before the first completes and raises the timeline.
      if (factory.runs_after_completion) CHECK(third_saw == 3);
      CHECK(timeline.query() == 3);
      CHECK_FALSE(timeline.failed());
      CHECK_NOTHROW(engine.WaitForVar(v));
      CHECK_NOTHROW(engine.WaitForFence({&timeline, 3}));
    }
  }
}

TEST_CASE("an op that fails fails its signal timelines; ops waiting on them are skipped unless no_skip",
          "[engine][fences][errors]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("failing signallers on " + factory.name);
      Engine engine(factory.options());
      Timeline timeline;
      const Var armed_before = engine.NewVariable(), pushed_after = engine.NewVariable();
      const Var no_skip_before = engine.NewVariable(), no_skip_after = engine.NewVariable();
      const PushOptions waits = with_fences({{&timeline, 1}});
      PushOptions waits_no_skip = waits;
      waits_no_skip.no_skip = true;
      std::atomic<int> skipped_ran{0}, no_skip_ran{0};
      auto skipped = [&skipped_ran] { skipped_ran.fetch_add(1, std::memory_order_relaxed); };
      auto runs = [&no_skip_ran] { no_skip_ran.fetch_add(1, std::memory_order_relaxed); };
      // Armed before the failure: failed by the timeline's fail().
      engine.Push(skipped, {}, {armed_before}, waits);
      if (factory.takes_async) {
        engine.PushAsync(
            [&skipped_ran](Completion done) {
              skipped_ran.fetch_add(1, std::memory_order_relaxed);
              done();
            },
            {}, {armed_before}, waits);
      } else {
        check_async_refused(engine, armed_before, waits);
      }
      engine.Push(runs, {}, {no_skip_before}, waits_no_skip);
      engine.Push([] { throw OpFailure(11); }, {}, {}, with_fences({}, {{&timeline, 1}}));
      // Pushed after: the timeline has failed (or will have, on a pool) when the op's wait is armed.
      engine.Push(skipped, {}, {pushed_after}, waits);
      engine.Push(runs, {}, {no_skip_after}, waits_no_skip);

      std::exception_ptr fence_error;
      try {
        engine.WaitForFence({&timeline, 1});
      } catch (const OpFailure&) {
        fence_error = std::current_exception();
      }
      REQUIRE(fence_error != nullptr);
      CHECK(thrown_id([&] { std::rethrow_exception(fence_error); }) == 11);
      CHECK(timeline.failed());
      CHECK(timeline.error() == fence_error);  // the op's own exception object, unwrapped
      CHECK(timeline.query() == 0);
      std::exception_ptr var_error;
      try {
        engine.WaitForVar(armed_before);
      } catch (const OpFailure&) {
        var_error = std::current_exception();
      }
      CHECK(var_error == fence_error);
      CHECK(thrown_id([&] { engine.WaitForVar(pushed_after); }) == 11);
      CHECK(thrown_id([&] { engine.WaitForVar(no_skip_before); }) == 0);  // ran and succeeded: clean
      CHECK(thrown_id([&] { engine.WaitForVar(no_skip_after); }) == 0);
      CHECK(thrown_id([&] { engine.WaitForAll(); }) == 0);  // the waits above reported it
      CHECK(skipped_ran.load(std::memory_order_relaxed) == 0);
      CHECK(no_skip_ran.load(std::memory_order_relaxed) == 2);
      CHECK(thrown_id([&] { engine.WaitForFence({&timeline, 1}); }) == 11);  // a failed timeline stays failed
    }
  }
}

TEST_CASE("an op skipped for an input error fails its signal timelines, and the failure passes on through fences",
          "[engine][fences][errors]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("skipped signallers on " + factory.name);
      Engine engine(factory.options());
      Timeline first, second, downstream;
      const Var a = engine.NewVariable(), out = engine.NewVariable();
      std::atomic<int> ran{0};
      auto count = [&ran] { ran.fetch_add(1, std::memory_order_relaxed); };
      engine.Push([] { throw OpFailure(12); }, {}, {a});
      engine.Push(count, {a}, {}, with_fences({}, {{&first, 1}, {&second, 4}}));  // skipped: fails both
      // Skipped for the failed wait fence: fails its own signal timeline and poisons what it mutates.
      engine.Push(count, {}, {out}, with_fences({{&first, 1}}, {{&downstream, 1}}));
      CHECK(thrown_id([&] { engine.WaitForFence({&first, 1}); }) == 12);
      CHECK(thrown_id([&] { engine.WaitForFence({&second, 4}); }) == 12);
      CHECK(thrown_id([&] { engine.WaitForFence({&downstream, 1}); }) == 12);
      CHECK(first.query() == 0);
      CHECK(second.query() == 0);
      CHECK(downstream.query() == 0);
      CHECK(thrown_id([&] { engine.WaitForVar(out); }) == 12);
      CHECK(thrown_id([&] { engine.WaitForVar(a); }) == 12);
      CHECK(thrown_id([&] { engine.WaitForAll(); }) == 0);  // the waits above reported it
      CHECK(ran.load(std::memory_order_relaxed) == 0);
    }
  }
}

TEST_CASE("a timeline the user fails skips the ops waiting on it", "[engine][fences][errors]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("user-failed timeline on " + factory.name);
      Engine engine(factory.options());
      Timeline timeline;
      const Var before = engine.NewVariable(), after = engine.NewVariable(), kept = engine.NewVariable();
      std::atomic<int> skipped_ran{0}, no_skip_ran{0};
      engine.Push([&] { skipped_ran.fetch_add(1, std::memory_order_relaxed); }, {}, {before},
                  with_fences({{&timeline, 1}}));
      run_probe(engine);
      CHECK(skipped_ran.load(std::memory_order_relaxed) == 0);
      const std::exception_ptr error = std::make_exception_ptr(OpFailure(13));
      REQUIRE(timeline.fail(error));
      engine.Push([&] { skipped_ran.fetch_add(1, std::memory_order_relaxed); }, {}, {after},
                  with_fences({{&timeline, 1}}));
      PushOptions no_skip = with_fences({{&timeline, 1}});
      no_skip.no_skip = true;
      engine.Push([&] { no_skip_ran.fetch_add(1, std::memory_order_relaxed); }, {}, {kept}, no_skip);
      std::exception_ptr caught;
      try {
        engine.WaitForVar(before);
      } catch (const OpFailure&) {
        caught = std::current_exception();
      }
      CHECK(caught == error);  // the user's exception object, unwrapped
      CHECK(thrown_id([&] { engine.WaitForVar(after); }) == 13);
      CHECK(thrown_id([&] { engine.WaitForVar(kept); }) == 0);
      CHECK(thrown_id([&] { engine.WaitForFence({&timeline, 1}); }) == 13);
      CHECK(thrown_id([&] { engine.WaitForAll(); }) == 0);  // the waits above reported it
      // An error that entered through a failed timeline, not from an op, is not lost: with no WaitForVar to report
      // it, WaitForAll does.
      engine.Push([] {}, {}, {engine.NewVariable()}, with_fences({{&timeline, 1}}));
      CHECK(thrown_id([&] { engine.WaitForAll(); }) == 13);
      engine.WaitForAll();  // cleared
      CHECK(skipped_ran.load(std::memory_order_relaxed) == 0);
      CHECK(no_skip_ran.load(std::memory_order_relaxed) == 1);
    }
  }
}

TEST_CASE("an async op signals its fences when its Completion is called, not when its function returns",
          "[engine][fences]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("async signallers on " + factory.name);
      Engine engine(factory.options());
      if (!factory.takes_async) {  // a stream op signals when its device work completes: stream_executor_fences_test
        check_async_refused(engine, engine.NewVariable());
        continue;
      }
      Completer completer;
      Timeline timeline, failing;
      struct Slot {
        std::optional<Completion> done;  // written by the op's function before `stored`
        std::atomic<bool> stored{false};
      } slot;
      engine.PushAsync(
          [&slot](Completion done) {
            slot.done.emplace(done);
            slot.stored.store(true, std::memory_order_release);  // release: pairs with the acquire below
          },
          {}, {}, with_fences({}, {{&timeline, 1}}));
      int payload = 0;  // written by the completing thread before the Completion, read by the waiting op
      int seen = -1;
      std::atomic<bool> waiter_ran{false};
      engine.Push(
          [&] {
            seen = payload;
            waiter_ran.store(true, std::memory_order_release);  // release: pairs with the acquires below
          },
          {}, {}, with_fences({{&timeline, 1}}));
      REQUIRE(wait_until([&slot] { return slot.stored.load(std::memory_order_acquire); }));
      run_probe(engine);  // the function has returned (certainly on inline and one worker)
      CHECK(timeline.query() == 0);
      CHECK_FALSE(waiter_ran.load(std::memory_order_acquire));

      completer.post([&slot, &payload] {
        payload = 7;
        (*slot.done)();
      });
      engine.WaitForFence({&timeline, 1});
      CHECK(timeline.query() == 1);
      CHECK(wait_until([&] { return waiter_ran.load(std::memory_order_acquire); }));
      CHECK(seen == 7);

      // An error passed to the Completion on another thread fails the timeline with it.
      engine.PushAsync(
          [&completer](Completion done) { completer.post([done] { done(std::make_exception_ptr(OpFailure(21))); }); },
          {}, {}, with_fences({}, {{&failing, 1}}));
      CHECK(thrown_id([&] { engine.WaitForFence({&failing, 1}); }) == 21);
      CHECK(thrown_id([&] { engine.WaitForAll(); }) == 21);
      completer.stop();
    }
  }
}

TEST_CASE("WaitForFence returns at a reached value, throws Error inside an op, and rejects a null timeline",
          "[engine][fences][misuse]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("WaitForFence on " + factory.name);
      Engine engine(factory.options());
      Timeline timeline;
      timeline.signal(3, {});
      // Nothing is pushed that could reach a higher value: a wait that did not return at once would hang.
      CHECK_NOTHROW(engine.WaitForFence({&timeline, 0}));
      CHECK_NOTHROW(engine.WaitForFence({&timeline, 2}));
      CHECK_NOTHROW(engine.WaitForFence({&timeline, 3}));

      const Var v = engine.NewVariable();
      bool threw_reached = false, threw_unreached = false, threw_async = false;
      engine.Push(
          [&] {
            try {
              engine.WaitForFence({&timeline, 1});
            } catch (const Error&) {
              threw_reached = true;
            }
            try {
              engine.WaitForFence({&timeline, 100});  // would never return on this thread
            } catch (const Error&) {
              threw_unreached = true;
            }
          },
          {}, {v});
      if (factory.takes_async) {
        engine.PushAsync(
            [&](Completion done) {
              try {
                engine.WaitForFence({&timeline, 1});
              } catch (const Error&) {
                threw_async = true;
              }
              done();
            },
            {}, {v});
      } else {
        check_async_refused(engine, v);
      }
      engine.WaitForVar(v);
      CHECK(threw_reached);
      CHECK(threw_unreached);
      CHECK(threw_async == factory.takes_async);

      CHECK_THROWS_AS(engine.WaitForFence(Fence{}), Error);
      CHECK_THROWS_WITH(engine.WaitForFence(Fence{nullptr, 1}), Catch::Contains("null timeline"));

      // A failed timeline fails the wait even for a value it had reached.
      Timeline failed;
      failed.signal(2, {});
      REQUIRE(failed.fail(std::make_exception_ptr(OpFailure(31))));
      CHECK(thrown_id([&] { engine.WaitForFence({&failed, 1}); }) == 31);
      engine.WaitForAll();
    }
  }
}

TEST_CASE("a push naming a null timeline throws Error and pushes nothing; a FenceList holds at most 4 fences",
          "[engine][fences][misuse]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("null timelines on " + factory.name);
      Engine engine(factory.options());
      Timeline waited, signalled;
      waited.signal(1, {});
      const Var v = engine.NewVariable();
      std::atomic<int> ran{0};
      auto count = [&ran] { ran.fetch_add(1, std::memory_order_relaxed); };
      CHECK_THROWS_WITH(engine.Push(count, {}, {v}, with_fences({{nullptr, 1}})), Catch::Contains("null timeline"));
      CHECK_THROWS_WITH(engine.Push(count, {v}, {}, with_fences({{&waited, 1}}, {{&signalled, 1}, {nullptr, 2}})),
                        Catch::Contains("null timeline"));
      if (factory.takes_async) {
        CHECK_THROWS_WITH(engine.PushAsync(
                              [&ran](Completion done) {
                                ran.fetch_add(1, std::memory_order_relaxed);
                                done();
                              },
                              {}, {v}, with_fences({{&waited, 1}, {nullptr, 1}})),
                          Catch::Contains("null timeline"));
      } else {  // refused first, for the executor
        check_async_refused(engine, v, with_fences({{&waited, 1}, {nullptr, 1}}));
      }
      bool deleted = false;
      CHECK_THROWS_WITH(engine.DeleteVariable(
                            v, [&deleted] { deleted = true; }, with_fences({}, {{nullptr, 1}})),
                        Catch::Contains("null timeline"));
      CHECK(engine.InFlight() == 0);
      CHECK_NOTHROW(engine.WaitForAll());
      CHECK(ran.load(std::memory_order_relaxed) == 0);
      CHECK_FALSE(deleted);
      CHECK(signalled.query() == 0);
      CHECK_FALSE(signalled.failed());

      // The engine, the variable and the timelines are all still usable.
      engine.Push(count, {}, {v}, with_fences({{&waited, 1}}, {{&signalled, 1}}));
      engine.WaitForFence({&signalled, 1});
      CHECK_NOTHROW(engine.WaitForVar(v));
      CHECK(ran.load(std::memory_order_relaxed) == 1);

      // Four fences fit (four timelines signalled by one op); a fifth throws Error when the list is built.
      std::array<Timeline, 4> four;
      const FenceList signal_four{{&four[0], 1}, {&four[1], 2}, {&four[2], 3}, {&four[3], 4}};
      engine.Push(count, {}, {}, with_fences({{&signalled, 1}}, signal_four));
      engine.WaitForAll();
      for (std::size_t i = 0; i < four.size(); ++i) CHECK(four[i].query() == i + 1);
      const Fence fence{&waited, 1};
      CHECK_THROWS_AS((FenceList{fence, fence, fence, fence, fence}), Error);
      const std::array<Fence, 5> five{fence, fence, fence, fence, fence};
      CHECK_THROWS_AS(FenceList(std::span<const Fence>(five)), Error);
      engine.DeleteVariable(v, [&deleted] { deleted = true; });
      engine.WaitForAll();
      CHECK(deleted);
    }
  }
}

TEST_CASE("timelines are raised by the time WaitForAll returns", "[engine][fences][waits]") {
  const int ops = static_cast<int>(sized(2000, 200, 500));
  constexpr std::size_t kTimelines = 8;
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("signalled before WaitForAll returns on " + factory.name);
      Engine engine(factory.options());
      Completer completer(2);
      if (!factory.takes_async)
        check_async_refused(engine, engine.NewVariable());  // its async ops are pushed with Push
      std::array<Timeline, kTimelines> timelines;
      std::array<std::uint64_t, kTimelines> expected{};  // the highest value signalled on each
      Timeline all;  // every op raises it to its index + 1, out of order: only the highest stays
      for (int i = 0; i < ops; ++i) {
        const auto slot = static_cast<std::size_t>(i) % kTimelines;
        const auto value = static_cast<std::uint64_t>(i) / kTimelines + 1;
        expected[slot] = value;
        const PushOptions options =
            with_fences({}, {{&timelines[slot], value}, {&all, static_cast<std::uint64_t>(i) + 1}});
        if (i % 2 == 0 && factory.takes_async) {
          engine.PushAsync([&completer](Completion done) { completer.post([done] { done(); }); }, {}, {}, options);
        } else {
          engine.Push([] {}, {}, {}, options);
        }
      }
      engine.WaitForAll();
      // No wait for the values here: an op raises its fences before it retires.
      for (std::size_t slot = 0; slot < kTimelines; ++slot) CHECK(timelines[slot].query() == expected[slot]);
      CHECK(all.query() == static_cast<std::uint64_t>(ops));
      completer.stop();
    }
  }
}

// engine.h: an op raises its signal fences when it completes, and an op's completion is what its variables order later
// ops and WaitForVar after. So an op ordered after A by a variable, or a WaitForVar that waited for A, finds A's
// timelines raised: A must raise them before it releases its variables, not in between.
TEST_CASE("an op raises its signal fences before the ops and waits that its variables order after it proceed",
          "[engine][fences][waits]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("fences raised before variables are released on " + factory.name);
      Engine engine(factory.options());
      Completer completer;

      // A callback on A's first signal timeline runs on the completing thread (a Completer thread, outside any op)
      // between A's two raises: an op pushed there on A's variable must still wait for the second one. (Were the
      // variable released first, the inline executor would run it inside that Push.) An executor that does not take
      // async ops skips this part; one that issues ahead releases A's variable when it issues A, before A completes
      // and raises anything, and orders the later op's device work after A's on its streams instead.
      const Var v = engine.NewVariable();
      if (factory.takes_async) {
        Timeline first, second;
        std::uint64_t second_seen = 0;  // written by the op pushed from the callback; read after WaitForVar(v)
        TimelineCallbackWaiter waiter([&](const TimelineWaitResult&) noexcept {
          try {
            engine.Push([&] { second_seen = second.query(); }, {v}, {});
          } catch (...) {
            second_seen = 99;  // Push failed: reported by the check below
          }
        });
        first.wait_async(waiter, 1);
        engine.PushAsync([&completer](Completion done) { completer.post([done] { done(); }); }, {}, {v},
                         with_fences({}, {{&first, 1}, {&second, 1}}));
        engine.WaitForFence({&second, 1});  // the callback, and so its Push, happened before the second raise
        engine.WaitForVar(v);
        CHECK(second_seen == 1);
      } else {
        check_async_refused(engine, v);
      }

      // WaitForVar returns only once the ops it waited for have raised their fences, sync or async.
      Timeline per_var;
      int late = 0;
      for (int i = 1; i <= 100; ++i) {
        const PushOptions options = with_fences({}, {{&per_var, static_cast<std::uint64_t>(i)}});
        if (i % 2 == 0 && factory.takes_async) {
          engine.PushAsync([&completer](Completion done) { completer.post([done] { done(); }); }, {}, {v}, options);
        } else {
          engine.Push([] {}, {}, {v}, options);
        }
        engine.WaitForVar(v);
        if (per_var.query() != static_cast<std::uint64_t>(i)) ++late;
      }
      CHECK(late == 0);
      engine.WaitForAll();
      completer.stop();
    }
  }
}

TEST_CASE("a long chain ordered by fences and released at once runs in the executor's loop, not nested",
          "[engine][fences]") {
  // Ops 1..n-1 are pushed first, each waiting for its predecessor's signal; pushing op 0 releases all of them. Each
  // op's signal makes the next ready from inside the completing op: were that op run inside the timeline's callback
  // (the inline executor runs what it is handed at once), the stack would grow by a few KiB per op and overflow.
  const std::size_t n = sized(50000, 20000, 20000);  // below the in-flight bound: every op is held at once
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("released fence chain on " + factory.name);
      Engine engine(factory.options());
      Timeline timeline;
      std::size_t next = 0;  // touched only by the ops, which the timeline orders
      std::size_t misordered = 0;
      auto push = [&](std::size_t i) {
        const auto value = static_cast<std::uint64_t>(i);
        engine.Push(
            [&next, &misordered, i] {
              if (next != i) ++misordered;
              next = i + 1;
            },
            {}, {}, with_fences({{&timeline, value}}, {{&timeline, value + 1}}));
      };
      for (std::size_t i = n - 1; i >= 1; --i) push(i);
      CHECK(engine.InFlight() == n - 1);
      push(0);
      engine.WaitForFence({&timeline, n});
      engine.WaitForAll();
      CHECK(next == n);
      CHECK(misordered == 0);
    }
  }
}

// Op i waits for T >= i and signals T = i + 1, and nothing else orders the ops: pushed in a random order from one or
// two threads, some of them async (completed on a Completer thread), they must still run as 0, 1, ..., n - 1. Every
// op but the first is pushed before the value it waits for may be reached, or after, depending on the permutation.
TEST_CASE("a chain ordered only by one timeline runs in order, whatever the push order", "[engine][fences][random]") {
  const std::size_t n = sized(2000, 200, 500);
  const auto seeds = test_seeds();
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      for (std::uint64_t seed : seeds) {
        for (int pushers = 1; pushers <= 2; ++pushers) {
          CAPTURE(seed, pushers);
          Watchdog watchdog("random fence chain on " + factory.name);
          watchdog.note("DEPENGINE_TEST_SEED=" + std::to_string(seed) + ", " + std::to_string(pushers) + " pushers");
          std::mt19937_64 rng(seed);
          std::vector<std::size_t> order(n);
          std::iota(order.begin(), order.end(), std::size_t{0});
          std::shuffle(order.begin(), order.end(), rng);
          std::vector<bool> async(n);
          for (std::size_t i = 0; i < n; ++i) async[i] = rng() % 4 == 0 && factory.takes_async;

          Engine engine(factory.options());
          if (!factory.takes_async) check_async_refused(engine, engine.NewVariable());  // none is drawn async
          Completer completer;
          Timeline timeline;
          std::vector<std::size_t> log;  // written by the ops, which the timeline orders
          log.reserve(n);
          // Ops that found the timeline at another value than their index. Where ops run before what they depend on
          // has completed (a stream executor issues op i once op i - 1 is issued), it may still be lower, never higher.
          std::atomic<int> misordered{0};
          const bool exact = factory.runs_after_completion;
          auto push = [&](std::size_t i) {
            const auto value = static_cast<std::uint64_t>(i);
            const PushOptions options = with_fences({{&timeline, value}}, {{&timeline, value + 1}});
            auto body = [&log, &misordered, &timeline, exact, i, value] {
              const std::uint64_t seen = timeline.query();
              if (exact ? seen != value : seen > value) misordered.fetch_add(1, std::memory_order_relaxed);
              log.push_back(i);
            };
            if (async[i]) {
              engine.PushAsync(
                  [&completer, body](Completion done) {
                    completer.post([body, done] {
                      body();
                      done();
                    });
                  },
                  {}, {}, options);
            } else {
              engine.Push(body, {}, {}, options);
            }
          };
          std::vector<std::thread> others;
          for (int t = 1; t < pushers; ++t) {
            others.emplace_back([&, t] {
              for (std::size_t k = static_cast<std::size_t>(t); k < n; k += static_cast<std::size_t>(pushers)) {
                push(order[k]);
              }
            });
          }
          for (std::size_t k = 0; k < n; k += static_cast<std::size_t>(pushers)) push(order[k]);
          for (auto& thread : others) thread.join();
          engine.WaitForFence({&timeline, n});
          engine.WaitForAll();
          CHECK(timeline.query() == n);
          CHECK(misordered.load(std::memory_order_relaxed) == 0);
          std::vector<std::size_t> expected(n);
          std::iota(expected.begin(), expected.end(), std::size_t{0});
          CHECK(log == expected);
          completer.stop();
        }
      }
    }
  }
}

}  // namespace
}  // namespace depengine::test
