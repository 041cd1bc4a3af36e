// Shutdown (engine.h, "Shutdown"): ~Engine() completes every pushed op first, including async ops completed later by
// other threads and ops pushed by ops meanwhile; an error no wait reported is written to stderr.
#include <atomic>
#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <depengine/engine/engine.h>

#include "test/engine/test_support.h"
#include "test/executors/executor_factories.h"

namespace depengine::test {
namespace {

// Atomics: counters bumped by ops are read by the test thread after a wait (WaitForAll, WaitForVar, WaitForScope), a
// join or the engine's destruction, which orders every op's writes before the read, so they are relaxed.

TEST_CASE("destroying the engine completes every pushed op", "[engine][shutdown]") {
  const int ops = static_cast<int>(sized(20000, 1000, 4000));
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("shutdown with pending ops on " + factory.name);
      Completer completer(2);  // outlives the engine: the destructor waits for completions it delivers
      std::atomic<int> done{0};
      std::uint64_t chain = 0, expected_chain = 0;
      std::thread releaser;
      {
        Engine engine(factory.options());
        const Var head = engine.NewVariable();
        std::vector<Var> vars;
        for (int i = 0; i < 16; ++i) vars.push_back(engine.NewVariable());
        HeldOp gate(engine, {}, {head});                              // released only as the engine is being destroyed
        if (!factory.takes_async) check_async_refused(engine, head);  // its async ops below are pushed with Push
        for (int i = 0; i < ops; ++i) {
          const Var v = vars[static_cast<std::size_t>(i) % vars.size()];
          switch (i % 4) {
            case 0:
              engine.Push(
                  [&chain, &done, i] {
                    chain = mix(chain, static_cast<std::uint64_t>(i));
                    done.fetch_add(1, std::memory_order_relaxed);
                  },
                  {head}, {vars[0]});
              expected_chain = mix(expected_chain, static_cast<std::uint64_t>(i));
              break;
            case 1:
              if (factory.takes_async) {
                engine.PushAsync(
                    [&completer, &done](Completion completion) {
                      completer.post([&done, completion] {
                        done.fetch_add(1, std::memory_order_relaxed);
                        completion();
                      });
                    },
                    {head}, {v});
              } else {
                engine.Push([&done] { done.fetch_add(1, std::memory_order_relaxed); }, {head}, {v});
              }
              break;
            case 2:  // pushes another op as it runs, during the destructor's wait
              engine.Push(
                  [&engine, &done, v] {
                    engine.Push([&done] { done.fetch_add(1, std::memory_order_relaxed); }, {v}, {});
                    done.fetch_add(1, std::memory_order_relaxed);
                  },
                  {}, {v});
              break;
            default:
              engine.Push([&done] { done.fetch_add(1, std::memory_order_relaxed); }, {v}, {});
          }
        }
        // The destructor below must wait for this release, which comes from another thread at any moment.
        releaser = std::thread([gate]() mutable { (void)gate.release(); });
      }
      releaser.join();
      const int expected = ops + ops / 4 + (ops % 4 > 2 ? 1 : 0);
      CHECK(done.load(std::memory_order_relaxed) == expected);
      CHECK(chain == expected_chain);
      completer.stop();
    }
  }
}

// Issue 17, item 7: a push from outside the engine's ops once its destruction has begun was accepted.
TEST_CASE("a push from outside the engine's ops during its destruction is an Error", "[engine][shutdown][misuse]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("push during destruction on " + factory.name);
      std::string refused;
      ShutdownHook hook;  // outlives the engine, so that the engine calls it
      {
        Engine engine(factory.options());
        hook = engine.AtShutdown([&] {  // called by ~Engine(), after every op completed
          try {
            engine.Push([] {}, {}, {});
          } catch (const Error& e) {
            refused = e.what();
          }
        });
      }
      CHECK_THAT(refused, Catch::Contains("Push: the engine is being destroyed"));
    }
  }
}

