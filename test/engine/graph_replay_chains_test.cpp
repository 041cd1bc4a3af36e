// Graphs (engine/graph.h): chains, ops whose one successor waits for them alone, which a replay runs one after the
// other on the thread that ran the first, without granting them (engine/detail/graph_plan.h, Chains).
//
// - A chain runs in order in every replay, counts each mutation (Version), and runs again in the next replay, with
//   pushes on its variable between replays.
// - An op of a chain failing skips the rest of the chain in that replay only.
// - A no_skip op of a chain is told its input error; the ops after it in the chain, which share its run context, are
//   not.
// - A chain followed in one replay and granted op by op in the next (its completion made another op ready too) runs
//   each op once in each: a followed op's count, never taken down, is right for the next replay.
// - On the inline executor, a chained op runs right after its predecessor, before an op made ready earlier: the
//   chain is followed without going back to the executor.
// - Watched, a chain is granted op by op as any other: each op is told ready once to an observer, and a trace draws
//   the arrow from each op to the next.
//
// Scope: the CPU executors (inline, thread pools of 1 and 2 workers). The randomized oracles of
// graph_replay_random_test.cpp run chain-heavy graphs too.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <depengine/engine/engine.h>
#include <depengine/engine/observer.h>
#include <depengine/executors/inline_executor.h>

#include "test/engine/graph_test_support.h"
#include "test/engine/trace_file.h"

namespace depengine::test {
namespace {

TEST_CASE("a replayed chain runs in order, counts every mutation and runs again in the next replay",
          "[graph][chains]") {
  constexpr int kOps = 50;
  constexpr int kReplays = 20;
  for (const auto& factory : cpu_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("chains on " + factory.name);
      Engine engine(factory.options());
      const Var v = engine.NewVariable();
      // Written only by ops that use v, which v orders one after the other; read by the test after WaitForAll.
      std::vector<int> seen;
      std::vector<std::uint64_t> versions;
      const Graph graph = engine.Capture([&] {
        for (int i = 0; i < kOps; ++i) engine.Push([&seen, i] { seen.push_back(i); }, {}, {v});
      });
      const std::uint64_t start = engine.Version(v);
      for (int r = 0; r < kReplays; ++r) {
        engine.Replay(graph);
        // A read of v between replays: after the whole chain of this replay, before the next one.
        engine.Push(
            [&] {
              seen.push_back(-1);
              versions.push_back(engine.Version(v));
            },
            {v}, {});
      }
      engine.WaitForAll();
      std::vector<int> expected;
      std::vector<std::uint64_t> expected_versions;
      for (int r = 0; r < kReplays; ++r) {
        for (int i = 0; i < kOps; ++i) expected.push_back(i);
        expected.push_back(-1);
        expected_versions.push_back(start + static_cast<std::uint64_t>((r + 1) * kOps));
      }
      REQUIRE(seen == expected);
      REQUIRE(versions == expected_versions);
      REQUIRE(engine.Version(v) == start + static_cast<std::uint64_t>(kReplays * kOps));
    }
  }
}

TEST_CASE("an op of a replayed chain failing skips the rest of the chain in that replay only", "[graph][chains]") {
  constexpr int kOps = 12;
  constexpr int kThrower = 4;
  constexpr std::size_t kReplays = 4;
  for (const auto& factory : cpu_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("a failing chain on " + factory.name);
      Engine engine(factory.options());
      const Var v = engine.NewVariable();
      std::vector<std::vector<int>> ran(kReplays);  // per replay, the ops that ran, in order (v orders them)
      ReplayIndex slot(kReplays);
      const Graph graph = engine.Capture([&] {
        for (int i = 0; i < kOps; ++i) {
          engine.Push(
              [&, i](const RunContext& ctx) {
                const auto k = slot(ctx);
                if (!k) return;
                ran[*k].push_back(i);
                if (i == kThrower && *k == 1) throw OpFailure(7);
              },
              {}, {v});
        }
      });
      for (std::size_t r = 0; r < kReplays; ++r) {
        engine.Replay(graph);
        if (r == 1) {
          // The failure poisons v: the wait rethrows it (and WaitForAll has nothing more to report); the next replay's
          // first op mutates v, and runs clean.
          REQUIRE(thrown_id([&] { engine.WaitForVar(v); }) == 7);
          REQUIRE_NOTHROW(engine.WaitForAll());
        }
      }
      engine.WaitForAll();
      REQUIRE(slot.out_of_range() == 0);
      std::vector<int> all(kOps), up_to_thrower(kThrower + 1);
      for (int i = 0; i < kOps; ++i) all[static_cast<std::size_t>(i)] = i;
      for (int i = 0; i <= kThrower; ++i) up_to_thrower[static_cast<std::size_t>(i)] = i;
      REQUIRE(ran[0] == all);
      REQUIRE(ran[1] == up_to_thrower);
      REQUIRE(ran[2] == all);
      REQUIRE(ran[3] == all);
    }
  }
}

