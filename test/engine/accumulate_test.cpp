// Accumulation (Engine::PushAccumulate; docs/accumulate.md), case by case, on every CPU executor of the conformance
// suite (inline, the pools), and on host streams beside a pool; a capture refuses it. A group of accumulations comes
// after every earlier use of its variable and before every later one; its members run one at a time, in the order they
// become ready (not in push order), on the device too; an error or a cancellation inside a group stops the members
// that start after it, as after a mutation; a variable listed both as mutated and as accumulated is mutated.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <depengine/engine/engine.h>
#include <depengine/executors/host_stream/host_stream_backend.h>
#include <depengine/executors/stream/stream_executor.h>
#include <depengine/executors/threadpool/threadpool_executor.h>

#include "test/engine/test_support.h"
#include "test/executors/executor_factories.h"

namespace depengine::test {
namespace {

// Atomics: counters and flags bumped by ops are read by the test thread after a wait, which orders every op's writes
// before the read, or polled (wait_until) for progress only; a flag that detects overlap does so by its exchange
// alone. So all are relaxed.

std::vector<ExecutorFactory> cpu_factories() {
  std::vector<ExecutorFactory> result;
  for (const auto& factory : executor_factories()) {
    if (factory.takes_async) result.push_back(factory);  // the CPU executors (a stream executor takes no async op)
  }
  return result;
}

// "A" followed by i (not "A" + std::to_string(i): GCC 12 warns of a false overlap there, -Wrestrict).
std::string member(int i) {
  std::string name = "A";
  name += std::to_string(i);
  return name;
}

// A log of what ran, in the order it ran (a mutex: ops on different variables may log at once).
class Log {
 public:
  void add(std::string entry) {
    const std::lock_guard lock(mutex_);
    entries_.push_back(std::move(entry));
  }
  [[nodiscard]] std::vector<std::string> entries() const {
    const std::lock_guard lock(mutex_);
    return entries_;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> entries_;
};

TEST_CASE("a group comes after the uses of its variable before it and before those after it", "[engine][accumulate]") {
  for (const auto& factory : cpu_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("group order on " + factory.name);
      constexpr int kMembers = 8;
      Engine engine(factory.options());
      const Var v = engine.NewVariable();
      std::uint64_t value = 0;  // v's data
      Log log;
      engine.Push(
          [&] {
            value = 1;
            log.add("W");
          },
          {}, {v});
      HeldOp read_before(engine, {v}, {});  // the group waits for this read to complete
      std::vector<Var> gates;
      std::vector<std::unique_ptr<HeldOp>> holders;
      for (int i = 0; i < kMembers; ++i) {
        gates.push_back(engine.NewVariable());
        holders.push_back(std::make_unique<HeldOp>(engine, VarList{}, VarList{gates.back()}));
      }
      for (int i = 0; i < kMembers; ++i) {
        engine.PushAccumulate(
            [&, i] {
              value += static_cast<std::uint64_t>(i + 1);
              log.add(member(i));
            },
            {gates[static_cast<std::size_t>(i)]}, {}, {v});
      }
      std::uint64_t seen_after = 0;
      engine.Push(
          [&] {
            seen_after = value;
            log.add("R");
          },
          {v}, {});
      engine.Push(
          [&] {
            value *= 2;
            log.add("M");
          },
          {}, {v});
      // Every member is ready but for v, which the read still holds (release() calls the holder's Completion, which
      // completes it before it returns).
      for (int i = 0; i < kMembers; ++i) REQUIRE(holders[static_cast<std::size_t>(i)]->release());
      CHECK(log.entries() == std::vector<std::string>{"W"});
      REQUIRE(read_before.release());
      engine.WaitForVar(v);
      const std::vector<std::string> entries = log.entries();
      REQUIRE(entries.size() == kMembers + 3);
      CHECK(entries.front() == "W");
      std::vector<std::string> members(entries.begin() + 1, entries.begin() + 1 + kMembers);
      std::sort(members.begin(), members.end());
      for (int i = 0; i < kMembers; ++i) CHECK(members[static_cast<std::size_t>(i)] == member(i));
      CHECK(entries[kMembers + 1] == "R");
      CHECK(entries[kMembers + 2] == "M");
      constexpr std::uint64_t kSum = kMembers * (kMembers + 1) / 2;
      CHECK(seen_after == 1 + kSum);
      CHECK(value == 2 * (1 + kSum));
      CHECK(engine.Version(v) == 1 + kMembers + 1);  // each member is a mutation
    }
  }
}

TEST_CASE("a group's members run in the order they become ready, not in push order", "[engine][accumulate]") {
  for (const auto& factory : cpu_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("readiness order on " + factory.name);
      constexpr int kMembers = 6;
      const std::vector<int> order{4, 1, 5, 0, 3, 2};  // the order the members' other inputs complete in
      Engine engine(factory.options());
      const Var v = engine.NewVariable();
      std::vector<Var> gates;
      std::vector<std::unique_ptr<HeldOp>> holders;
      for (int i = 0; i < kMembers; ++i) {
        gates.push_back(engine.NewVariable());
        holders.push_back(std::make_unique<HeldOp>(engine, VarList{}, VarList{gates.back()}));
      }
      Log log;
      std::atomic<int> ran{0};
      for (int i = 0; i < kMembers; ++i) {
        engine.PushAccumulate(
            [&, i] {
              log.add(std::to_string(i));
              ran.fetch_add(1, std::memory_order_relaxed);
            },
            {gates[static_cast<std::size_t>(i)]}, {}, {v});
      }
      // Each member runs as soon as its gate opens: had they run in push order (as mutations do), member 4 would wait
      // for members 0 to 3, whose gates are still closed, and the wait below would fail.
      for (int k = 0; k < kMembers; ++k) {
        REQUIRE(holders[static_cast<std::size_t>(order[static_cast<std::size_t>(k)])]->release());
        REQUIRE(wait_until([&] { return ran.load(std::memory_order_relaxed) == k + 1; }));
      }
      engine.WaitForVar(v);
      std::vector<std::string> expected;
      for (const int i : order) expected.push_back(std::to_string(i));
      CHECK(log.entries() == expected);
    }
  }
}

TEST_CASE("a group's members never overlap, async ones until their Completion", "[engine][accumulate]") {
  for (const auto& factory : cpu_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("mutual exclusion on " + factory.name);
      const int members = static_cast<int>(sized(400, 100, 100));
      Engine engine(factory.options());
      const Var a = engine.NewVariable(), b = engine.NewVariable();
      HeldOp hold(engine, {}, {a, b});  // the members become ready together once it completes
      std::atomic<int> busy_a{0}, busy_b{0}, overlaps{0};
      std::uint64_t sum_a = 0, sum_b = 0;
      Completer completer(2);
      auto claim = [&](std::atomic<int>& busy) {
        if (busy.exchange(1, std::memory_order_relaxed) != 0) overlaps.fetch_add(1, std::memory_order_relaxed);
      };
      auto unclaim = [&](std::atomic<int>& busy) {
        if (busy.exchange(0, std::memory_order_relaxed) != 1) overlaps.fetch_add(1, std::memory_order_relaxed);
      };
      const std::vector<Var> ab{a, b}, ba{b, a};
      for (int i = 0; i < members; ++i) {
        // Members of both groups at once, listed in either order: the tokens are taken in one order, so none waits
        // for another's.
        const bool both = i % 3 == 0;
        const std::vector<Var>& into = i % 2 == 0 ? ab : ba;
        if (i % 4 == 1) {
          engine.PushAccumulateAsync(
              [&, both, i](Completion done) {
                claim(busy_a);
                sum_a += static_cast<std::uint64_t>(i);
                if (both) {
                  claim(busy_b);
                  sum_b += static_cast<std::uint64_t>(i);
                }
                completer.post([&, both, done] {
                  unclaim(busy_a);
                  if (both) unclaim(busy_b);
                  done();
                });
              },
              {}, {}, both ? VarList(into) : VarList{a});
        } else {
          engine.PushAccumulate(
              [&, both, i] {
                claim(busy_a);
                sum_a += static_cast<std::uint64_t>(i);
                if (both) {
                  claim(busy_b);
                  sum_b += static_cast<std::uint64_t>(i);
                  unclaim(busy_b);
                }
                unclaim(busy_a);
              },
              {}, {}, both ? VarList(into) : VarList{a});
        }
      }
      CHECK(hold.release());
      CHECK_NOTHROW(engine.WaitForAll());
      completer.stop();
      CHECK(overlaps.load(std::memory_order_relaxed) == 0);
      std::uint64_t want_a = 0, want_b = 0;
      for (int i = 0; i < members; ++i) {
        want_a += static_cast<std::uint64_t>(i);
        if (i % 3 == 0) want_b += static_cast<std::uint64_t>(i);
      }
      CHECK(sum_a == want_a);
      CHECK(sum_b == want_b);
    }
  }
}