TEST_CASE("an error no wait reported is written to stderr at shutdown", "[engine][shutdown][errors]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("unreported error on " + factory.name);
      StderrCapture capture;
      {
        Engine engine(factory.options());
        engine.Push([] { throw OpFailure(4242); }, {}, {engine.NewVariable()});
      }
      const std::string text = capture.finish();
      CHECK_THAT(text, Catch::Contains("op failure 4242"));
    }
  }
}

TEST_CASE("an error WaitForAll reported is not reported again at shutdown", "[engine][shutdown][errors]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("reported error on " + factory.name);
      StderrCapture capture;
      {
        Engine engine(factory.options());
        engine.Push([] { throw OpFailure(4343); }, {}, {engine.NewVariable()});
        CHECK(thrown_id([&] { engine.WaitForAll(); }) == 4343);
      }
      CHECK(capture.finish().empty());
    }
  }
}

// engine.h: "An error no wait reported is written to stderr." WaitForVar is a wait, and it did report this one.
TEST_CASE("an error WaitForVar reported is not reported again at shutdown", "[engine][shutdown][errors]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("error reported by WaitForVar on " + factory.name);
      StderrCapture capture;
      {
        Engine engine(factory.options());
        const Var v = engine.NewVariable();
        engine.Push([] { throw OpFailure(4444); }, {}, {v});
        CHECK(thrown_id([&] { engine.WaitForVar(v); }) == 4444);
      }
      CHECK(capture.finish().empty());
    }
  }
}

// engine.h, "Shutdown" and "Fences": ~Engine() waits for every pushed op, and an op waiting on a fence is in flight
// until the fence is reached. A thread of the user's own that reaches it while the engine is being destroyed runs or
// issues the op (inline, stream executors) and must be done with the engine before the destructor frees it, as a
// thread that calls an async op's Completion is (EngineCore::complete_async).
TEST_CASE("a user thread may reach the wait fence of a pending op while the engine is destroyed",
          "[engine][shutdown][fences]") {
  // More rounds under the sanitizers, which are what see the race (in release the freed memory is still there).
  const int rounds = static_cast<int>(sized(200, 300, 300));
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("fence reached during shutdown on " + factory.name);
      int ran = 0;
      for (int round = 0; round < rounds; ++round) {
        Timeline timeline;  // outlives the engine and the signaller
        std::atomic<bool> op_ran{false};
        std::thread signaller;
        {
          Engine engine(factory.options());
          PushOptions options;
          options.wait_fences = {{&timeline, 1}};
          // relaxed: read after the engine is gone and the signaller joined, which order it.
          engine.Push([&op_ran] { op_ran.store(true, std::memory_order_relaxed); }, {}, {engine.NewVariable()},
                      options);
          // The destructor below must wait for the op, which this signal releases at any moment.
          signaller = std::thread([&timeline] { timeline.signal(1, {}); });
        }
        signaller.join();
        if (op_ran.load(std::memory_order_relaxed)) ++ran;
      }
      CHECK(ran == rounds);
    }
  }
}

TEST_CASE(
    "AtShutdown calls its function once, after every op completed and before the executors stop, unless cancelled",
    "[engine][shutdown]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      constexpr int kOps = 200;
      std::atomic<int> completed{0};
      int seen_at_shutdown = -1;
      int calls = 0;
      ShutdownHook kept, cancelled;
      {
        Engine engine(factory.options());
        Var v = engine.NewVariable();
        for (int i = 0; i < kOps; ++i) {
          // relaxed: read by the hook, which ~Engine calls after every op completed (ordered by the engine).
          engine.Push([&completed] { completed.fetch_add(1, std::memory_order_relaxed); }, {}, {v});
        }
        kept = engine.AtShutdown([&] {
          ++calls;
          seen_at_shutdown = completed.load(std::memory_order_relaxed);
        });
        cancelled = engine.AtShutdown([&] { ++calls; });
        CHECK(cancelled.cancel());        // before destruction: never called
        CHECK_FALSE(cancelled.cancel());  // an empty hook has nothing to cancel
      }
      CHECK(calls == 1);
      CHECK(seen_at_shutdown == kOps);
      CHECK_FALSE(kept.cancel());  // it was called
    }
  }
}

}  // namespace
}  // namespace depengine::test
