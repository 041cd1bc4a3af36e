// Back-pressure (engine.h, "Back-pressure"): at most EngineOptions::max_in_flight ops are pushed and not completed; a
// push past the bound waits, running queued work; pushes from inside ops are exempt.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstddef>
#include <vector>

#include <depengine/engine/engine.h>

#include "test/engine/test_support.h"
#include "test/executors/executor_factories.h"

namespace depengine::test {
namespace {

// Atomics: counters bumped by ops are read by the test thread after a wait (WaitForAll, WaitForVar, WaitForScope), a
// join or the engine's destruction, which orders every op's writes before the read, so they are relaxed.

constexpr std::size_t kBound = 1000;

// Raises `peak` to `value` if larger.
void raise(std::atomic<std::size_t>& peak, std::size_t value) {
  // relaxed: a running maximum, read after the engine's wait.
  std::size_t seen = peak.load(std::memory_order_relaxed);
  while (value > seen && !peak.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

// 10^6 ops with a bound of 1,000. Two measures: the engine's own InFlight(), sampled inside every op and after every
// push, and one of the test's: ops whose Push has returned minus ops whose body has finished, a lower bound of the
// true number in flight (an op counted there was admitted and has not retired).
TEST_CASE("pushing a million ops with a bound of 1,000 never has more than 1,000 in flight",
          "[engine][back_pressure]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      // Fewer where ops cost more (a stream executor: executor_factories.h, op_cost); still 200 times the bound.
      const std::size_t ops = sized(1'000'000, 20'000, 100'000) / factory.op_cost;
      Watchdog watchdog("back-pressure on " + factory.name);
      Engine engine(factory.options(kBound));
      std::vector<Var> vars;
      for (int i = 0; i < 1024; ++i) vars.push_back(engine.NewVariable());
      std::atomic<std::size_t> returned{0}, finished{0};
      std::atomic<std::size_t> peak_inside{0}, peak_after_push{0}, peak_outstanding{0};
      for (std::size_t i = 0; i < ops; ++i) {
        engine.Push(
            [&] {
              raise(peak_inside, engine.InFlight());
              finished.fetch_add(1, std::memory_order_relaxed);  // relaxed: a count, compared after the wait
            },
            {}, {vars[i % vars.size()]});
        const std::size_t now_returned = returned.fetch_add(1, std::memory_order_relaxed) + 1;
        raise(peak_after_push, engine.InFlight());
        const std::size_t now_finished = finished.load(std::memory_order_relaxed);
        if (now_returned > now_finished) raise(peak_outstanding, now_returned - now_finished);
      }
      engine.WaitForAll();
      CHECK(finished.load(std::memory_order_relaxed) == ops);
      CHECK(peak_outstanding.load(std::memory_order_relaxed) <= kBound);
      CHECK(peak_inside.load(std::memory_order_relaxed) <= kBound);
      CHECK(peak_after_push.load(std::memory_order_relaxed) <= kBound);
      CHECK(engine.InFlight() == 0);
    }
  }
}

// Async ops whose completions a thread delivers in batches of half the bound pile up until the bound stops the pusher:
// the bound is reached (so the measure above can fail) and never passed. The ops must be independent (more variables
// than the bound), or those queued behind an unstarted op would never hand their completion over and the batch would
// never fill.
TEST_CASE("async ops completed elsewhere fill up to the bound and no further", "[engine][back_pressure]") {
  const std::size_t ops = sized(200'000, 8'000, 40'000);
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("async back-pressure on " + factory.name);
      Engine engine(factory.options(kBound));
      if (!factory.takes_async) {  // the bound for its synchronous ops is the test above
        check_async_refused(engine, engine.NewVariable());
        continue;
      }
      Completer completer(1, kBound / 2);
      std::vector<Var> vars;
      for (std::size_t i = 0; i < kBound + 24; ++i) vars.push_back(engine.NewVariable());
      const Var shared = engine.NewVariable();
      std::atomic<std::size_t> peak{0}, peak_inside{0}, completed{0};
      for (std::size_t i = 0; i < ops; ++i) {
        engine.PushAsync(
            [&](Completion done) {
              raise(peak_inside, engine.InFlight());
              completer.post([&completed, done] {
                completed.fetch_add(1, std::memory_order_relaxed);
                done();
              });
            },
            {shared}, {vars[i % vars.size()]});
        raise(peak, engine.InFlight());
      }
      completer.flush();
      engine.WaitForAll();
      completer.stop();
      CHECK(completed.load(std::memory_order_relaxed) == ops);
      CHECK(peak.load(std::memory_order_relaxed) <= kBound);
      CHECK(peak_inside.load(std::memory_order_relaxed) <= kBound);
      CHECK(peak.load(std::memory_order_relaxed) >= kBound / 2);
    }
  }
}

// The count of retired ops is kept in slots, one per thread modulo their number (engine/detail/in_flight.h): async ops
// completed on 12 threads, more than there are slots, retire on all of them, several threads to a slot. A push at the
// bound must see every slot's retirements (or it waits for ever: the watchdog fails it), WaitForAll must see the
// last one, and the count must come back to 0, never having passed the bound.
TEST_CASE("ops retired on more threads than the count has slots are all counted", "[engine][back_pressure]") {
  constexpr std::size_t kSmallBound = 64;
  const std::size_t ops = sized(100'000, 5'000, 20'000);
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("retirements on 12 threads on " + factory.name);
      Engine engine(factory.options(kSmallBound));
      if (!factory.takes_async) {  // its ops retire where they run: the tests above
        check_async_refused(engine, engine.NewVariable());
        continue;
      }
      Completer completer(12);
      std::vector<Var> vars;
      for (std::size_t i = 0; i < 4 * kSmallBound; ++i) vars.push_back(engine.NewVariable());
      std::atomic<std::size_t> peak{0}, completed{0};
      for (std::size_t i = 0; i < ops; ++i) {
        engine.PushAsync(
            [&](Completion done) {
              completer.post([&completed, done] {
                completed.fetch_add(1, std::memory_order_relaxed);  // relaxed: a count, compared after the wait
                done();
              });
            },
            {}, {vars[i % vars.size()]});
        raise(peak, engine.InFlight());
      }
      engine.WaitForAll();
      CHECK(completed.load(std::memory_order_relaxed) == ops);
      CHECK(engine.InFlight() == 0);
      CHECK(peak.load(std::memory_order_relaxed) <= kSmallBound);
      completer.stop();
    }
  }
}

