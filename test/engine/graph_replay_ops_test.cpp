// Graphs (engine/graph.h): what a replayed op may do, and what it looks like from outside.
//
// - Nested pushes: an op of a replay may push; what it pushes is an ordinary op (RunContext::replay == -1) ordered as
//   any push from inside an op; a replay from inside an op does not wait for the bound.
// - Async ops of a graph complete through their Completion, from any thread, and fail, or refuse a second call, as
//   pushed ones do.
// - Replayed ops keep their push options (executor, name), appear in traces named with their replay (with arrows
//   among the ops of one replay), and show in InFlightReport while they wait.
//
// Scope: the CPU executors (inline, thread pools of 1 and 2 workers).
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <depengine/engine/engine.h>

#include "test/engine/graph_test_support.h"
#include "test/engine/trace_file.h"

namespace depengine::test {
namespace {

// Atomics: the counters here are bumped by ops and read by the test thread after a wait (WaitForAll, WaitForVar,
// WaitForScope) or a join, which orders every op's writes before the read, so they are relaxed.

using Catch::Contains;

TEST_CASE("ops of a replay may push: the children are ordinary ops, ordered as pushes from inside an op",
          "[graph][nested]") {
  constexpr std::int64_t kReplays = 20;
  for (const auto& factory : cpu_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("pushes from replayed ops on " + factory.name);
      Engine engine(factory.options());

      // Back to back, no waits. Each parent mutates v, so the parents run one at a time in replay order and push
      // their children in that order; the children are ordered on w by it.
      const Var v = engine.NewVariable(), w = engine.NewVariable(), u = engine.NewVariable();
      const Var z = engine.NewVariable();
      std::uint64_t z_value = 0;
      engine.Push([&] { z_value = 43; }, {}, {z});
      std::uint64_t v_value = 0;
      std::vector<std::int64_t> children;  // written by the children, which w orders
      std::atomic<int> child_not_pushed{0}, child_saw_wrong_z{0}, u_ran{0};
      Graph graph = engine.Capture([&] {
        engine.Push(
            [&](const RunContext& ctx) {
              v_value = mix(v_value, static_cast<std::uint64_t>(ctx.replay));
              const std::int64_t k = ctx.replay;
              engine.Push(
                  [&children, &child_not_pushed, &child_saw_wrong_z, &z_value, k](const RunContext& child) {
                    if (child.replay != -1) child_not_pushed.fetch_add(1, std::memory_order_relaxed);
                    if (z_value != 43) child_saw_wrong_z.fetch_add(1, std::memory_order_relaxed);
                    children.push_back(k);
                  },
                  {z}, {w});
            },
            {}, {v});
        engine.Push([&] { u_ran.fetch_add(1, std::memory_order_relaxed); }, {}, {u});
      });
      for (std::int64_t k = 0; k < kReplays; ++k) engine.Replay(graph);
      engine.WaitForAll();  // waits for the children too
      std::vector<std::int64_t> expected_children;
      std::uint64_t expected_v = 0;
      for (std::int64_t k = 0; k < kReplays; ++k) {
        expected_children.push_back(k);
        expected_v = mix(expected_v, static_cast<std::uint64_t>(k));
      }
      CHECK(children == expected_children);
      CHECK(v_value == expected_v);
      CHECK(child_not_pushed.load(std::memory_order_relaxed) == 0);
      CHECK(child_saw_wrong_z.load(std::memory_order_relaxed) == 0);
      CHECK(u_ran.load(std::memory_order_relaxed) == kReplays);

      // A child on the parent's own variable runs after the parent and sees its write. (A second graph: its replays
      // count from 0 again.)
      const Var b = engine.NewVariable();
      std::uint64_t b_value = 0;
      std::vector<std::uint64_t> child_saw;  // written by the children, which b orders
      Graph second = engine.Capture([&] {
        engine.Push(
            [&](const RunContext& ctx) {
              const auto k = static_cast<std::uint64_t>(ctx.replay);
              engine.Push(
                  [&b_value, &child_saw, k] {
                    child_saw.push_back(b_value);
                    b_value = mix(b_value, 1000 + k);
                  },
                  {}, {b});
              b_value = mix(b_value, k);  // after the push: the child must still see it
            },
            {}, {b});
      });
      std::vector<std::uint64_t> expected_saw;
      std::uint64_t expected_b = 0;
      for (std::uint64_t k = 0; k < 5; ++k) {
        engine.Replay(second);
        engine.WaitForAll();
        expected_b = mix(expected_b, k);
        expected_saw.push_back(expected_b);
        expected_b = mix(expected_b, 1000 + k);
      }
      CHECK(child_saw == expected_saw);
      CHECK(b_value == expected_b);
    }
  }
}

// A replay from inside a running op does not wait for the bound (the op it would wait for may be the one replaying):
// with max_in_flight 3, an op replays a 3-op graph twice. Its ops queue behind the replaying op on v.
TEST_CASE("a replay from inside an op is exempt from the bound and orders after the op", "[graph][nested]") {
  for (const auto& factory : cpu_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("replay from inside an op on " + factory.name);
      Engine engine(factory.options(3));
      const Var v = engine.NewVariable();
      std::uint64_t value = 0;
      Graph graph = engine.Capture([&] {
        for (std::uint64_t j = 0; j < 3; ++j) {
          engine.Push(
              [&value, j](const RunContext& ctx) {
                value = mix(value, static_cast<std::uint64_t>(ctx.replay) * 10 + j);
              },
              {}, {v});
        }
      });
      std::string message = "(not run)";
      engine.Push(
          [&] {
            message = error_message([&] {
              engine.Replay(graph);
              engine.Replay(graph);
            });
            value = 1;  // after the replays: their ops must still see it
          },
          {}, {v});
      engine.WaitForAll();
      std::uint64_t expected = 1;
      for (std::uint64_t k = 0; k < 2; ++k) {
        for (std::uint64_t j = 0; j < 3; ++j) expected = mix(expected, k * 10 + j);
      }
      CHECK(message == "(threw nothing)");
      CHECK(value == expected);
      CHECK(engine.Version(v) == 7);
    }
  }
}