TEST_CASE("an error inside a group skips the members that start after it and poisons the variable",
          "[engine][accumulate]") {
  for (const auto& factory : cpu_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("error in a group on " + factory.name);
      constexpr int kMembers = 12, kThrower = 5;
      Engine engine(factory.options());
      const Var v = engine.NewVariable(), after = engine.NewVariable();
      HeldOp hold(engine, {}, {v});
      std::atomic<bool> thrown{false};
      std::atomic<int> ran{0}, ran_after_throw{0}, no_skip_saw_error{0};
      for (int i = 0; i < kMembers; ++i) {
        const bool no_skip = i == kMembers - 1;
        engine.PushAccumulate(
            [&, i, no_skip](const RunContext& ctx) {
              ran.fetch_add(1, std::memory_order_relaxed);
              if (thrown.load(std::memory_order_relaxed)) {
                if (!no_skip) ran_after_throw.fetch_add(1, std::memory_order_relaxed);
                if (no_skip && ctx.input_error != nullptr) no_skip_saw_error.fetch_add(1, std::memory_order_relaxed);
              }
              if (i == kThrower) {
                thrown.store(true, std::memory_order_relaxed);
                throw std::runtime_error("member failed");
              }
            },
            {}, {}, {v}, PushOptions{.no_skip = no_skip});
      }
      std::atomic<int> reader_ran{0};
      engine.Push([&] { reader_ran.fetch_add(1, std::memory_order_relaxed); }, {v}, {after});
      REQUIRE(hold.release());
      CHECK_THROWS_WITH(engine.WaitForVar(v), "member failed");
      CHECK_THROWS_WITH(engine.WaitForVar(after), "member failed");  // the read after the group was skipped
      CHECK(reader_ran.load(std::memory_order_relaxed) == 0);
      CHECK(ran_after_throw.load(std::memory_order_relaxed) == 0);
      CHECK(ran.load(std::memory_order_relaxed) >= 2);  // the thrower and the no_skip member at least
      CHECK(ran.load(std::memory_order_relaxed) <= kMembers);
      // The no_skip member saw the error if it ran after the throw (it may have run before it).
      CHECK(no_skip_saw_error.load(std::memory_order_relaxed) <= 1);
      CHECK(engine.Version(v) == 1 + kMembers);  // skipped members count as mutations, as skipped writes do
      CHECK_NOTHROW(engine.WaitForAll());
    }
  }
}

