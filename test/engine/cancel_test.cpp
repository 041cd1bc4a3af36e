// Cancellation (engine/cancel_scope.h; EngineOptions::cancel_on_destruction): ops of a cancelled scope that have not
// started complete with Cancelled without running, the error flows on through variables like any other, WaitForScope
// waits for a scope's ops, and teardown by cancel returns without running what was queued. Every test runs on every
// executor of executor_factories.h (inline, the pool, host streams).
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string_view>
#include <thread>
#include <vector>

#include <depengine/engine/engine.h>

#include "test/engine/test_support.h"
#include "test/executors/executor_factories.h"

namespace depengine::test {
namespace {

// Atomics: counters bumped by ops are read by the test thread after a wait (WaitForAll, WaitForVar, WaitForScope), a
// join or the engine's destruction, which orders every op's writes before the read, so they are relaxed.

// Whether `fn` throws Cancelled (and not another error).
template <class Fn>
[[nodiscard]] bool throws_cancelled(Fn&& fn) {
  try {
    fn();
  } catch (const Cancelled&) {
    return true;
  } catch (...) {
    return false;
  }
  return false;
}

TEST_CASE("a scope cancelled from inside an op in the middle of a chain stops the rest of the chain",
          "[engine][cancel]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("cancelled chain on " + factory.name);
      constexpr int kChain = 200, kCancelAt = 80;
      Engine engine(factory.options());
      CancelScope scope;
      const Var v = engine.NewVariable(), downstream = engine.NewVariable(), kept = engine.NewVariable(),
                independent = engine.NewVariable();
      std::vector<int> ran;  // written by the chain's ops, which run one at a time in order
      for (int i = 0; i < kChain; ++i) {
        engine.Push(
            [&ran, &scope, i] {
              ran.push_back(i);
              if (i == kCancelAt) scope.Cancel();
            },
            {}, {v}, {.scope = &scope});
      }
      std::atomic<int> outside{0};
      auto count = [&outside] { outside.fetch_add(1, std::memory_order_relaxed); };
      engine.Push(count, {v}, {downstream});                          // outside the scope: skipped with Cancelled
      engine.Push(count, {v}, {kept}, PushOptions{.no_skip = true});  // no_skip: runs
      engine.Push(count, {}, {independent});                          // unrelated: runs
      engine.WaitForScope(scope);
      CHECK(scope.pending() == 0);
      CHECK(throws_cancelled([&] { engine.WaitForVar(v); }));
      CHECK(throws_cancelled([&] { engine.WaitForVar(downstream); }));
      CHECK_NOTHROW(engine.WaitForVar(kept));
      CHECK_NOTHROW(engine.WaitForVar(independent));
      CHECK(outside.load(std::memory_order_relaxed) == 2);
      REQUIRE(ran.size() == kCancelAt + 1);  // nothing of the scope started after the cancel returned
      for (int i = 0; i <= kCancelAt; ++i) CHECK(ran[static_cast<std::size_t>(i)] == i);
      CHECK_NOTHROW(engine.WaitForAll());  // reported by the WaitForVars
    }
  }
}

TEST_CASE("cancelling twice, or after everything ran, changes nothing; later pushes of the scope are cancelled",
          "[engine][cancel]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("cancel twice on " + factory.name);
      Engine engine(factory.options());
      CancelScope scope;
      const Var v = engine.NewVariable();
      std::atomic<int> ran{0};
      auto count = [&ran] { ran.fetch_add(1, std::memory_order_relaxed); };
      for (int i = 0; i < 10; ++i) engine.Push(count, {}, {v}, {.scope = &scope});
      engine.WaitForScope(scope);
      scope.Cancel();
      scope.Cancel();
      CHECK(scope.cancelled());
      CHECK_NOTHROW(engine.WaitForVar(v));  // everything had run: nothing cancelled, nothing poisoned
      CHECK(ran.load(std::memory_order_relaxed) == 10);
      engine.Push(count, {}, {v}, {.scope = &scope});  // pushed after the cancel: cancelled
      CHECK(throws_cancelled([&] { engine.WaitForVar(v); }));
      CHECK(ran.load(std::memory_order_relaxed) == 10);
      CHECK_NOTHROW(engine.WaitForAll());
    }
  }
}

TEST_CASE("a deletion in a cancelled scope still runs its deleter", "[engine][cancel][deletion]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("cancelled deletion on " + factory.name);
      Engine engine(factory.options());
      CancelScope scope;
      scope.Cancel();
      const Var v = engine.NewVariable();
      std::atomic<bool> deleted{false};
      engine.Push([] {}, {}, {v}, {.scope = &scope});  // cancelled: v carries Cancelled
      engine.DeleteVariable(v, [&deleted] { deleted.store(true, std::memory_order_relaxed); }, {.scope = &scope});
      engine.WaitForScope(scope);
      CHECK(deleted.load(std::memory_order_relaxed));
      CHECK(throws_cancelled([&] { engine.WaitForAll(); }));  // the cancelled op's error, on a variable now gone
    }
  }
}

