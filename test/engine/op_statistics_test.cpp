// Per-name statistics (engine/op_statistics.h): their counts sum to the ops that ended, by name and by outcome; their
// times are consistent (p50 <= p99 <= max <= total); DEPENGINE_PROFILE=1 turns them on and prints the table at the
// engine's destruction.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <depengine/engine/engine.h>
#include <depengine/engine/op_statistics.h>

#include "test/engine/test_support.h"
#include "test/executors/executor_factories.h"

namespace depengine::test {
namespace {

using std::chrono::nanoseconds;

// The row named `name`, or a row with an empty name if there is none.
OpNameStatistics row_of(const StatisticsTable& table, const std::string& name) {
  for (const OpNameStatistics& row : table.ops) {
    if (row.name == name) return row;
  }
  return {};
}

// A function that keeps its thread busy for about `time`: ops whose run time is long enough to show in the table.
void spin_for(nanoseconds time) {
  const auto until = std::chrono::steady_clock::now() + time;
  while (std::chrono::steady_clock::now() < until) {
  }
}

TEST_CASE("statistics count every op by name and outcome", "[engine][statistics]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("statistics counts on " + factory.name);
      EngineOptions options = factory.options();
      options.statistics = true;
      Engine engine(std::move(options));
      const Var a = engine.NewVariable(), b = engine.NewVariable(), bad = engine.NewVariable();
      constexpr int kSlow = 20, kFast = 200;
      for (int i = 0; i < kSlow; ++i) {
        engine.Push([] { spin_for(std::chrono::microseconds(200)); }, {}, {a}, {.name = "slow"});
      }
      for (int i = 0; i < kFast; ++i) engine.Push([] {}, {a}, {b}, {.name = "fast"});
      engine.Push([] {}, {}, {b});  // unnamed
      engine.Push([] { throw std::runtime_error("boom"); }, {}, {bad}, {.name = "fails"});
      for (int i = 0; i < 3; ++i) engine.Push([] {}, {bad}, {b}, {.name = "skipped"});
      REQUIRE_THROWS(engine.WaitForAll());
      const StatisticsTable table = engine.Statistics();
      REQUIRE(table.op_count() == kSlow + kFast + 1 + 1 + 3);
      const OpNameStatistics slow = row_of(table, "slow"), fast = row_of(table, "fast");
      REQUIRE(slow.count == kSlow);
      REQUIRE(slow.ran == kSlow);
      REQUIRE(fast.count == kFast);
      REQUIRE(row_of(table, "(unnamed)").count == 1);
      REQUIRE(row_of(table, "fails").failed == 1);
      REQUIRE(row_of(table, "skipped").skipped == 3);
      REQUIRE(row_of(table, "skipped").run_total == nanoseconds{0});  // skipped ops never ran
      // Sorted by total run time; the slow ops' run time is at least their spin. (On streams a fast op's run lasts
      // until its stream has run the slow ops queued before it: no order between the two rows there.)
      if (factory.takes_async) REQUIRE(table.ops.front().name == "slow");
      REQUIRE(slow.run_total >= kSlow * std::chrono::microseconds(200));
      REQUIRE(slow.run_p50 <= slow.run_p99);
      REQUIRE(slow.run_p99 <= slow.run_max + slow.run_max / 16);  // the histogram's bound
      REQUIRE(slow.run_max <= slow.run_total);
      REQUIRE(slow.run_mean * kSlow <= slow.run_total);
      REQUIRE(slow.run_p50 >= std::chrono::microseconds(200) - std::chrono::microseconds(200) / 16);
      // The fast ops read `a`, which each slow op mutates: on a pool they are pushed while the slow ops still run, and
      // wait on them. (Where the pushing thread runs the slow ops itself, inline, the fast ones are ready at their
      // push, and their wait is 0: the engine reads no clock for a ready time it already has, observers.h.)
      if (factory.workers > 0) REQUIRE(fast.wait_max > nanoseconds{0});
      const std::string text = table.ToString();
      REQUIRE(text.find("depengine profile: 225 ops") == 0);
      REQUIRE(text.find("\nslow ") != std::string::npos);
    }
  }
}