TEST_CASE("a group cancelled half-way: members that start after the cancel are cancelled", "[engine][accumulate]") {
  for (const auto& factory : cpu_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("cancelled group on " + factory.name);
      constexpr int kMembers = 16;
      Engine engine(factory.options());
      CancelScope scope;
      const Var v = engine.NewVariable(), outside = engine.NewVariable();
      HeldOp hold(engine, {}, {v});
      std::atomic<bool> cancelled{false};
      std::atomic<int> ran{0}, ran_after_cancel{0};
      for (int i = 0; i < kMembers; ++i) {
        engine.PushAccumulate(
            [&] {
              // The first member to run cancels (members run one at a time, in an order the engine chooses).
              const int order = ran.fetch_add(1, std::memory_order_relaxed);
              if (cancelled.load(std::memory_order_relaxed)) ran_after_cancel.fetch_add(1, std::memory_order_relaxed);
              if (order == 0) {
                scope.Cancel();
                cancelled.store(true, std::memory_order_relaxed);
              }
            },
            {}, {}, {v}, PushOptions{.scope = &scope});
      }
      std::atomic<int> outside_ran{0};
      engine.Push([&] { outside_ran.fetch_add(1, std::memory_order_relaxed); }, {v}, {outside});
      REQUIRE(hold.release());
      engine.WaitForScope(scope);
      CHECK(scope.pending() == 0);
      CHECK(ran_after_cancel.load(std::memory_order_relaxed) == 0);
      CHECK(ran.load(std::memory_order_relaxed) == 1);
      CHECK_THROWS_AS(engine.WaitForVar(v), Cancelled);
      CHECK_THROWS_AS(engine.WaitForVar(outside), Cancelled);  // the read after the group passes the error on
      CHECK(outside_ran.load(std::memory_order_relaxed) == 0);
      CHECK(engine.Version(v) == 1 + kMembers);
    }
  }
}

