// Work-first pushes (ThreadPoolOptions::work_first): a thread pushing from outside the engine's ops runs the op it
// pushed, ready at its push, when the pool's workers are behind (an op submitted earlier still waits for one), and
// submits it otherwise.
//
// What is checked, and why each check would catch a broken implementation:
// - With the only worker held in an op and one op already waiting for it, the next ready push runs on the pushing
//   thread before Push returns; an op pushed while nothing waits, one of a negative priority, and one pushed while an
//   urgent op waits go to the pool (they run once the worker is free, not inside their pushes).
// - A push from inside an op is never run in place: it would nest one op inside another on the worker's stack.
// - The engine's contract holds with work-first on (the randomized RandSum and error oracles also run on work-first
//   pools: randsum_test.cpp, errors_random_test.cpp); here, the in-flight bound: ops run on the pusher count as any.
#include <atomic>
#include <catch2/catch.hpp>
#include <cstddef>
#include <thread>
#include <vector>

#include <depengine/engine/engine.h>

#include "test/engine/test_support.h"
#include "test/executors/executor_factories.h"

namespace depengine::test {
namespace {

// Atomics: counters bumped by ops are read by the test thread after a wait (WaitForAll, WaitForVar, WaitForScope), a
// join or the engine's destruction, which orders every op's writes before the read, so they are relaxed.

// Where and when an op ran: the thread, and whether its Push had returned yet.
struct RunSite {
  std::atomic<bool> ran{false};
  std::thread::id thread;  // written by the op, read after a wait for it
  bool before_push_returned = false;
  std::atomic<bool>* push_returned = nullptr;
  void record() {
    thread = std::this_thread::get_id();
    before_push_returned = !push_returned->load(std::memory_order_acquire);
    ran.store(true, std::memory_order_release);
  }
};

}  // namespace

TEST_CASE("work-first: a push runs on the pushing thread only while the workers are behind", "[engine][work-first]") {
  Watchdog watchdog("work-first pushes");
  Engine engine(work_first_factory(1).options());
  HeldWorker holder;
  holder.start(engine, engine.NewVariable());
  // The worker is held. The first push finds nothing waiting: it is submitted, and waits for the worker.
  std::atomic<bool> pushed{false};
  RunSite first{.push_returned = &pushed};
  engine.Push([&] { first.record(); }, {}, {engine.NewVariable()});
  pushed.store(true, std::memory_order_release);
  // Now an op waits for the worker: the next ready push runs here, before Push returns.
  std::atomic<bool> second_pushed{false};
  RunSite second{.push_returned = &second_pushed};
  engine.Push([&] { second.record(); }, {}, {engine.NewVariable()});
  second_pushed.store(true, std::memory_order_release);
  CHECK(second.ran.load(std::memory_order_acquire));
  // A negative priority is never run here: whatever waits for a worker goes first.
  std::atomic<bool> low_pushed{false};
  RunSite low{.push_returned = &low_pushed};
  engine.Push([&] { low.record(); }, {}, {engine.NewVariable()}, PushOptions{.priority = -1});
  low_pushed.store(true, std::memory_order_release);
  CHECK_FALSE(low.ran.load(std::memory_order_acquire));
  CHECK_FALSE(first.ran.load(std::memory_order_acquire));
  holder.open.store(true, std::memory_order_release);  // before the wait, which would otherwise help with the holder
  engine.WaitForAll();
  CHECK_FALSE(holder.timed_out.load(std::memory_order_relaxed));
  CHECK(second.thread == std::this_thread::get_id());
  CHECK(second.before_push_returned);
  // These ran later, on the worker or on this thread's WaitForAll, which helps: not inside their pushes.
  CHECK_FALSE(first.before_push_returned);
  CHECK_FALSE(low.before_push_returned);
}

TEST_CASE("work-first: an urgent op waiting for a worker keeps a later push off the pushing thread",
          "[engine][work-first][priority]") {
  Watchdog watchdog("work-first behind urgent");
  Engine engine(work_first_factory(1).options());
  HeldWorker holder;
  holder.start(engine, engine.NewVariable());
  std::atomic<bool> pushed{false};
  RunSite urgent{.push_returned = &pushed}, normal{.push_returned = &pushed};
  engine.Push([&] { urgent.record(); }, {}, {engine.NewVariable()}, PushOptions{.priority = 5});
  engine.Push([&] { normal.record(); }, {}, {engine.NewVariable()});  // the worker is behind, but urgent work waits
  pushed.store(true, std::memory_order_release);
  CHECK_FALSE(normal.ran.load(std::memory_order_acquire));
  holder.open.store(true, std::memory_order_release);
  engine.WaitForAll();
  CHECK_FALSE(holder.timed_out.load(std::memory_order_relaxed));
  CHECK_FALSE(urgent.before_push_returned);
  CHECK_FALSE(normal.before_push_returned);
}

TEST_CASE("work-first: a push from inside an op is never run in place", "[engine][work-first][nested]") {
  Watchdog watchdog("work-first nested pushes");
  Engine engine(work_first_factory(1).options());
  CHECK(nested_children(engine, 50) == 0);
}

TEST_CASE("work-first: ops run on the pushing thread count against max_in_flight", "[engine][work-first][bound]") {
  Watchdog watchdog("work-first bound");
  constexpr std::size_t kBound = 8;
  const std::size_t ops = sized(20'000, 2'000, 5'000);
  for (const int workers : {1, 2}) {
    DYNAMIC_SECTION("workers " << workers) {
      Engine engine(work_first_factory(workers).options(kBound));
      std::vector<Var> vars;
      for (int v = 0; v < 64; ++v) vars.push_back(engine.NewVariable());
      std::atomic<std::size_t> peak{0}, ran{0}, on_pusher{0};
      const std::thread::id pusher = std::this_thread::get_id();
      for (std::size_t i = 0; i < ops; ++i) {
        engine.Push(
            [&] {
              const std::size_t now = engine.InFlight();
              // relaxed: counters read after WaitForAll.
              std::size_t seen = peak.load(std::memory_order_relaxed);
              while (now > seen && !peak.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
              }
              if (std::this_thread::get_id() == pusher) on_pusher.fetch_add(1, std::memory_order_relaxed);
              ran.fetch_add(1, std::memory_order_relaxed);
            },
            {}, {vars[i % vars.size()]});
      }
      engine.WaitForAll();
      CHECK(ran.load(std::memory_order_relaxed) == ops);
      CHECK(peak.load(std::memory_order_relaxed) <= kBound);
      CHECK(on_pusher.load(std::memory_order_relaxed) >
            0);  // the pusher ran ops (held back by the bound, or work-first)
    }
  }
}

}  // namespace depengine::test