TEST_CASE("a running op sees its scope cancelled through RunContext::cancelled()", "[engine][cancel]") {
  for (const auto& factory : executor_factories()) {
    if (factory.workers == 0) continue;  // the op must run while this thread cancels
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("polling on " + factory.name);
      Engine engine(factory.options());
      CancelScope scope;
      std::atomic<bool> started{false}, saw_cancel{false};
      const Var v = engine.NewVariable();
      engine.Push(
          [&](const RunContext& ctx) {
            CHECK_FALSE(ctx.cancelled());
            // release: pairs with the acquire in the wait below.
            started.store(true, std::memory_order_release);
            saw_cancel.store(wait_until([&] { return ctx.cancelled(); }), std::memory_order_relaxed);
          },
          {}, {v}, {.scope = &scope});
      REQUIRE(wait_until([&] { return started.load(std::memory_order_acquire); }));
      scope.Cancel();
      engine.WaitForScope(scope);
      CHECK(saw_cancel.load(std::memory_order_relaxed));
      CHECK_NOTHROW(engine.WaitForVar(v));  // it ran and returned: not cancelled
    }
  }
}

TEST_CASE("WaitForScope waits for the scope's ops only, and refuses to run inside an op", "[engine][cancel][waits]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("WaitForScope on " + factory.name);
      Engine engine(factory.options());
      CancelScope scope;
      const Var gate = engine.NewVariable(), other = engine.NewVariable();
      HeldOp held(engine, {}, {other});  // outside the scope: WaitForScope does not wait for it
      std::atomic<int> ran{0};
      for (int i = 0; i < 50; ++i) {
        engine.Push([&ran] { ran.fetch_add(1, std::memory_order_relaxed); }, {gate}, {engine.NewVariable()},
                    {.scope = &scope});
      }
      bool refused = false;
      engine.Push(
          [&] {
            try {
              engine.WaitForScope(scope);
            } catch (const Error&) {
              refused = true;
            }
          },
          {}, {gate});
      engine.WaitForScope(scope);
      CHECK(ran.load(std::memory_order_relaxed) == 50);
      CHECK(scope.pending() == 0);
      REQUIRE(held.release());
      engine.WaitForAll();
      CHECK(refused);
    }
  }
}

// A random DAG of scoped and unscoped ops on shared variables, one pusher, a thread that cancels the scope at a random
// moment. Whatever ran, the outcome must equal a serial replay in push order in which the scoped ops that ran are
// exactly those observed running: unscoped ops run unless an input carries an error, skipped ones pass it on, and every
// value is the serial one.
TEST_CASE("a scope cancelled from another thread in a random DAG mixed with unscoped ops", "[engine][cancel][random]") {
  constexpr std::size_t kVars = 12;
  const std::size_t ops = sized(3000, 600, 600);
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      for (const std::uint64_t seed : test_seeds()) {
        CAPTURE(seed);
        Watchdog watchdog("random cancel on " + factory.name);
        watchdog.note("seed " + std::to_string(seed));
        std::mt19937_64 rng(seed);
        struct Op {
          std::vector<std::size_t> reads, writes;
          bool scoped;
        };
        std::vector<Op> program(ops);
        for (Op& op : program) {
          for (std::size_t v = 0; v < kVars; ++v) {
            if (rng() % 5 == 0) op.reads.push_back(v);
            if (rng() % 7 == 0) op.writes.push_back(v);
          }
          if (op.writes.empty()) op.writes.push_back(rng() % kVars);
          op.scoped = rng() % 2 == 0;
        }
        const std::size_t cancel_after = rng() % ops;  // the canceller starts once this many ops were pushed
        std::vector<std::uint64_t> values(kVars, 0);
        std::vector<std::atomic<bool>> ran(ops);
        std::atomic<std::size_t> pushed{0};
        {
          Engine engine(factory.options());
          CancelScope scope;
          std::vector<Var> vars;
          for (std::size_t v = 0; v < kVars; ++v) vars.push_back(engine.NewVariable());
          std::thread canceller([&] {
            // acquire: pairs with the release store below; only times the cancel.
            while (pushed.load(std::memory_order_acquire) < cancel_after) std::this_thread::yield();
            scope.Cancel();
          });
          for (std::size_t i = 0; i < ops; ++i) {
            const Op& op = program[i];
            std::vector<Var> reads, writes;
            for (std::size_t v : op.reads) reads.push_back(vars[v]);
            for (std::size_t v : op.writes) writes.push_back(vars[v]);
            engine.Push(
                [&values, &ran, &op, i] {
                  ran[i].store(true, std::memory_order_relaxed);  // read after WaitForAll
                  std::uint64_t folded = i;
                  for (std::size_t v : op.reads) folded = mix(folded, values[v]);
                  for (std::size_t v : op.writes) values[v] = mix(folded, values[v]);
                },
                reads, writes, op.scoped ? PushOptions{.scope = &scope} : PushOptions{});
            pushed.store(i + 1, std::memory_order_release);
          }
          canceller.join();
          engine.WaitForScope(scope);
          std::vector<bool> poisoned(kVars);
          for (std::size_t v = 0; v < kVars; ++v) {
            try {
              engine.WaitForVar(vars[v]);
            } catch (const Cancelled&) {
              poisoned[v] = true;
            }
          }
          // The serial replay.
          std::vector<std::uint64_t> expected(kVars, 0);
          std::vector<bool> error(kVars, false);
          std::size_t scoped_ran = 0, cancelled = 0;
          for (std::size_t i = 0; i < ops; ++i) {
            const Op& op = program[i];
            bool input_error = false;
            for (const auto* list : {&op.reads, &op.writes}) {
              for (std::size_t v : *list) input_error = input_error || error[v];
            }
            const bool did_run = ran[i].load(std::memory_order_relaxed);
            if (op.scoped && !did_run && !input_error) ++cancelled;
            if (op.scoped && did_run) ++scoped_ran;
            const bool should_run = !input_error && (!op.scoped || did_run);
            CAPTURE(i, op.scoped);
            CHECK(did_run == should_run);
            if (!should_run) {
              for (std::size_t v : op.writes) error[v] = true;
              continue;
            }
            std::uint64_t folded = i;
            for (std::size_t v : op.reads) folded = mix(folded, expected[v]);
            for (std::size_t v : op.writes) expected[v] = mix(folded, expected[v]);
          }
          for (std::size_t v = 0; v < kVars; ++v) {
            CAPTURE(v);
            CHECK(poisoned[v] == error[v]);
            if (!error[v]) CHECK(values[v] == expected[v]);
          }
          if (cancelled == 0) CHECK_NOTHROW(engine.WaitForAll());
          (void)scoped_ran;
        }
      }
    }
  }
}

