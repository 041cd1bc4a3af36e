// WaitForVar and WaitForAll (engine.h, "Waits"): what they wait for, that they run queued work while waiting, and
// that called from inside a running op they throw Error instead of hanging.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include <depengine/engine/engine.h>
#include <depengine/executors/threadpool/threadpool_executor.h>

#include "test/engine/test_support.h"
#include "test/executors/executor_factories.h"

namespace depengine::test {
namespace {

// Atomics: counters bumped by ops are read by the test thread after a wait (WaitForAll, WaitForVar, WaitForScope), a
// join or the engine's destruction, which orders every op's writes before the read, so they are relaxed.

TEST_CASE("WaitForVar returns once every earlier op on its variable completed, and waits for nothing else",
          "[engine][waits]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("WaitForVar on " + factory.name);
      Engine engine(factory.options());
      const Var v = engine.NewVariable(), unrelated = engine.NewVariable();
      HeldOp held_elsewhere(engine, {}, {unrelated});  // WaitForVar(v) must not wait for this one
      HeldOp held(engine, {}, {v});
      std::atomic<int> done{0};
      auto count = [&done] { done.fetch_add(1, std::memory_order_relaxed); };
      constexpr int kOps = 30;
      for (int i = 0; i < kOps; ++i) {
        if (i % 3 == 0) {
          engine.Push(count, {}, {v});
        } else {
          engine.Push(count, {v}, {});  // reads count as ops on v too
        }
      }
      // The held op completes from another thread once this one is (about to be) waiting.
      std::atomic<bool> waiting{false};
      bool released = false;
      std::thread releaser(
          [&] { released = wait_until([&] { return waiting.load(std::memory_order_acquire); }) && held.release(); });
      waiting.store(true, std::memory_order_release);  // release: pairs with the releaser's acquire
      engine.WaitForVar(v);
      CHECK(done.load(std::memory_order_relaxed) == kOps);
      releaser.join();
      CHECK(released);
      CHECK(held_elsewhere.holding());
      REQUIRE(held_elsewhere.release());
      engine.WaitForAll();
    }
  }
}

TEST_CASE("WaitForAll waits for every op, including async ones completed on other threads", "[engine][waits]") {
  const int ops = static_cast<int>(sized(20000, 1000, 4000));
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("WaitForAll on " + factory.name);
      Engine engine(factory.options());
      Completer completer(2);
      std::vector<Var> vars;
      for (int i = 0; i < 8; ++i) vars.push_back(engine.NewVariable());
      if (!factory.takes_async) check_async_refused(engine, vars[0]);  // its async ops below are pushed with Push
      std::atomic<int> done{0};
      for (int i = 0; i < ops; ++i) {
        const Var v = vars[static_cast<std::size_t>(i) % vars.size()];
        if (i % 2 == 0 && factory.takes_async) {
          engine.PushAsync(
              [&](Completion completion) {
                completer.post([&done, completion] {
                  done.fetch_add(1, std::memory_order_relaxed);
                  completion();
                });
              },
              {}, {v});
        } else {
          engine.Push([&done] { done.fetch_add(1, std::memory_order_relaxed); }, {v}, {});
        }
      }
      engine.WaitForAll();
      CHECK(done.load(std::memory_order_relaxed) == ops);
      CHECK(engine.InFlight() == 0);
      completer.stop();
    }
  }
}

// With one worker busy in an op that waits for another op to run, only the waiting thread can run it: the waits must
// help (engine.h: "Both run queued work on the calling thread while they wait").
TEST_CASE("waits run queued work on the calling thread", "[engine][waits][threadpool]") {
  Watchdog watchdog("helping waits");
  for (int use_wait_for_all = 0; use_wait_for_all < 2; ++use_wait_for_all) {
    Engine engine(threadpool_factory(1).options());
    const Var busy = engine.NewVariable(), v = engine.NewVariable();
    std::atomic<bool> started{false}, unblocked{false};
    bool unblocked_in_time = false;
    engine.Push(
        [&] {
          started.store(true, std::memory_order_release);
          unblocked_in_time = wait_until([&] { return unblocked.load(std::memory_order_acquire); });
        },
        {}, {busy});
    REQUIRE(wait_until([&] { return started.load(std::memory_order_acquire); }));  // the only worker is taken
    int worker = 0;
    engine.Push(
        [&](const RunContext& context) {
          worker = context.worker;
          unblocked.store(true, std::memory_order_release);
        },
        {}, {v});
    if (use_wait_for_all != 0) {
      engine.WaitForAll();
    } else {
      engine.WaitForVar(v);
      engine.WaitForAll();
    }
    CHECK(unblocked_in_time);
    CHECK(worker == -1);  // run by the waiting thread, which is none of the pool's workers
  }
}