// Replayed ops do not appear in traces (Engine::Replay), and neither do captured ones: a trace of pushes interleaved
// with replays holds a slice per pushed op only, and every arrow joins two of them (a pushed op whose completion
// grants a replay must not draw an arrow to it). A replay waiting in a queue shows in InFlightReport.
TEST_CASE("traces and in-flight reports with replays", "[graph][trace]") {
  constexpr int kRounds = 5;
  for (const auto& factory : cpu_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("traces with replays on " + factory.name);
      Engine engine(factory.options());
      const Var v0 = engine.NewVariable(), v1 = engine.NewVariable(), v2 = engine.NewVariable();
      const std::string path = temporary_trace_path("graph-replays");
      engine.StartTrace(path);
      HeldOp held(engine, {}, {v0}, {.name = "held"});
      std::atomic<int> graph_ran{0}, pushed_ran{0};
      Graph graph = engine.Capture([&] {
        engine.Push([&] { graph_ran.fetch_add(1, std::memory_order_relaxed); }, {v0}, {v1}, {.name = "graph op a"});
        engine.Push([&] { graph_ran.fetch_add(1, std::memory_order_relaxed); }, {v1}, {v2}, {.name = "graph op b"});
      });
      for (int i = 0; i < kRounds; ++i) {
        engine.Replay(graph);
        engine.Push([&] { pushed_ran.fetch_add(1, std::memory_order_relaxed); }, {v2}, {v0},
                    {.name = "pushed " + std::to_string(i)});
      }
      const std::string report = engine.InFlightReport();
      const bool released = held.release();
      engine.WaitForAll();
      engine.StopTrace();
      CHECK(released);
      CHECK(graph_ran.load(std::memory_order_relaxed) == 2 * kRounds);
      CHECK(pushed_ran.load(std::memory_order_relaxed) == kRounds);
      CHECK_THAT(report, Contains("replay", Catch::CaseSensitive::No));
      const TraceFile trace = read_trace(path);
      std::remove(path.c_str());
      std::vector<std::string> names;
      for (const auto& [op, slice] : trace.slices) names.push_back(slice.name);
      std::sort(names.begin(), names.end());
      std::vector<std::string> expected{"held"};
      for (int i = 0; i < kRounds; ++i) {
        expected.push_back("pushed " + std::to_string(i));
        expected.push_back("graph op a (replay " + std::to_string(i) + ")");
        expected.push_back("graph op b (replay " + std::to_string(i) + ")");
      }
      std::sort(expected.begin(), expected.end());
      CHECK(names == expected);
      for (const auto& [op, slice] : trace.slices) {
        if (slice.name.rfind("graph op a", 0) == 0) {
          CHECK(slice.reads == "v0");
          CHECK(slice.mutates == "v1");
        }
      }
      // Arrows: a -> b inside each replay (b's last grant is a's), and across each replay's boundary, both ways:
      // what was pushed before it on v0 releases its a (held, then pushed i - 1), and its b releases pushed i (v2).
      const std::vector<std::pair<std::string, std::string>> arrows = named_arrows(trace);
      std::vector<std::pair<std::string, std::string>> expected_arrows;
      for (int i = 0; i < kRounds; ++i) {
        const std::string replay = " (replay " + std::to_string(i) + ")";
        expected_arrows.emplace_back(i == 0 ? "held" : "pushed " + std::to_string(i - 1), "graph op a" + replay);
        expected_arrows.emplace_back("graph op a" + replay, "graph op b" + replay);
        expected_arrows.emplace_back("graph op b" + replay, "pushed " + std::to_string(i));
      }
      std::sort(expected_arrows.begin(), expected_arrows.end());
      CHECK(arrows == expected_arrows);
    }
  }
}

