// Variables of a graph (engine/graph.h): a variable made and deleted inside a capture belongs to the graph. Each replay
// uses it and ends it clean; its deleter runs once, when the Graph is destroyed, after every replay; every handle to
// it is dead from the captured deletion on. What a graph holds when its engine goes first
// (engine/detail/graph_lifetime.h). And a Graph destroyed while replays of it are queued or running: they run to the
// end (ASan checks that the ops' functions stay alive).
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <depengine/engine/engine.h>

#include "test/engine/graph_test_support.h"
#include "test/engine/test_support.h"
#include "test/executors/executor_factories.h"

namespace depengine::test {
namespace {

// Atomics: the counters here are bumped by ops and read by the test thread after a wait (WaitForAll, WaitForVar,
// WaitForScope) or a join, which orders every op's writes before the read, so they are relaxed.

using Catch::Contains;

// Host streams that record a graph of stream ops once and relaunch it, as CUDA and HIP do (HostStreamOptions).
ExecutorFactory recording_host_stream_factory() {
  StreamBackendFactory backend = host_backend_factory();
  backend.name = "host-recording";
  backend.make = [] { return std::make_unique<HostStreamBackend>(HostStreamOptions{.records_work = true}); };
  return stream_factory(backend);
}

// The executors graphs run on: the CPU ones, and host streams (where the graph is one of stream ops). With `recording`,
// also host streams that record (their later replays do not call the functions, so only tests whose functions do no
// work of their own beyond the first replay that runs them use it).
std::vector<ExecutorFactory> graph_factories(bool recording = false) {
  std::vector<ExecutorFactory> factories = {inline_factory(), threadpool_factory(1), threadpool_factory(2),
                                            host_stream_factory()};
  if (recording) factories.push_back(recording_host_stream_factory());
  return factories;
}

TEST_CASE("a variable made and deleted in a capture: every replay uses it; its deleter runs once, at ~Graph",
          "[graph][graph-vars]") {
  for (const auto& factory : graph_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("graph variable on " + factory.name);
      Engine engine(factory.options());
      const Var out = engine.NewVariable();
      std::vector<std::int64_t> results;  // written by the readers, which `out` orders
      std::int64_t temp = -1;             // the temporary's data, written and read by ops that name it
      std::size_t results_at_deletion = 0;
      std::atomic<int> deleted{0};
      Var t;
      {
        Graph graph = engine.Capture([&] {
          t = engine.NewVariable();
          engine.Push([&](const RunContext& ctx) { temp = 10 * ctx.replay; }, {}, {t});
          engine.Push([&] { results.push_back(temp + 1); }, {t}, {out});
          engine.DeleteVariable(t, [&] {
            results_at_deletion = results.size();
            deleted.fetch_add(1, std::memory_order_relaxed);
          });
          CHECK_THAT(error_message([&] { engine.Push([] {}, {t}, {}); }), Contains("deleted"));
        });
        CHECK(graph.size() == 3);
        // Dead outside the graph too, from the captured deletion on.
        CHECK_THAT(error_message([&] { engine.Push([] {}, {t}, {}); }), Contains("deleted"));
        CHECK_THAT(error_message([&] { engine.DeleteVariable(t); }), Contains("deleted"));
        for (int k = 0; k < 5; ++k) engine.Replay(graph);
        engine.WaitForAll();
        CHECK(deleted.load(std::memory_order_relaxed) == 0);
      }
      engine.WaitForAll();
      CHECK(deleted.load(std::memory_order_relaxed) == 1);
      CHECK(results == std::vector<std::int64_t>{1, 11, 21, 31, 41});
      CHECK(results_at_deletion == 5);  // ordered after every replay's reader
      CHECK(engine.Version(out) == 5);
    }
  }
}

TEST_CASE("a replay that leaves an error on a graph variable does not pass it to the next replay",
          "[graph][graph-vars][errors]") {
  for (const auto& factory : graph_factories(/*recording=*/true)) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("graph variable errors on " + factory.name);
      Engine engine(factory.options());
      std::atomic<int> written{0}, read{0};
      Graph graph = engine.Capture([&] {
        const Var t = engine.NewVariable();
        engine.Push(
            [&](const RunContext& ctx) {
              if (ctx.replay == 0) throw std::runtime_error("the first replay's writer fails");
              written.fetch_add(1, std::memory_order_relaxed);
            },
            {}, {t});
        engine.Push([&] { read.fetch_add(1, std::memory_order_relaxed); }, {t}, {});
        engine.DeleteVariable(t);
      });
      // No wait in between (a WaitForAll would clear the error itself): the second replay's writer finds its
      // variable clean only because the first replay ended it so. Recording host streams fail the first replay whole
      // (its writer throws while being recorded) and record the second.
      engine.Replay(graph);
      engine.Replay(graph);
      CHECK_THROWS_WITH(engine.WaitForAll(), Contains("the first replay's writer fails"));
      CHECK(written.load(std::memory_order_relaxed) == 1);
      CHECK(read.load(std::memory_order_relaxed) ==
            1);  // the first replay's reader was skipped: its input carried the error
    }
  }
}