// executors/threadpool/threadpool_executor.h, "A waiting thread as a worker": with ThreadPoolOptions::waiters_work, a
// thread asleep in a wait is woken for work that an op makes ready while the pool's one worker is busy, and runs it.
// Here the op waits for that work: if nobody woke the waiting thread, it would time out.
TEST_CASE("a waiting thread runs work made ready while it sleeps, where the pool's waiters work", "[engine][waits]") {
  for (const int use_wait_for_all : {1, 0}) {
    DYNAMIC_SECTION((use_wait_for_all != 0 ? "WaitForAll" : "WaitForVar")) {
      Watchdog watchdog("a waiting thread woken for work");
      EngineOptions options;
      options.executors.push_back(
          std::make_unique<ThreadPoolExecutor>(ThreadPoolOptions{.workers = 1, .waiters_work = true}));
      Engine engine(std::move(options));
      const Var a = engine.NewVariable(), b = engine.NewVariable();
      std::atomic<bool> started{false}, b_ran{false};
      bool b_in_time = false;
      int a_worker = -1, b_worker = 0;
      engine.Push(
          [&](const RunContext& context) {
            a_worker = context.worker;
            started.store(true, std::memory_order_release);  // release: pairs with the test thread's acquire
            // A long op first (2 ms): by then the waiting thread has stopped looking for work (the pool's 20 us idle
            // spin) and sleeps. Then it makes b's op ready, and waits for another thread to have run it.
            const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(2);
            while (std::chrono::steady_clock::now() < until) {
            }
            engine.Push(
                [&](const RunContext& inner) {
                  b_worker = inner.worker;
                  b_ran.store(true, std::memory_order_release);  // release: pairs with the acquire below
                },
                {}, {b});
            b_in_time = wait_until([&] { return b_ran.load(std::memory_order_acquire); });
          },
          {}, {a});
      // The op runs on the worker, not on this thread (which, waiting, could take it from a worker not yet awake).
      REQUIRE(wait_until([&] { return started.load(std::memory_order_acquire); }));
      if (use_wait_for_all != 0) {
        engine.WaitForAll();
      } else {
        engine.WaitForVar(a);
      }
      CHECK(a_worker >= 0);
      CHECK(b_in_time);
      CHECK(b_worker == -1);  // run by the waiting thread
    }
  }
}

// engine.h: called from inside a running op, both waits throw Error instead of hanging. One worker makes a wait that
// blocked its own thread a certain deadlock, which the watchdog would report.
TEST_CASE("waits called from inside an op throw Error instead of hanging", "[engine][waits]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("waits inside ops on " + factory.name);
      Engine engine(factory.options());
      const Var v = engine.NewVariable(), other = engine.NewVariable();
      engine.Push([] {}, {}, {other});
      struct Outcome {
        bool wait_var_own = false, wait_var_other = false, wait_all = false;
      };
      auto try_waits = [&engine, v, other](Outcome& outcome) {
        try {
          engine.WaitForVar(v);
        } catch (const Error&) {
          outcome.wait_var_own = true;
        }
        try {
          engine.WaitForVar(other);
        } catch (const Error&) {
          outcome.wait_var_other = true;
        }
        try {
          engine.WaitForAll();
        } catch (const Error&) {
          outcome.wait_all = true;
        }
      };
      Outcome sync_op, async_op, deleter;
      engine.Push([&] { try_waits(sync_op); }, {}, {v});
      if (factory.takes_async) {
        engine.PushAsync(
            [&](Completion done) {
              try_waits(async_op);
              done();
            },
            {v}, {});
      } else {
        check_async_refused(engine, v);
      }
      const Var doomed = engine.NewVariable();
      engine.DeleteVariable(doomed, [&] { try_waits(deleter); });
      // An Error that escapes the op is the op's error like any other.
      engine.Push([&] { engine.WaitForAll(); }, {}, {other});
      CHECK_THROWS_AS(engine.WaitForVar(other), Error);
      CHECK_NOTHROW(engine.WaitForAll());  // the one error was reported by WaitForVar
      for (const Outcome* outcome : {&sync_op, &async_op, &deleter}) {
        if (outcome == &async_op && !factory.takes_async) continue;
        CHECK(outcome->wait_var_own);
        CHECK(outcome->wait_var_other);
        CHECK(outcome->wait_all);
      }
    }
  }
}

TEST_CASE("several threads wait on the same variable while ops are pushed", "[engine][waits][concurrency]") {
  const int ops = static_cast<int>(sized(4000, 300, 1000));
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("concurrent waiters on " + factory.name);
      Engine engine(factory.options());
      const Var v = engine.NewVariable();
      std::atomic<bool> pushing{true};
      std::atomic<int> pushed{0};      // ops whose Push has returned
      std::atomic<int> last_done{-1};  // the index of the latest op completed (ops on v run in push order)
      std::atomic<int> early_returns{0};
      auto waiter = [&](bool all) {
        while (pushing.load(std::memory_order_acquire)) {
          // Every op pushed before the wait began has completed when it returns.
          const int before = pushed.load(std::memory_order_acquire);
          all ? engine.WaitForAll() : engine.WaitForVar(v);
          if (last_done.load(std::memory_order_acquire) < before - 1) {
            early_returns.fetch_add(1, std::memory_order_relaxed);
          }
        }
      };
      std::thread var_waiter(waiter, false), all_waiter(waiter, true);
      for (int i = 0; i < ops; ++i) {
        engine.Push([&last_done, i] { last_done.store(i, std::memory_order_release); }, {}, {v});
        pushed.store(i + 1, std::memory_order_release);
      }
      engine.WaitForVar(v);
      CHECK(last_done.load(std::memory_order_relaxed) == ops - 1);
      pushing.store(false, std::memory_order_release);
      var_waiter.join();
      all_waiter.join();
      CHECK(early_returns.load(std::memory_order_relaxed) == 0);
    }
  }
}

TEST_CASE("an op of one engine may wait on another engine", "[engine][waits]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("cross-engine waits on " + factory.name);
      Engine first(factory.options());
      Engine second(factory.options());
      const Var a = first.NewVariable();
      const Var b = second.NewVariable();
      std::atomic<int> done{0};
      for (int i = 0; i < 50; ++i) first.Push([&] { done.fetch_add(1, std::memory_order_relaxed); }, {}, {a});
      int seen = -1;
      bool threw = false;
      second.Push(
          [&] {
            try {
              first.WaitForVar(a);
              first.WaitForAll();
              seen = done.load(std::memory_order_relaxed);
            } catch (...) {
              threw = true;
            }
          },
          {}, {b});
      second.WaitForAll();
      CHECK_FALSE(threw);
      CHECK(seen == 50);
    }
  }
}

}  // namespace
}  // namespace depengine::test