// On a pool, releasing the head of a long chain hands the chain to the workers and returns; the engine is destroyed at
// once. (On the inline executor the releasing thread runs the whole chain itself before the release returns, and a
// stream executor issues it, so there is nothing left to cancel there.) So that the chain cannot have run to its end
// before destruction begins (a releasing thread descheduled for the chain's length would let it), its kGate-th op
// waits until destruction has begun: until a push from a thread outside the engine is refused.
TEST_CASE("an engine destroyed with cancel_on_destruction does not run what is queued", "[engine][cancel][shutdown]") {
  const std::size_t queued = sized(100'000, 20'000, 20'000);
  constexpr std::size_t kGate = 10;
  for (const auto& factory : executor_factories()) {
    if (factory.workers == 0) continue;
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("teardown by cancel on " + factory.name);
      std::atomic<std::size_t> ran{0}, deleted{0};
      std::atomic<bool> began{false};
      EngineOptions options = factory.options();
      options.cancel_on_destruction = true;
      options.max_in_flight = queued + 16;
      auto engine = std::make_unique<Engine>(std::move(options));
      Engine& alive = *engine;  // the gate op runs before ~Engine() can finish (it waits for the ops in flight)
      // A deleted variable: a push naming it from outside the engine throws, saying why.
      const Var probe = engine->NewVariable();
      engine->DeleteVariable(probe, [] {});
      // Waits (up to a deadline) until a push from outside the engine is refused because it is being destroyed.
      auto wait_for_destruction = [&] {
        std::thread prober([&] {
          const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
          while (std::chrono::steady_clock::now() < deadline) {
            try {
              alive.Push([] {}, {}, {probe});
            } catch (const Error& e) {
              if (std::string_view(e.what()).find("being destroyed") != std::string_view::npos) {
                began.store(true, std::memory_order_relaxed);  // relaxed: read after the engine is gone
                return;
              }
            }
            std::this_thread::yield();
          }
        });
        prober.join();
      };
      const Var chain = engine->NewVariable();
      HeldOp held(*engine, {}, {chain});
      for (std::size_t i = 0; i < queued; ++i) {
        engine->Push(
            [&, i] {
              if (i == kGate) wait_for_destruction();
              ran.fetch_add(1, std::memory_order_relaxed);
            },
            {}, {chain});
      }
      engine->DeleteVariable(chain, [&deleted] { deleted.fetch_add(1, std::memory_order_relaxed); });
      REQUIRE(held.release());
      const auto start = std::chrono::steady_clock::now();
      engine.reset();
      const double teardown_ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      CHECK(deleted.load(std::memory_order_relaxed) == 1);  // the deletion behind the chain ran
      // What had not started when destruction began never ran: at most the ops up to the gate, which waited for it.
      CHECK(ran.load(std::memory_order_relaxed) <= kGate + 1);
      if (ran.load(std::memory_order_relaxed) > kGate) CHECK(began.load(std::memory_order_relaxed));
      std::printf("cancel_on_destruction %s: %zu ops queued, %zu ran, ~Engine() took %.1f ms\n", factory.name.c_str(),
                  queued, ran.load(std::memory_order_relaxed), teardown_ms);
    }
  }
}

}  // namespace
}  // namespace depengine::test
