// Concurrent pushers and nested pushes (engine.h, "Any thread may push"): threads pushing over the same variables in
// opposite list orders never deadlock and agree with one total order; ops may push ops; ops of one engine may run on
// several executors, their successors crossing from one to another.
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <depengine/engine/engine.h>

#include "test/engine/order_oracle.h"
#include "test/engine/test_support.h"
#include "test/executors/executor_factories.h"

namespace depengine::test {
namespace {

// Atomics: counters bumped by ops are read by the test thread after a wait (WaitForAll, WaitForVar, WaitForScope), a
// join or the engine's destruction, which orders every op's writes before the read, so they are relaxed.

// MXNet appended an op to each variable's queue separately, so two threads pushing {a, b} and {b, a} could leave a
// ahead on one queue and b ahead on the other: each waits for the other, for ever. Here every op's view of both
// variables must fit one total order (order_oracle.h), and the watchdog turns a deadlock into a failure.
TEST_CASE("pushers naming the same two variables in opposite orders never deadlock", "[engine][concurrency]") {
  const std::size_t ops_per_pusher = sized(20000, 800, 4000);
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      for (int pushers : {2, 4}) {
        for (std::uint64_t seed : test_seeds()) {
          CAPTURE(pushers, seed);
          Watchdog watchdog("opposite orders on " + factory.name);
          watchdog.note("pushers=" + std::to_string(pushers) + " DEPENGINE_TEST_SEED=" + std::to_string(seed));
          std::vector<std::vector<OpSpec>> programs(static_cast<std::size_t>(pushers));
          std::mt19937_64 rng(seed);
          for (std::size_t p = 0; p < programs.size(); ++p) {
            for (std::size_t i = 0; i < ops_per_pusher; ++i) {
              OpSpec op;
              switch ((p + rng()) % 4) {
                case 0:
                  op.mutates = {0, 1};
                  break;
                case 1:
                  op.mutates = {1, 0};
                  break;
                case 2:
                  op.reads = {0};
                  op.mutates = {1};
                  break;
                default:
                  op.reads = {1};
                  op.mutates = {0};
              }
              programs[p].push_back(op);
            }
          }
          OrderOracle oracle(2, programs);
          std::atomic<std::size_t> ran{0};
          {
            Engine engine(factory.options());
            const Var vars[] = {engine.NewVariable(), engine.NewVariable()};
            Rendezvous start(pushers);
            auto pusher = [&](std::size_t p) {
              (void)start.arrive_and_wait();
              for (std::size_t k = 0; k < programs[p].size(); ++k) {
                const OpSpec& op = programs[p][k];
                const std::size_t id = oracle.id(p, k);
                auto body = [&oracle, &ran, id] {
                  oracle.observe(id);
                  ran.fetch_add(1, std::memory_order_relaxed);
                };
                if (op.reads.empty()) {
                  engine.Push(body, {}, {vars[op.mutates[0]], vars[op.mutates[1]]});
                } else {
                  engine.Push(body, {vars[op.reads[0]]}, {vars[op.mutates[0]]});
                }
              }
            };
            std::vector<std::thread> others;
            for (std::size_t p = 1; p < programs.size(); ++p) others.emplace_back(pusher, p);
            pusher(0);
            for (auto& thread : others) thread.join();
            engine.WaitForAll();
          }
          CHECK(ran.load(std::memory_order_relaxed) == oracle.size());
          const OrderOracle::Result order = oracle.total_order();
          INFO(order.failure);
          CHECK(order.failure.empty());
        }
      }
    }
  }
}

