// Engine::InFlightReport and the stall watch (engine.h; engine/detail/in_flight_report.h, stall_watch.h): a hang of
// the user's making is named — the ops, and the fence or variable each waits on — on every executor.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <depengine/engine/engine.h>

#include "test/engine/test_support.h"
#include "test/executors/executor_factories.h"

namespace depengine::test {
namespace {

// Atomics: counters bumped by ops are read by the test thread after a wait (WaitForAll, WaitForVar, WaitForScope), a
// join or the engine's destruction, which orders every op's writes before the read, so they are relaxed.

// Submit-before-wait gone wrong: `waiter` holds v and waits on t; the op that signals t queued behind it on v.
TEST_CASE("the in-flight report names a wait cycle through a fence and a variable", "[engine][report][fences]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("wait cycle on " + factory.name);
      Engine engine(factory.options());
      Timeline t;
      const Var v = engine.NewVariable(), unrelated = engine.NewVariable();
      std::atomic<int> ran{0};
      auto count = [&ran] { ran.fetch_add(1, std::memory_order_relaxed); };
      engine.Push(count, {}, {v}, {.name = "waiter", .wait_fences = {{&t, 1}}});
      engine.Push(count, {}, {v}, {.name = "signaller", .signal_fences = {{&t, 1}}});
      engine.Push(count, {v}, {unrelated}, {.name = "bystander"});
      const std::string report = engine.InFlightReport();
      CAPTURE(report);
      CHECK_THAT(report, Catch::Contains("3 ops in flight"));
      CHECK_THAT(report, Catch::Contains("held by op #1 'waiter' (write); waiting: op #2 'signaller' (write), op #3 "
                                         "'bystander' (read)"));
      CHECK_THAT(report, Catch::Contains("a wait cycle"));
      CHECK_THAT(report, Catch::Contains("'waiter' waits for fence (timeline "));
      CHECK_THAT(report, Catch::Contains("value 1; at 0), which is signalled by op #2 'signaller'"));
      CHECK_THAT(report, Catch::Contains("'signaller' waits on v0 behind op #1 'waiter'"));
      CHECK(ran.load(std::memory_order_relaxed) == 0);
      t.signal_external(1);  // the user's way out: the ops run, and the engine can be destroyed
      engine.WaitForAll();
      CHECK(ran.load(std::memory_order_relaxed) == 3);
      CHECK_THAT(engine.InFlightReport(), !Catch::Contains("cycle") && Catch::Contains("0 ops in flight"));
    }
  }
}

// The same cycle through an op of another thread: the signaller waits behind an op that waits behind the waiter.
TEST_CASE("the in-flight report follows a cycle across several variables", "[engine][report][fences]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("long wait cycle on " + factory.name);
      Engine engine(factory.options());
      Timeline t;
      const Var v = engine.NewVariable(), w = engine.NewVariable();
      engine.Push([] {}, {}, {v}, {.name = "waiter", .wait_fences = {{&t, 1}}});
      engine.Push([] {}, {v}, {w}, {.name = "middle"});
      engine.Push([] {}, {}, {w}, {.name = "signaller", .signal_fences = {{&t, 2}}});
      const std::string report = engine.InFlightReport();
      CAPTURE(report);
      CHECK_THAT(report, Catch::Contains("'waiter' waits for fence"));
      CHECK_THAT(report, Catch::Contains("which is signalled by op #3 'signaller'"));
      CHECK_THAT(report, Catch::Contains("'signaller' waits on v1 behind op #2 'middle'"));
      CHECK_THAT(report, Catch::Contains("'middle' waits on v0 behind op #1 'waiter'"));
      t.signal_external(1);
      engine.WaitForAll();
    }
  }
}