TEST_CASE("a chain granted op by op in one replay and followed in the next runs each op once in each",
          "[graph][chains]") {
  for (const auto& factory : cpu_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("a chain followed and granted on " + factory.name);
      Engine engine(factory.options());
      const Var u = engine.NewVariable(), v = engine.NewVariable();
      std::atomic<int> a{0}, b{0}, w{0};
      // `b` is chained to `a` (v's next writer). `a` reads u: its completion ends the graph's read of u, which grants a
      // writer of u pushed after the replay, if one waits. Its completion then made that writer ready as well, so it
      // grants `b` and hands it to the executor, where in the other replays it runs `b` itself without a grant.
      const Graph graph = engine.Capture([&] {
        engine.Push([&] { a.fetch_add(1, std::memory_order_relaxed); }, {u}, {v});
        engine.Push([&] { b.fetch_add(1, std::memory_order_relaxed); }, {}, {v});
      });
      constexpr int kReplays = 6;
      for (int r = 0; r < kReplays; ++r) {
        if (r % 2 == 0) {
          engine.Replay(graph);
        } else {
          HeldOp held(engine, {}, {u});  // holds `a` back until the writer of u is pushed behind it
          engine.Replay(graph);
          engine.Push([&] { w.fetch_add(1, std::memory_order_relaxed); }, {}, {u});
          REQUIRE(held.release());
        }
        engine.WaitForAll();
        REQUIRE(a.load(std::memory_order_relaxed) == r + 1);
        REQUIRE(b.load(std::memory_order_relaxed) == r + 1);
        REQUIRE(w.load(std::memory_order_relaxed) == (r + 1) / 2);
      }
    }
  }
}

TEST_CASE("in a replayed chain, a no_skip op's input error is told to that op alone", "[graph][chains][errors]") {
  constexpr int kReplays = 3;
  for (const auto& factory : cpu_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("input errors in a chain on " + factory.name);
      Engine engine(factory.options());
      const Var bad = engine.NewVariable(), good = engine.NewVariable(), out = engine.NewVariable();
      engine.Push([] { throw OpFailure(31); }, {}, {bad});
      // What each op of the chain was told in each replay: the id of its input error (0: none), and the variable.
      struct Told {
        int error = -2;
        Var var;
      };
      std::vector<std::vector<Told>> told(3);
      auto tell = [&told](int op) {
        return [&told, op](const RunContext& ctx) {
          const int id = ctx.input_error == nullptr ? 0 : thrown_id([&] { std::rethrow_exception(*ctx.input_error); });
          told[static_cast<std::size_t>(op)].push_back({id, ctx.input_error_var});
        };
      };
      // out chains the three: the second and the third wait for the one before alone. Only the first reads.
      const Graph graph = engine.Capture([&] {
        engine.Push(tell(0), {good, bad}, {out}, {.no_skip = true});
        engine.Push(tell(1), {}, {out}, {.no_skip = true});
        engine.Push(tell(2), {}, {out});
      });
      for (int r = 0; r < kReplays; ++r) engine.Replay(graph);
      CHECK_NOTHROW(engine.WaitForVar(out));
      for (std::size_t op = 0; op < told.size(); ++op) {
        INFO("op " << op);
        REQUIRE(told[op].size() == static_cast<std::size_t>(kReplays));
        for (const Told& t : told[op]) {
          CHECK(t.error == (op == 0 ? 31 : 0));
          CHECK(t.var == (op == 0 ? bad : Var{}));
        }
      }
      CHECK(thrown_id([&] { engine.WaitForVar(bad); }) == 31);
    }
  }
}