TEST_CASE("ops may push ops, which order after them on the variables they share", "[engine][concurrency][nested]") {
  const int depth = static_cast<int>(sized(10000, 500, 2000));
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("pushes from ops on " + factory.name);
      Engine engine(factory.options());
      const Var v = engine.NewVariable();

      // The parent pushes its child before it writes: the child mutates v too, so it must still see the write.
      int value = 0;
      int seen_by_child = -1;
      engine.Push(
          [&] {
            engine.Push([&] { seen_by_child = value; }, {v}, {v});
            value = 1;
          },
          {}, {v});
      engine.WaitForAll();  // not WaitForVar(v): it may be called before the parent has pushed the child
      CHECK(seen_by_child == 1);

      // A chain of continuations: each op pushes the next on its own variable. Each must run after the one that
      // pushed it, and the chain must not grow the stack (a continuation is not ready until its pusher completes).
      struct Chain {
        Engine& engine;
        Var v;
        int depth;
        int next = 0;  // the step expected next; written only by the chain's ops, which v orders
        int out_of_order = 0;
        void step(int i) {
          if (i != next) ++out_of_order;
          next = i + 1;
          if (i + 1 < depth) engine.Push([this, i] { step(i + 1); }, {}, {v});
        }
      } chain{engine, v, depth};
      engine.Push([&chain] { chain.step(0); }, {}, {v});
      engine.WaitForAll();
      CHECK(chain.next == depth);
      CHECK(chain.out_of_order == 0);

      // Ops on independent variables pushed from inside ops (they may run at once, nested on the inline executor).
      std::atomic<int> leaves{0};
      engine.Push(
          [&] {
            for (int i = 0; i < 100; ++i) {
              engine.Push([&] { leaves.fetch_add(1, std::memory_order_relaxed); }, {v}, {engine.NewVariable()});
            }
          },
          {v}, {});
      engine.WaitForAll();
      CHECK(leaves.load(std::memory_order_relaxed) == 100);
    }
  }
}

// Two executors in one engine: context.executor picks where each op runs, and a chain that alternates between them
// keeps its order, whichever executor makes whose successor ready. With a stream executor, its successors on the CPU
// executor wait for its ops to complete, and its own successors are issued behind the CPU ops they follow.
TEST_CASE("one engine with two executors: successors cross between them", "[engine][concurrency][mixed]") {
  const int ops = static_cast<int>(sized(6000, 400, 1500));
  const std::vector<std::vector<ExecutorFactory>> mixes{{threadpool_factory(2), inline_factory()},
                                                        {inline_factory(), threadpool_factory(1)},
                                                        {threadpool_factory(2), host_stream_factory()}};
  for (const auto& mix_of : mixes) {
    DYNAMIC_SECTION(mix_of[0].name + "+" + mix_of[1].name) {
      Watchdog watchdog("mixed executors " + mix_of[0].name + "+" + mix_of[1].name);
      Completer completer(1);
      Engine engine(mixed_options(mix_of));
      Executor* const executors[] = {&engine.executor(0), &engine.executor(1)};
      CHECK(executors[0] != executors[1]);
      const Var chain = engine.NewVariable(), fan = engine.NewVariable();
      for (std::uint32_t e = 0; e < 2; ++e) {  // its async links below are pushed with Push
        PushOptions on;
        on.context.executor = e;
        if (!mix_of[e].takes_async) check_async_refused(engine, fan, on);
      }
      std::uint64_t value = 0, expected = 0;
      std::uint64_t last_read = 0;  // written by the readers, which fan orders
      std::atomic<int> wrong_executor{0};
      std::mt19937 rng(3);
      for (int i = 0; i < ops; ++i) {
        PushOptions options;
        options.context.executor = rng() % 2;
        Executor* const want = executors[options.context.executor];
        auto check = [&wrong_executor, want](const RunContext& context) {
          if (context.executor != want) wrong_executor.fetch_add(1, std::memory_order_relaxed);
        };
        const auto step = static_cast<std::uint64_t>(i);
        switch (rng() % 3) {
          case 0:  // a link of the chain
            engine.Push(
                [&value, check, step](const RunContext& context) {
                  check(context);
                  value = mix(value, step);
                },
                {}, {chain}, options);
            expected = mix(expected, step);
            break;
          case 1:  // an async link, completed from another thread: its successor may be on either executor
            if (mix_of[options.context.executor].takes_async) {
              engine.PushAsync(
                  [&value, &completer, check, step](const RunContext& context, Completion done) {
                    check(context);
                    completer.post([&value, step, done] {
                      value = mix(value, step);
                      done();
                    });
                  },
                  {}, {chain}, options);
            } else {  // a synchronous link instead (executor_factories.h, takes_async)
              engine.Push(
                  [&value, check, step](const RunContext& context) {
                    check(context);
                    value = mix(value, step);
                  },
                  {}, {chain}, options);
            }
            expected = mix(expected, step);
            break;
          default:  // a reader of the chain, writing another variable
            engine.Push(
                [&value, &last_read, check](const RunContext& context) {
                  check(context);
                  last_read = value;
                },
                {chain}, {fan}, options);
        }
      }
      engine.WaitForAll();
      CHECK(value == expected);
      CHECK(wrong_executor.load(std::memory_order_relaxed) == 0);
      completer.stop();
    }
  }
}