TEST_CASE("an op waiting on a fence nobody signals is reported without a cycle", "[engine][report][fences]") {
  const ExecutorFactory& factory = executor_factories().front();
  Watchdog watchdog("no cycle");
  Engine engine(factory.options());
  Timeline t;
  const Var v = engine.NewVariable();
  engine.Push([] {}, {}, {v}, {.name = "stuck", .wait_fences = {{&t, 5}}});
  engine.Push([] {}, {v}, {});
  const std::string report = engine.InFlightReport();
  CAPTURE(report);
  CHECK_THAT(report, Catch::Contains("op #1 'stuck' waits for fence (timeline "));
  CHECK_THAT(report, Catch::Contains("value 5; at 0)"));
  CHECK_THAT(report, Catch::Contains("waiting: op #2 (read)"));
  CHECK_THAT(report, !Catch::Contains("cycle"));
  t.signal_external(5);
  engine.WaitForAll();
}

// A Completion never called: nothing waits behind the op, so no queue names it as a blocker; the report must name it
// as its variable's holder and say what it waits for. Before, it read "held by op #1 'upload' (write)", as for a
// running op, and an async op that only reads was not mentioned at all.
TEST_CASE("the in-flight report names an async op whose Completion was never called", "[engine][report]") {
  for (const auto& factory : executor_factories()) {
    if (!factory.takes_async) continue;
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("hung Completion on " + factory.name);
      Engine engine(factory.options());
      const Var v = engine.NewVariable(), r = engine.NewVariable();
      std::mutex mutex;
      std::vector<Completion> held;  // guarded by mutex
      auto keep = [&](Completion done) {
        std::lock_guard lock(mutex);
        held.push_back(std::move(done));
      };
      engine.PushAsync(keep, {}, {v}, {.name = "upload"});
      engine.PushAsync(keep, {r}, {}, {.name = "reader"});
      // Both functions have returned (so every Completion is held, and no op runs later, during the engine's teardown,
      // into a `held` that is gone), and the report says so.
      std::string report;
      REQUIRE(wait_until([&] {
        {
          std::lock_guard lock(mutex);
          if (held.size() < 2) return false;
        }
        report = engine.InFlightReport();
        return report.find("its function returned") != std::string::npos;
      }));
      CAPTURE(report);
      CHECK_THAT(report, Catch::Contains("held by op #1 'upload' [async: its function returned; its Completion has "
                                         "not been called] (write)"));
      CHECK_THAT(report, Catch::Contains("ops of no variable, and ready ops not started yet are in flight too"));
      std::lock_guard lock(mutex);
      for (const Completion& done : held) done();
    }
  }
}

TEST_CASE("the stall watch hands the report to its sink when nothing completes, once per stall", "[engine][report]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("stall watch on " + factory.name);
      std::mutex mutex;
      std::string reports;  // guarded by mutex
      int count = 0;        // guarded by mutex
      EngineOptions options = factory.options();
      options.stall_report_after = std::chrono::milliseconds(20);
      options.stall_sink = [&](std::string_view report) {
        std::lock_guard lock(mutex);
        reports += report;
        ++count;
      };
      Engine engine(std::move(options));
      Timeline t;
      const Var v = engine.NewVariable();
      engine.Push([] {}, {}, {v}, {.name = "waiter", .wait_fences = {{&t, 1}}});
      engine.Push([] {}, {}, {v}, {.name = "signaller", .signal_fences = {{&t, 1}}});
      REQUIRE(wait_until([&] {
        std::lock_guard lock(mutex);
        return count > 0;
      }));
      {
        std::lock_guard lock(mutex);
        CHECK_THAT(reports, Catch::Contains("a wait cycle") && Catch::Contains("'signaller' waits on v0 behind"));
      }
      // Five more periods pass (the test waits for the clock here, not for a thread): still one report for this stall.
      (void)wait_until([] { return false; }, std::chrono::milliseconds(100));
      {
        std::lock_guard lock(mutex);
        CHECK(count == 1);
      }
      // Progress ends the stall; the next one is reported again.
      const Var other = engine.NewVariable();
      engine.Push([] {}, {}, {other});
      engine.WaitForVar(other);
      CHECK(wait_until([&] {
        std::lock_guard lock(mutex);
        return count == 2;
      }));
      t.signal_external(1);
      engine.WaitForAll();
    }
  }
}