// Async ops in a graph: each replay's async op hands its Completion to a completer thread, which does the op's work
// and completes it after the function has returned; the graph's values must equal serial execution. An async op that
// completes inside its function, one whose function throws before completing (its error poisons what it mutates), and
// a second call of a replayed op's Completion behave as for pushed ops.
TEST_CASE("async ops of a graph complete through their Completion, from any thread", "[graph][async]") {
  constexpr int kReplays = 50;
  for (const auto& factory : cpu_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("async ops in a graph on " + factory.name);
      Engine engine(factory.options());
      const Var a = engine.NewVariable(), b = engine.NewVariable(), c = engine.NewVariable();
      std::uint64_t va = 1, vb = 2, vc = 3;
      std::mutex mutex;
      std::condition_variable wake;
      std::vector<std::function<void()>> pending;  // guarded by mutex
      bool stop = false;                           // guarded by mutex
      std::thread completer([&] {
        std::unique_lock lock(mutex);
        for (;;) {
          wake.wait(lock, [&] { return stop || !pending.empty(); });
          if (pending.empty()) return;
          std::function<void()> work = std::move(pending.front());
          pending.erase(pending.begin());
          lock.unlock();
          work();
          lock.lock();
        }
      });
      Graph graph = engine.Capture([&] {
        engine.Push([&](const RunContext& ctx) { va = va * 3 + static_cast<std::uint64_t>(ctx.replay); }, {}, {a});
        engine.PushAsync(
            [&](Completion done) {
              std::lock_guard lock(mutex);
              pending.push_back([&, done] {
                vb = vb * 7 + va;
                done();
              });
              wake.notify_one();
            },
            {a}, {b});
        engine.PushAsync(
            [&](Completion done) {
              vc = vc * 5 + vb;
              done();  // inside the function
            },
            {b}, {c});
        engine.Push([&] { va += vc; }, {c}, {a});
      });
      REQUIRE(graph.size() == 4);
      for (int k = 0; k < kReplays; ++k) engine.Replay(graph);
      engine.WaitForAll();
      std::uint64_t sa = 1, sb = 2, sc = 3;
      for (int k = 0; k < kReplays; ++k) {
        sa = sa * 3 + static_cast<std::uint64_t>(k);
        sb = sb * 7 + sa;
        sc = sc * 5 + sb;
        sa += sc;
      }
      CHECK(va == sa);
      CHECK(vb == sb);
      CHECK(vc == sc);
      CHECK(engine.Version(b) == kReplays);

      // A function that throws before completing: its op fails, the error poisons what it mutates.
      std::optional<Completion> kept;
      Graph failing = engine.Capture([&] {
        engine.PushAsync(
            [&](const RunContext& ctx, Completion done) {
              if (ctx.replay == 1) throw std::runtime_error("async op failed");
              kept = done;
              done();
            },
            {}, {b}, {.name = "async"});
      });
      engine.Replay(failing);
      engine.WaitForVar(b);
      REQUIRE(kept.has_value());
      CHECK_THROWS_AS((*kept)(), Error);  // called twice
      engine.Replay(failing);
      CHECK_THROWS_WITH(engine.WaitForVar(b), "async op failed");
      engine.Replay(failing);
      CHECK_NOTHROW(engine.WaitForVar(b));
      {
        std::lock_guard lock(mutex);
        stop = true;
      }
      wake.notify_one();
      completer.join();
    }
  }
}

// A replayed op keeps the options it was captured with: its executor, its name.
TEST_CASE("replayed ops keep their push options", "[graph][options]") {
  Watchdog watchdog("graph options");
  Engine engine(mixed_options({threadpool_factory(2), inline_factory()}));
  const Var v = engine.NewVariable();
  std::vector<const Executor*> executors;  // written by the ops, which v orders
  std::vector<std::string> names;
  std::vector<std::int64_t> replays;
  auto record = [&](const RunContext& ctx) {
    executors.push_back(ctx.executor);
    names.emplace_back(ctx.name);
    replays.push_back(ctx.replay);
  };
  Graph graph = engine.Capture([&] {
    engine.Push(record, {}, {v}, {.context = {.executor = 1}, .name = "on inline"});
    engine.Push(record, {}, {v}, {.name = "on the pool"});
  });
  engine.Replay(graph);
  engine.Replay(graph);
  engine.WaitForAll();
  const std::vector<const Executor*> expected_executors{&engine.executor(1), &engine.executor(0), &engine.executor(1),
                                                        &engine.executor(0)};
  CHECK(executors == expected_executors);
  CHECK(names == std::vector<std::string>{"on inline", "on the pool", "on inline", "on the pool"});
  CHECK(replays == std::vector<std::int64_t>{0, 0, 1, 1});
}

}  // namespace
}  // namespace depengine::test