// The threadpool hands ops to its workers through an inbox that a busy worker does not look at (threadpool/README.md):
// ops pushed while every worker is held inside an op pile up there, and must come out in an order that keeps every
// chain in push order once the workers are free.
TEST_CASE("chains pushed while every worker is busy stay ordered", "[engine][concurrency][threadpool]") {
  const std::size_t links = sized(2000, 300, 600);
  for (const int workers : {1, 2}) {
    const ExecutorFactory factory = threadpool_factory(workers);
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("chains behind busy workers on " + factory.name);
      Engine engine(factory.options());
      std::atomic<bool> open{false};
      std::atomic<int> held{0};
      std::atomic<int> gate_timeouts{0};
      for (int w = 0; w < workers; ++w) {
        engine.Push(
            [&] {
              // release/acquire: the test thread waits for every worker to be held before it pushes the chains.
              held.fetch_add(1, std::memory_order_release);
              if (!wait_until([&] { return open.load(std::memory_order_acquire); })) {
                gate_timeouts.fetch_add(1, std::memory_order_relaxed);
              }
            },
            {}, {engine.NewVariable()});
      }
      REQUIRE(wait_until([&] { return held.load(std::memory_order_acquire) == workers; }));
      constexpr int kChains = 4;
      std::vector<Var> chains;
      for (int c = 0; c < kChains; ++c) chains.push_back(engine.NewVariable());
      std::vector<std::vector<std::size_t>> seen(kChains);  // each written only by its chain's ops, one at a time
      std::atomic<std::size_t> independent_ran{0};
      for (std::size_t i = 0; i < links; ++i) {
        for (int c = 0; c < kChains; ++c) {
          engine.Push([&seen, c, i] { seen[static_cast<std::size_t>(c)].push_back(i); }, {},
                      {chains[static_cast<std::size_t>(c)]}, PushOptions{.priority = c % 2 == 0 ? 0 : 1});
        }
        engine.Push([&] { independent_ran.fetch_add(1, std::memory_order_relaxed); }, {}, {engine.NewVariable()});
      }
      open.store(true, std::memory_order_release);  // before WaitForAll, which would otherwise run the gates itself
      engine.WaitForAll();
      CHECK(gate_timeouts.load(std::memory_order_relaxed) == 0);
      CHECK(independent_ran.load(std::memory_order_relaxed) == links);
      for (int c = 0; c < kChains; ++c) {
        CAPTURE(c);
        const std::vector<std::size_t>& order = seen[static_cast<std::size_t>(c)];
        REQUIRE(order.size() == links);
        for (std::size_t i = 0; i < links; ++i) REQUIRE(order[i] == i);
      }
    }
  }
}

// On one worker an op that pushes runs on the only thread that could run what it pushes: the pushes must queue, not
// wait, and the worker must come back for them once the op returns.
TEST_CASE("ops pushed from inside ops on a single worker all run, nothing waits for itself", "[engine][concurrency]") {
  Watchdog watchdog("nested pushes on one worker");
  const std::size_t fan = sized(300, 60, 100);
  Engine engine(threadpool_factory(1).options());
  const Var chain = engine.NewVariable();
  std::atomic<std::size_t> leaves{0};
  std::vector<std::size_t> chain_order;  // written by the chain's ops only, one at a time
  engine.Push(
      [&] {
        for (std::size_t i = 0; i < fan; ++i) {
          engine.Push([&chain_order, i] { chain_order.push_back(i); }, {}, {chain});
          const Var own = engine.NewVariable();
          engine.Push(
              [&engine, &leaves, own] {
                // a grandchild behind its parent on the same variable: granted only when the parent completes
                engine.Push([&leaves] { leaves.fetch_add(1, std::memory_order_relaxed); }, {}, {own});
              },
              {}, {own});
        }
      },
      {}, {engine.NewVariable()});
  engine.WaitForAll();
  CHECK(leaves.load(std::memory_order_relaxed) == fan);
  REQUIRE(chain_order.size() == fan);
  for (std::size_t i = 0; i < fan; ++i) REQUIRE(chain_order[i] == i);
}

}  // namespace
}  // namespace depengine::test