TEST_CASE("pushes from inside ops are exempt from the bound and never wait for themselves", "[engine][back_pressure]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("pushes inside ops with bound 1 on " + factory.name);
      Engine engine(factory.options(1));
      const Var v = engine.NewVariable();
      std::atomic<int> ran{0};
      // A tree: each op pushes two children, to depth 6, with room for one op in flight.
      struct Tree {
        Engine& engine;
        Var v;
        std::atomic<int>& ran;
        void grow(int depth) {
          ran.fetch_add(1, std::memory_order_relaxed);
          if (depth == 0) return;
          for (int child = 0; child < 2; ++child) {
            const Var own = engine.NewVariable();
            engine.Push([this, depth] { grow(depth - 1); }, {v}, {own});
          }
        }
      } tree{engine, v, ran};
      engine.Push([&] { tree.grow(6); }, {v}, {});
      engine.WaitForAll();
      CHECK(ran.load(std::memory_order_relaxed) == (1 << 7) - 1);
    }
  }
}

// One worker, busy until the pushing thread has pushed everything: the pushes past the bound can only proceed by
// running queued ops themselves. Were they to sleep instead, the busy op would give up waiting and fail the test.
TEST_CASE("a push held back by the bound runs queued work", "[engine][back_pressure][threadpool]") {
  Watchdog watchdog("helping pushes");
  constexpr std::size_t kSmallBound = 4;
  Engine engine(threadpool_factory(1).options(kSmallBound));
  const Var busy = engine.NewVariable();
  std::atomic<bool> started{false}, all_pushed{false};
  bool released_in_time = false;
  engine.Push(
      [&] {
        started.store(true, std::memory_order_release);
        released_in_time = wait_until([&] { return all_pushed.load(std::memory_order_acquire); });
      },
      {}, {busy});
  REQUIRE(wait_until([&] { return started.load(std::memory_order_acquire); }));
  std::atomic<int> ran_by_pusher{0};
  constexpr int kOps = 20;
  for (int i = 0; i < kOps; ++i) {
    engine.Push(
        [&](const RunContext& context) {
          if (context.worker == -1) ran_by_pusher.fetch_add(1, std::memory_order_relaxed);
        },
        {}, {engine.NewVariable()});
  }
  all_pushed.store(true, std::memory_order_release);
  engine.WaitForAll();
  CHECK(released_in_time);
  CHECK(ran_by_pusher.load(std::memory_order_relaxed) >= kOps - static_cast<int>(kSmallBound));
}

}  // namespace
}  // namespace depengine::test