TEST_CASE("a member never waits holding a token: an async holder's Completion may wait for an op on another variable",
          "[engine][accumulate]") {
  for (const auto& factory : cpu_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("all-or-none tokens on " + factory.name);
      Engine engine(factory.options());
      const Var v1 = engine.NewVariable(), v2 = engine.NewVariable();
      std::optional<Completion> y_done;
      std::atomic<bool> y_holds{false}, z_ran{false}, x_ran{false}, x_after_z{false};
      // Y holds V2's token until its Completion, which the thread below calls once Z has run.
      engine.PushAccumulateAsync(
          [&](Completion done) {
            y_done.emplace(done);
            y_holds.store(true, std::memory_order_release);  // pairs with the acquire below: y_done is set
          },
          {}, {}, {v2});
      REQUIRE(wait_until([&] { return y_holds.load(std::memory_order_acquire); }));
      // X, into V1 and V2: it may take V1's token, finds V2's held, and must give V1's back before it waits.
      engine.PushAccumulate(
          [&] {
            x_after_z.store(z_ran.load(std::memory_order_relaxed), std::memory_order_relaxed);
            x_ran.store(true, std::memory_order_relaxed);
          },
          {}, {}, {v1, v2});
      // Z, into V1: runs while X waits (with X holding V1's token, it would wait for X, which waits for Y, which waits
      // for Z).
      engine.PushAccumulate([&] { z_ran.store(true, std::memory_order_relaxed); }, {}, {}, {v1});
      std::thread completer([&] {
        (void)wait_until([&] { return z_ran.load(std::memory_order_relaxed); });  // bounded: a failure, not a hang
        (*y_done)();
      });
      completer.join();
      CHECK(z_ran.load(std::memory_order_relaxed));
      CHECK_NOTHROW(engine.WaitForAll());
      CHECK(x_ran.load(std::memory_order_relaxed));
      CHECK(x_after_z.load(std::memory_order_relaxed));
    }
  }
}