TEST_CASE("graph variables: deletions a graph cannot own are refused; abandoned captures delete what they made",
          "[graph][graph-vars][misuse]") {
  for (const auto& factory : graph_factories(/*recording=*/true)) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("graph variable misuse on " + factory.name);
      Engine engine(factory.options());
      const Var before = engine.NewVariable();
      std::atomic<int> deleted{0};
      SECTION("a variable made before the capture") {
        Graph graph = engine.Capture([&] {
          CHECK_THAT(error_message([&] {
                       engine.DeleteVariable(before, [&] { deleted.fetch_add(1, std::memory_order_relaxed); });
                     }),
                     Contains("DeleteVariable inside Capture") && Contains("made before the capture"));
          engine.Push([] {}, {}, {before});  // alive: the refused deletion did nothing
        });
        engine.Replay(graph);
        engine.WaitForAll();
        CHECK(engine.Version(before) == 1);
      }
      SECTION("a body that throws after deleting a variable it made: the variable is deleted for real") {
        CHECK_THROWS_WITH(engine.Capture([&] {
          const Var t = engine.NewVariable();
          engine.Push([] {}, {}, {t});
          engine.DeleteVariable(t, [&] { deleted.fetch_add(1, std::memory_order_relaxed); });
          throw std::runtime_error("body gives up");
        }),
                          Contains("body gives up"));
        engine.WaitForAll();
        CHECK(deleted.load(std::memory_order_relaxed) == 1);
      }
      SECTION("a capture refused at its end (larger than max_in_flight): its variables are deleted for real") {
        if (factory.name.find("stream") != std::string::npos) return;  // graphs of stream ops replay as one op
        EngineOptions options = factory.options();
        options.max_in_flight = 2;
        Engine small(std::move(options));
        CHECK_THROWS_WITH(small.Capture([&] {
          const Var t = small.NewVariable();
          small.Push([] {}, {}, {t});
          small.Push([] {}, {t}, {});
          small.DeleteVariable(t, [&] { deleted.fetch_add(1, std::memory_order_relaxed); });
        }),
                          Contains("max_in_flight"));
        small.WaitForAll();
        CHECK(deleted.load(std::memory_order_relaxed) == 1);
      }
      SECTION("assigning over a graph deletes the variables it owned") {
        Graph graph = engine.Capture([&] {
          const Var t = engine.NewVariable();
          engine.Push([] {}, {}, {t});
          engine.DeleteVariable(t, [&] { deleted.fetch_add(1, std::memory_order_relaxed); });
        });
        engine.Replay(graph);
        graph = engine.Capture([&] { engine.Push([] {}, {}, {before}); });
        engine.WaitForAll();
        CHECK(deleted.load(std::memory_order_relaxed) == 1);
        CHECK(graph.size() == 1);
      }
    }
  }
}

TEST_CASE("replays of a graph from two threads at once are ordered by its variables", "[graph][graph-vars][threads]") {
  for (const auto& factory : graph_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("concurrent replays of a graph variable on " + factory.name);
      Engine engine(factory.options());
      std::int64_t temp = -1;
      std::atomic<int> mismatches{0}, reads{0};
      Graph graph = engine.Capture([&] {
        const Var t = engine.NewVariable();
        engine.Push([&](const RunContext& ctx) { temp = ctx.replay; }, {}, {t});
        engine.Push(
            [&](const RunContext& ctx) {
              if (temp != ctx.replay) mismatches.fetch_add(1, std::memory_order_relaxed);
              reads.fetch_add(1, std::memory_order_relaxed);
            },
            {t}, {});
        engine.DeleteVariable(t);
      });
      constexpr int kPerThread = 50;
      std::thread other([&] {
        for (int k = 0; k < kPerThread; ++k) engine.Replay(graph);
      });
      for (int k = 0; k < kPerThread; ++k) engine.Replay(graph);
      other.join();
      engine.WaitForAll();
      CHECK(reads.load(std::memory_order_relaxed) == 2 * kPerThread);
      CHECK(mismatches.load(std::memory_order_relaxed) == 0);  // each reader saw its own replay's write
    }
  }
}