// A stall sink for the tests: keeps every report, and lets the test wait for one on a condition variable (the watch's
// thread calls the sink), never on the clock. `on_report`, if set, runs after a report is kept, on the watch's thread:
// what a test does there to end the stall.
class StallCatcher {
 public:
  std::function<void(std::string_view)> sink() {
    return [this](std::string_view report) {
      std::function<void()> action;
      {
        std::lock_guard lock(mutex_);
        reports_.emplace_back(report);
        action = on_report;
      }
      cv_.notify_all();
      if (action != nullptr) action();
    };
  }
  // The first report, once there is one; empty if none came within meet_limit().
  [[nodiscard]] std::string first() {
    std::unique_lock lock(mutex_);
    if (!cv_.wait_for(lock, meet_limit(), [this] { return !reports_.empty(); })) return {};
    return reports_.front();
  }
  [[nodiscard]] std::size_t count() {
    std::lock_guard lock(mutex_);
    return reports_.size();
  }

  std::function<void()> on_report;  // set before the engine exists

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::string> reports_;  // guarded by mutex_
};

// Issue 48: all five hang shapes tried were silent unless DEPENGINE_STALL_REPORT was set. A report now says why it came
// and how to turn reports off; the options default is checked in options_test.cpp.
TEST_CASE("a stall report says how long nothing has completed, and how to turn reports off", "[engine][report]") {
  Watchdog watchdog("stall report header");
  StallCatcher catcher;
  EngineOptions options = executor_factories().front().options();
  options.stall_report_after = std::chrono::milliseconds(20);
  options.stall_sink = catcher.sink();
  Engine engine(std::move(options));
  Timeline t;
  const Var v = engine.NewVariable();
  engine.Push([] {}, {}, {v}, {.name = "stuck", .wait_fences = {{&t, 1}}});
  const std::string report = catcher.first();
  CAPTURE(report);
  CHECK_THAT(report, Catch::StartsWith("depengine: stalled: no op has completed for "));
  CHECK_THAT(report, Catch::Contains("'stuck' waits for fence"));
  CHECK_THAT(report, Catch::Contains("EngineOptions::stall_report_after") &&
                         Catch::Contains("DEPENGINE_STALL_REPORT=0 turns them off"));
  t.signal_external(1);
  engine.WaitForAll();
}

// The environment switch overrides the options, so a stuck run can be silenced without a rebuild. Before, 0 was
// refused.
TEST_CASE("DEPENGINE_STALL_REPORT=0 turns stall reports off", "[engine][report]") {
  for (const char* off : {"0", "off"}) {
    DYNAMIC_SECTION(off) {
      Watchdog watchdog("stall reports off");
      const ScopedEnv env("DEPENGINE_STALL_REPORT", off);
      StallCatcher catcher;
      EngineOptions options = executor_factories().front().options();
      options.stall_report_after = std::chrono::milliseconds(5);
      options.stall_sink = catcher.sink();
      Engine engine(std::move(options));
      Timeline t;
      const Var v = engine.NewVariable();
      engine.Push([] {}, {}, {v}, {.name = "stuck", .wait_fences = {{&t, 1}}});
      // Twenty periods on the clock (no thread to wait for: the point is that none reports).
      (void)wait_until([] { return false; }, std::chrono::milliseconds(100));
      CHECK(catcher.count() == 0);
      t.signal_external(1);
      engine.WaitForAll();
    }
  }
}

// Zero meant "off" when reports were off by default; it is refused now, so that code written for that meaning fails
// loudly instead of getting reports at the default time.
TEST_CASE("a zero stall_report_after is refused, naming how to turn reports off", "[engine][report][misuse]") {
  EngineOptions options = executor_factories().front().options();
  options.stall_report_after = std::chrono::milliseconds(0);
  CHECK_THROWS_WITH(Engine(std::move(options)), Catch::Contains("kNoStallReport"));
}