TEST_CASE("PushAccumulateAsync on a stream executor is refused, naming it and PushAccumulate",
          "[engine][accumulate][misuse][async]") {
  for (const auto& factory : executor_factories()) {
    if (factory.takes_async) continue;
    DYNAMIC_SECTION(factory.name) {
      Engine engine(factory.options());
      const Var v = engine.NewVariable();
      CHECK_THROWS_WITH(engine.PushAccumulateAsync([](Completion done) { done(); }, {}, {}, {v}),
                        Catch::Contains("PushAccumulateAsync: context names executor 0") &&
                            Catch::Contains("push with PushAccumulate and enqueue"));
      CHECK(engine.InFlight() == 0);
      CHECK(engine.Version(v) == 0);
    }
  }
}

TEST_CASE("a variable both mutated and accumulated is mutated: it splits the group", "[engine][accumulate]") {
  for (const auto& factory : cpu_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("fold on " + factory.name);
      Engine engine(factory.options());
      const Var v = engine.NewVariable(), gate = engine.NewVariable();
      HeldOp hold(engine, {}, {gate});
      Log log;
      engine.PushAccumulate([&] { log.add("A0"); }, {gate}, {}, {v});
      engine.PushAccumulate([&] { log.add("X"); }, {}, {v}, {v});   // folds into a mutation of v
      engine.PushAccumulate([&] { log.add("A1"); }, {v}, {}, {v});  // read and accumulated: an accumulation
      REQUIRE(hold.release());
      engine.WaitForVar(v);
      CHECK(log.entries() == std::vector<std::string>{"A0", "X", "A1"});
      CHECK(engine.Version(v) == 3);
    }
  }
}

TEST_CASE("waits and deletion order after a group", "[engine][accumulate]") {
  for (const auto& factory : cpu_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("waits after a group on " + factory.name);
      constexpr int kMembers = 32;
      Engine engine(factory.options());
      const Var v = engine.NewVariable();
      std::atomic<int> ran{0};
      std::uint64_t sum = 0;
      for (int i = 0; i < kMembers; ++i) {
        engine.PushAccumulate(
            [&, i] {
              sum += static_cast<std::uint64_t>(i);
              ran.fetch_add(1, std::memory_order_relaxed);
            },
            {}, {}, {v});
      }
      engine.WaitForVar(v);
      CHECK(ran.load(std::memory_order_relaxed) == kMembers);
      CHECK(sum == kMembers * (kMembers - 1) / 2);
      for (int i = 0; i < kMembers; ++i) {
        engine.PushAccumulate([&] { ran.fetch_add(1, std::memory_order_relaxed); }, {}, {}, {v});
      }
      int at_deletion = -1;
      engine.DeleteVariable(v, [&] { at_deletion = ran.load(std::memory_order_relaxed); });
      engine.WaitForAll();
      CHECK(at_deletion == 2 * kMembers);
      CHECK_THROWS_AS(engine.PushAccumulate([] {}, {}, {}, {v}), Error);  // dead handle
    }
  }
}

// An engine with a pool of 2 workers (executor 0) and a stream executor on host streams (executor 1): one device, four
// compute streams, each of whose launches sleeps `delay` first (simulated device time, which makes overlaps real).
struct PoolAndStreams {
  EngineOptions options;
  ExecutorId<StreamExecutor> streams;
  explicit PoolAndStreams(std::chrono::microseconds delay) {
    (void)options.emplace<ThreadPoolExecutor>(ThreadPoolOptions{.workers = 2});
    streams = options.emplace<StreamExecutor>(
        std::make_unique<HostStreamBackend>(HostStreamOptions{.devices = 1, .launch_delay = delay}),
        StreamExecutorOptions{.devices = 1, .compute_streams = 4});
  }
};

PushOptions on_stream(std::int32_t stream) { return {.context = {.executor = 1, .stream = stream}}; }