TEST_CASE("a graph that outlives its engine lets go of its functions at the engine's shutdown; deleters never run",
          "[graph][graph-vars][lifetime]") {
  for (const auto& factory : graph_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("graph outliving its engine on " + factory.name);
      auto held = std::make_shared<int>(7);
      const std::weak_ptr<int> watch = held;
      std::atomic<int> deleted{0}, ran{0};
      Graph graph;
      {
        Engine engine(factory.options());
        graph = engine.Capture([&] {
          const Var t = engine.NewVariable();
          engine.Push([&ran, held] { ran.fetch_add(*held, std::memory_order_relaxed); }, {}, {t});
          engine.DeleteVariable(t, [&] { deleted.fetch_add(1, std::memory_order_relaxed); });
        });
        held.reset();
        engine.Replay(graph);
        engine.WaitForAll();
        CHECK(ran.load(std::memory_order_relaxed) == 7);
        CHECK_FALSE(watch.expired());  // the graph's function holds it
      }
      CHECK(watch.expired());  // dropped at the engine's shutdown, while the graph lives on
      CHECK(graph.size() == 2);
      graph = Graph{};
      CHECK(deleted.load(std::memory_order_relaxed) == 0);
    }
  }
}

// The functions own heap data (a string and a vector, copied into the graph): a replay that used the graph's storage
// after the Graph was destroyed would read freed memory (ASan) or wrong values.
TEST_CASE("a Graph destroyed while its replays wait for their inputs: they run to the end", "[graph][lifetime]") {
  constexpr std::int64_t kReplays = 5;
  for (const auto& factory : cpu_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("graph destroyed with queued replays on " + factory.name);
      Engine engine(factory.options());
      const Var z = engine.NewVariable(), v = engine.NewVariable();
      std::uint64_t value = 0;
      const std::string text(200, 'g');
      const std::vector<std::uint64_t> table{1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144};
      auto first = [](std::uint64_t& out, const std::string& s, std::int64_t k) {
        for (char c : s) out = mix(out, static_cast<std::uint64_t>(c));
        out = mix(out, static_cast<std::uint64_t>(k));
      };
      auto second = [](std::uint64_t& out, const std::vector<std::uint64_t>& t, std::int64_t k) {
        for (std::uint64_t x : t) out = mix(out, x + static_cast<std::uint64_t>(k));
      };
      HeldOp held(engine, {}, {z});
      {
        Graph graph = engine.Capture([&] {
          engine.Push([&value, first, text](const RunContext& ctx) { first(value, text, ctx.replay); }, {z}, {v});
          engine.Push([&value, second, table](const RunContext& ctx) { second(value, table, ctx.replay); }, {}, {v});
        });
        for (std::int64_t k = 0; k < kReplays; ++k) engine.Replay(graph);
      }  // destroyed with every op of its replays queued behind `held`
      const bool released = held.release();
      engine.WaitForAll();
      std::uint64_t expected = 0;
      for (std::int64_t k = 0; k < kReplays; ++k) {
        first(expected, text, k);
        second(expected, table, k);
      }
      CHECK(released);
      CHECK(value == expected);
    }
  }
}

// An op of the replay is running (held at a gate) when the Graph is destroyed. On the pools: on the inline executor
// the op would run inside Replay, on the thread that would destroy the graph.
TEST_CASE("a Graph destroyed while an op of its replay runs: the replay runs to the end", "[graph][lifetime]") {
  for (const auto& factory : threadpool_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("graph destroyed with a running replay on " + factory.name);
      Engine engine(factory.options());
      const Var v = engine.NewVariable(), w = engine.NewVariable();
      OpGate gate;
      std::string seen_first, seen_second;  // written by the ops, which v orders
      const std::string text(300, 'r');
      auto graph = std::make_unique<Graph>(engine.Capture([&] {
        engine.Push(
            [&gate, &seen_first, text] {
              gate.pass();
              seen_first = text;
            },
            {}, {v});
        engine.Push([&seen_second, text] { seen_second = text + "!"; }, {v}, {v, w});
      }));
      engine.Replay(*graph);
      engine.Replay(*graph);
      const bool reached = gate.reached.wait();
      graph.reset();
      gate.open.set();
      engine.WaitForAll();
      CHECK(reached);
      CHECK(seen_first == text);
      CHECK(seen_second == text + "!");
      CHECK(engine.Version(w) == 2);
      CHECK_FALSE(gate.timed_out.load(std::memory_order_relaxed));
    }
  }
}

}  // namespace
}  // namespace depengine::test