TEST_CASE("statistics sum to the op count when many threads push at once", "[engine][statistics][random]") {
  for (const std::uint64_t seed : test_seeds()) {
    CAPTURE(seed);
    Watchdog watchdog("statistics from several threads");
    EngineOptions options = threadpool_factory(2).options(128);
    options.statistics = true;
    Engine engine(std::move(options));
    std::vector<Var> vars;
    for (int i = 0; i < 4; ++i) vars.push_back(engine.NewVariable());
    constexpr int kThreads = 3;
    const int per_thread = static_cast<int>(sized(4000, 800, 1000));
    std::vector<std::thread> pushers;
    for (int t = 0; t < kThreads; ++t) {
      pushers.emplace_back([&, t] {
        std::uint64_t state = seed + static_cast<std::uint64_t>(t) * 0x9e3779b97f4a7c15ull;
        for (int i = 0; i < per_thread; ++i) {
          state = state * 6364136223846793005ull + 1442695040888963407ull;
          const Var var = vars[(state >> 33) % vars.size()];
          engine.Push([] {}, {}, {var}, {.name = "name" + std::to_string((state >> 40) % 7)});
        }
      });
    }
    // A table read while ops run: a snapshot, whose counts only grow.
    const std::uint64_t early = engine.Statistics().op_count();
    for (std::thread& pusher : pushers) pusher.join();
    engine.WaitForAll();
    const StatisticsTable table = engine.Statistics();
    REQUIRE(early <= table.op_count());
    REQUIRE(table.op_count() == static_cast<std::uint64_t>(kThreads * per_thread));
    std::uint64_t on_workers = 0;
    for (const WorkerStatistics& worker : table.workers) {
      REQUIRE(worker.executor == 0);
      on_workers += worker.ops;
      REQUIRE(worker.busy + worker.idle >= worker.busy);
    }
    REQUIRE(on_workers == table.op_count());  // every op ran on a worker or a helping thread (worker -1)
  }
}

TEST_CASE("Reset starts a new window and Statistics throws when statistics are off", "[engine][statistics]") {
  EngineOptions options = inline_factory().options();
  options.statistics = true;
  Engine engine(std::move(options));
  const Var v = engine.NewVariable();
  engine.Push([] {}, {}, {v}, {.name = "x"});
  engine.WaitForAll();
  REQUIRE(engine.Statistics().op_count() == 1);

  OpStatistics own;
  EngineOptions plain = inline_factory().options();
  plain.observers.push_back(&own);
  {
    Engine observed(std::move(plain));
    REQUIRE(error_message([&] { (void)observed.Statistics(); }) ==
            "Statistics: statistics are off; set EngineOptions::statistics (or DEPENGINE_PROFILE=1)");
    const Var w = observed.NewVariable();
    for (int i = 0; i < 3; ++i) observed.Push([] {}, {}, {w}, {.name = "y"});
  }
  REQUIRE(own.Table().op_count() == 3);  // a statistics object registered by hand, read after the engine is gone
  own.Reset();
  REQUIRE(own.Table().ops.empty());
}

TEST_CASE("DEPENGINE_PROFILE=1 prints the table sorted by total time at the engine's destruction",
          "[engine][statistics]") {
  REQUIRE(::setenv("DEPENGINE_PROFILE", "1", 1) == 0);
  StderrCapture capture;
  {
    Engine engine(threadpool_factory(2).options());
    const Var v = engine.NewVariable();
    for (int i = 0; i < 4; ++i) {
      engine.Push([] { spin_for(std::chrono::microseconds(300)); }, {}, {v}, {.name = "heavy"});
    }
    for (int i = 0; i < 10; ++i) engine.Push([] {}, {v}, {}, {.name = "light"});
    REQUIRE(engine.Statistics().op_count() <= 14);
  }
  const std::string printed = capture.finish();
  REQUIRE(::unsetenv("DEPENGINE_PROFILE") == 0);
  CAPTURE(printed);
  REQUIRE(printed.find("depengine profile: 14 ops") != std::string::npos);
  const auto heavy = printed.find("\nheavy "), light = printed.find("\nlight ");
  REQUIRE(heavy != std::string::npos);
  REQUIRE(light != std::string::npos);
  REQUIRE(heavy < light);
  REQUIRE(printed.find("Executor Worker") != std::string::npos);

  REQUIRE(::setenv("DEPENGINE_PROFILE", "yes", 1) == 0);
  const std::string refused = error_message([] { Engine engine(inline_factory().options()); });
  REQUIRE(::unsetenv("DEPENGINE_PROFILE") == 0);
  REQUIRE(refused ==
          "DEPENGINE_PROFILE='yes': expected 1 (per-name statistics, printed at the engine's destruction) or 0");
}

}  // namespace
}  // namespace depengine::test