TEST_CASE("on streams, a group's members run alone on the device, each after one device wait at most",
          "[engine][accumulate][streams]") {
  Watchdog watchdog("accumulation on host streams");
  const int members = static_cast<int>(sized(200, 60, 60));
  PoolAndStreams made(std::chrono::microseconds(20));
  Engine engine(std::move(made.options));
  const Var gate = engine.NewVariable(), sum = engine.NewVariable();
  HeldOp hold(engine, {}, {gate});  // on the pool: the members become ready together once it completes
  std::atomic<int> busy{0}, overlaps{0};
  std::uint64_t total = 0;  // written by members alone, one at a time: unsynchronized but for the engine's order
  auto add = [&](int i) {
    if (busy.exchange(1, std::memory_order_relaxed) != 0) overlaps.fetch_add(1, std::memory_order_relaxed);
    total += static_cast<std::uint64_t>(i);
    std::this_thread::yield();  // a wider window for another member to overlap (the test's only hope to see one)
    if (busy.exchange(0, std::memory_order_relaxed) != 1) overlaps.fetch_add(1, std::memory_order_relaxed);
  };
  int on_streams = 0;
  for (int i = 0; i < members; ++i) {
    if (i % 5 == 4) {  // a CPU member between stream members: it waits for their device work on the tracker
      engine.PushAccumulate([&add, i] { add(i); }, {gate}, {}, {sum});
      continue;
    }
    ++on_streams;
    engine.PushAccumulate(
        [&add, i](const RunContext& ctx) { launch_host(*ctx.stream, HostTask([&add, i] { add(i); })); }, {gate}, {},
        {sum}, on_stream(i % 4));
  }
  std::uint64_t seen_on_device = 0;  // a stream op after the group sees every member's work
  engine.Push([&](const RunContext& ctx) { launch_host(*ctx.stream, HostTask([&] { seen_on_device = total; })); },
              {sum}, {}, on_stream(1));
  CHECK(hold.release());
  CHECK_NOTHROW(engine.WaitForAll());
  const std::uint64_t want = static_cast<std::uint64_t>(members) * static_cast<std::uint64_t>(members - 1) / 2;
  CHECK(overlaps.load(std::memory_order_relaxed) == 0);
  CHECK(total == want);
  CHECK(seen_on_device == want);
  CHECK(engine.Version(sum) == static_cast<std::uint64_t>(members));
  // Each stream member waits for the member before it, and that member's signal stands for the whole group before it:
  // one wait, or none when the two share a stream or the one before ran on the CPU. The gate's op ran on the pool: the
  // stream found it complete.
  const StreamStats stats = engine.executor(made.streams).stats();
  CHECK(stats.waits_issued <= static_cast<std::uint64_t>(on_streams) + 1);  // + 1: the read after the group
}

TEST_CASE("on streams, a member that fails on the device poisons the variable and the members after it are skipped",
          "[engine][accumulate][streams][errors]") {
  Watchdog watchdog("a failing accumulation on host streams");
  PoolAndStreams made(std::chrono::microseconds(0));
  Engine engine(std::move(made.options));
  const Var sum = engine.NewVariable();
  std::atomic<int> added{0};
  // Pushed from this thread, each ready at its push: they take the token in push order, so the first fails first.
  engine.PushAccumulate(
      [](const RunContext& ctx) {
        launch_host(*ctx.stream, HostTask([] { throw std::runtime_error("device fault in the first member"); }));
      },
      {}, {}, {sum}, on_stream(0));
  for (int i = 0; i < 3; ++i) {  // on another stream, which learns of the fault from the wait for the first member
    engine.PushAccumulate(
        [&added](const RunContext& ctx) {
          launch_host(*ctx.stream, HostTask([&added] { added.fetch_add(1, std::memory_order_relaxed); }));
        },
        {}, {}, {sum}, on_stream(1));
  }
  // A CPU member after them: its input stream failed, so it is skipped and poisons the variable, holding the token.
  engine.PushAccumulate([&added] { added.fetch_add(1, std::memory_order_relaxed); }, {}, {}, {sum});
  // The stream's error, rethrown as it was thrown (a std::runtime_error), once: the wait for the variable reports it.
  CHECK_THROWS_WITH(engine.WaitForVar(sum), Catch::Contains("device fault in the first member"));
  CHECK_NOTHROW(engine.WaitForAll());
  CHECK(added.load(std::memory_order_relaxed) == 0);
}