TEST_CASE("on the inline executor, a replayed chained op runs right after its predecessor, before ops ready earlier",
          "[graph][chains]") {
  EngineOptions options;
  options.executors.push_back(std::make_unique<InlineExecutor>());
  Engine engine(std::move(options));
  const Var x = engine.NewVariable(), a = engine.NewVariable(), c = engine.NewVariable();
  std::vector<std::string> order;  // the inline executor runs every op on the replaying thread
  // x's writer makes `a` and `c` ready at once, `a` first (it was captured first); `b`, chained to `a` (the next
  // writer of a, and nothing else), runs right after it. Granted and handed back to the executor, it would queue
  // behind `c`.
  const Graph graph = engine.Capture([&] {
    engine.Push([&] { order.emplace_back("x"); }, {}, {x});
    engine.Push([&] { order.emplace_back("a"); }, {x}, {a});
    engine.Push([&] { order.emplace_back("c"); }, {x}, {c});
    engine.Push([&] { order.emplace_back("b"); }, {}, {a});
  });
  for (int r = 0; r < 3; ++r) {
    order.clear();
    engine.Replay(graph);
    engine.WaitForAll();
    REQUIRE(order == std::vector<std::string>{"x", "a", "b", "c"});
  }
}

// Counts each op's events by replay and name; checks their order per op.
class ChainObserver final : public Observer {
 public:
  void OnReady(const OpEvent& op) noexcept override { step(op, 0); }
  void OnStart(const OpEvent& op) noexcept override { step(op, 1); }
  void OnEnd(const OpEvent& op) noexcept override { step(op, 2); }
  void OnThreadStart(const ThreadEvent& /*thread*/) noexcept override {}
  void OnThreadStop(const ThreadEvent& /*thread*/) noexcept override {}
  [[nodiscard]] bool Timed() const noexcept override { return false; }

  // Ops told ready, started and ended, in that order and once each.
  [[nodiscard]] int complete() const {
    std::lock_guard lock(mutex_);
    return static_cast<int>(std::count(steps_.begin(), steps_.end(), 3));
  }
  [[nodiscard]] int out_of_order() const {
    std::lock_guard lock(mutex_);
    return out_of_order_;
  }

 private:
  void step(const OpEvent& op, int expected) noexcept {
    std::lock_guard lock(mutex_);
    if (op.id >= steps_.size()) steps_.resize(op.id + 1, 0);  // ids are small: the test's ops only
    int& steps = steps_[op.id];
    if (steps != expected) ++out_of_order_;
    steps = expected + 1;
  }

  mutable std::mutex mutex_;
  std::vector<int> steps_;  // per op id: the events it has had
  int out_of_order_ = 0;
};

TEST_CASE("an observed replayed chain tells each op ready, started and ended once", "[graph][chains][observer]") {
  constexpr int kOps = 30;
  constexpr int kReplays = 5;
  for (const auto& factory : cpu_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("an observed chain on " + factory.name);
      ChainObserver observer;
      EngineOptions options = factory.options();
      options.observers.push_back(&observer);
      Engine engine(std::move(options));
      const Var v = engine.NewVariable();
      const Graph graph = engine.Capture([&] {
        for (int i = 0; i < kOps; ++i) engine.Push([] {}, {}, {v});
      });
      for (int r = 0; r < kReplays; ++r) engine.Replay(graph);
      engine.WaitForAll();
      REQUIRE(observer.out_of_order() == 0);
      REQUIRE(observer.complete() == kOps * kReplays);
    }
  }
}

TEST_CASE("a traced replayed chain draws an arrow from each op to the next", "[graph][chains][trace]") {
  constexpr int kReplays = 3;
  for (const auto& factory : cpu_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("a traced chain on " + factory.name);
      Engine engine(factory.options());
      const Var v = engine.NewVariable();
      const std::string path = temporary_trace_path("graph-chains");
      engine.StartTrace(path);
      const Graph graph = engine.Capture([&] {
        for (const char* name : {"first", "second", "third"}) engine.Push([] {}, {}, {v}, {.name = name});
      });
      for (int r = 0; r < kReplays; ++r) engine.Replay(graph);
      engine.WaitForAll();
      engine.StopTrace();
      const TraceFile trace = read_trace(path);
      std::remove(path.c_str());
      const std::vector<std::pair<std::string, std::string>> arrows = named_arrows(trace);
      // Inside each replay, first -> second -> third. (A replay's first op is granted through its join in v's queue,
      // which the trace draws no arrow through.)
      std::vector<std::pair<std::string, std::string>> expected;
      for (int r = 0; r < kReplays; ++r) {
        const std::string replay = " (replay " + std::to_string(r) + ")";
        expected.emplace_back("first" + replay, "second" + replay);
        expected.emplace_back("second" + replay, "third" + replay);
      }
      std::sort(expected.begin(), expected.end());
      REQUIRE(arrows == expected);
    }
  }
}

}  // namespace
}  // namespace depengine::test