// A push held back by max_in_flight behind an op whose Completion nobody calls: the report names the push, what it
// waits for, and the op it waits behind. Before, the push was not mentioned: the report showed one op in flight and
// nothing waiting for it.
TEST_CASE("a stall report names a push blocked at max_in_flight and what it waits for", "[engine][report]") {
  for (const auto& factory : executor_factories()) {
    if (!factory.takes_async) continue;
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("push blocked at the bound on " + factory.name);
      std::mutex mutex;
      std::optional<Completion> held;  // guarded by mutex
      StallCatcher catcher;
      catcher.on_report = [&] {  // the way out: complete the op the push waits behind
        std::lock_guard lock(mutex);
        if (held.has_value()) (*held)();
      };
      EngineOptions options = factory.options(1);
      options.stall_report_after = std::chrono::milliseconds(20);
      options.stall_sink = catcher.sink();
      Engine engine(std::move(options));
      const Var v = engine.NewVariable(), w = engine.NewVariable();
      engine.PushAsync(
          [&](Completion done) {
            std::lock_guard lock(mutex);
            held.emplace(done);
          },
          {}, {v}, {.name = "upload"});
      engine.Push([] {}, {}, {w}, {.name = "producer"});  // waits at the bound until the sink completes "upload"
      engine.WaitForAll();
      const std::string report = catcher.first();
      CAPTURE(report);
      CHECK_THAT(report, Catch::Contains("Push of op 'producer'") &&
                             Catch::Contains("is blocked at EngineOptions::max_in_flight (1)") &&
                             Catch::Contains("waits for the 1 ops in flight to fall to 0"));
      CHECK_THAT(report, Catch::Contains("held by op #1 'upload' [async: its function returned; its Completion has "
                                         "not been called]"));
      CHECK_THAT(report, Catch::StartsWith("depengine: stalled"));
    }
  }
}

// A CPU op whose function runs long is busy, not stuck: the report names it as running, with how long, and says that
// this is not a stall. Before, it read "held by op #1 'long op' (write)", as for an op that never started.
TEST_CASE("a stall report names a running op as running, with how long, and not as a stall", "[engine][report]") {
  for (const auto& factory : executor_factories()) {
    if (!factory.takes_async) continue;  // a stream op's function runs when it is issued, not as a CPU op
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("running op on " + factory.name);
      std::promise<void> reported;
      std::atomic<bool> told{false};
      StallCatcher catcher;
      catcher.on_report = [&] {
        // relaxed: only which report is the first; the promise carries the rest.
        if (!told.exchange(true, std::memory_order_relaxed)) reported.set_value();
      };
      EngineOptions options = factory.options();
      options.stall_report_after = std::chrono::milliseconds(20);
      options.stall_sink = catcher.sink();
      std::future<void> until = reported.get_future();
      Engine engine(std::move(options));
      const Var v = engine.NewVariable();
      // Runs until the report came (on the inline executor, inside this Push).
      engine.Push([&until] { until.wait(); }, {}, {v}, {.name = "long op"});
      engine.Push([] {}, {v}, {}, {.name = "reader"});
      engine.WaitForVar(v);
      const std::string report = catcher.first();
      CAPTURE(report);
      CHECK_THAT(report, Catch::Contains("held by op #1 'long op' [running for "));
      if (factory.workers > 0) {  // inline, the reader is pushed once the long op has returned
        CHECK_THAT(report, Catch::Contains("waiting: op #2 'reader' (read)"));
      }
      CHECK_THAT(report, Catch::Contains("not a stall") && !Catch::Contains("stalled"));
    }
  }
}

TEST_CASE("a report hook adds its text to the in-flight report until it is cancelled", "[engine][report]") {
  Engine engine(executor_factories().front().options());
  ReportHook hook = engine.AtReport([] { return std::string("  a queue of the user's own: 3 waiting\n"); });
  CHECK_THAT(engine.InFlightReport(), Catch::Contains("a queue of the user's own: 3 waiting"));
  CHECK(hook.cancel());
  CHECK_THAT(engine.InFlightReport(), !Catch::Contains("a queue of the user's own"));
}

TEST_CASE("a bad stall-report setting is refused with a message", "[engine][report][misuse]") {
  EngineOptions options = executor_factories().front().options();
  options.stall_report_after = std::chrono::milliseconds(-1);
  CHECK_THROWS_WITH(Engine(std::move(options)), Catch::Contains("stall_report_after is negative"));
}

}  // namespace
}  // namespace depengine::test