TEST_CASE("a captured group replays: members alone, in the order they become ready, between the uses around it",
          "[engine][accumulate][graph]") {
  for (const auto& factory : cpu_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("a replayed group on " + factory.name);
      constexpr int kMembers = 6;
      Engine engine(factory.options());
      const Var sum = engine.NewVariable();
      std::vector<Var> gates;
      for (int k = 0; k < kMembers; ++k) gates.push_back(engine.NewVariable());
      Log log;
      std::atomic<int> busy{0}, overlaps{0};
      std::uint64_t total = 0, seen = 0;
      const Graph graph = engine.Capture([&] {
        engine.Push(
            [&] {
              log.add("W");
              total = 0;
            },
            {}, {sum});
        for (int k = 0; k < kMembers; ++k) {
          engine.PushAccumulate(
              [&, k] {
                if (busy.exchange(1, std::memory_order_relaxed) != 0) overlaps.fetch_add(1, std::memory_order_relaxed);
                log.add(member(k));
                total += static_cast<std::uint64_t>(k + 1);
                if (busy.exchange(0, std::memory_order_relaxed) != 1) overlaps.fetch_add(1, std::memory_order_relaxed);
              },
              {gates[static_cast<std::size_t>(k)]}, {}, {sum});
        }
        engine.Push(
            [&] {
              log.add("R");
              seen = total;
            },
            {sum}, {});
      });
      for (int replay = 1; replay <= 3; ++replay) {
        HeldOp hold(engine, {}, {gates[0]});  // the member captured first becomes ready last
        engine.Replay(graph);
        CHECK(
            wait_until([&] { return log.entries().size() >= static_cast<std::size_t>(replay * (kMembers + 2) - 2); }));
        CHECK(hold.release());
        CHECK_NOTHROW(engine.WaitForAll());
        const std::vector<std::string> entries = log.entries();
        REQUIRE(entries.size() == static_cast<std::size_t>(replay * (kMembers + 2)));
        const auto first = entries.end() - (kMembers + 2);
        CHECK(*first == "W");
        CHECK(*(entries.end() - 2) == member(0));  // ready last, ran last: not in capture order
        CHECK(entries.back() == "R");
        std::vector<std::string> members(first + 1, entries.end() - 1);
        std::sort(members.begin(), members.end());
        for (int k = 0; k < kMembers; ++k) CHECK(members[static_cast<std::size_t>(k)] == member(k));
        CHECK(seen == static_cast<std::uint64_t>(kMembers * (kMembers + 1) / 2));
        CHECK(engine.Version(sum) == static_cast<std::uint64_t>(replay * (kMembers + 1)));
      }
      CHECK(overlaps.load(std::memory_order_relaxed) == 0);
    }
  }
}

TEST_CASE("a replayed member that throws poisons the variable, and the members after it are skipped",
          "[engine][accumulate][graph][errors]") {
  for (const auto& factory : cpu_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Engine engine(factory.options());
      const Var sum = engine.NewVariable();
      Log log;
      const Graph graph = engine.Capture([&] {
        for (int k = 0; k < 8; ++k) {
          engine.PushAccumulate(
              [&log, k] {
                log.add(member(k));
                if (k == 3) throw std::runtime_error("member 3 failed");
              },
              {}, {}, {sum});
        }
      });
      engine.Replay(graph);
      CHECK_THROWS_WITH(engine.WaitForVar(sum), Catch::Contains("member 3 failed"));
      const std::vector<std::string> entries = log.entries();
      REQUIRE(!entries.empty());
      CHECK(entries.back() == member(3));  // whichever ran before it, none ran after it
      CHECK(engine.Version(sum) == 8);     // each member a mutation, skipped or not, as when pushed
    }
  }
}

}  // namespace
}  // namespace depengine::test
