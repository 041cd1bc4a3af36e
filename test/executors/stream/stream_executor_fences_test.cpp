// Fences (PushOptions::wait_fences / signal_fences) between stream ops and CPU ops on the host backend: a pipeline
// ordered by nothing but fences is issued to the devices before any of it runs, with the exact device waits the
// promises give; a late waiter with >= semantics waits for the signal that first reached its value and not for later
// ones; CPU waiters wait for device completion; external signals taint; a device failure fails the timelines.
//
// As in stream_executor_test.cpp, wait counts are made independent of timing by holding the first stream op on a
// StreamGate until every op of the scenario has been issued.
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

#include <depengine/frontier/timeline.h>

#include "test/executors/stream/stream_executor_support.h"

namespace depengine::test {
namespace {

PushOptions fenced(PushOptions options, FenceList wait, FenceList signal) {
  options.wait_fences = wait;
  options.signal_fences = signal;
  return options;
}

bool knows(const TimelineFrontier& knowledge, Axis axis) {
  for (const FrontierEntry& entry : knowledge) {
    if (entry.axis == axis) return true;
  }
  return false;
}

TEST_CASE("a pipeline ordered by fences alone is issued to 3 streams before any of it runs",
          "[stream_executor][fences]") {
  Watchdog watchdog("fence pipeline");
  StreamEngine engine({.compute_streams = 3});
  Timeline t({.name = "pipeline"});
  StreamGate gate;
  std::uint64_t a = 0, b = 0, c = 0;  // touched only by stream work, ordered by the device waits
  // Pushed last stage first: the engine holds C and B on the timeline (no thread blocks) until A is issued.
  engine.Push([&](const RunContext& ctx) { launch(ctx, [&] { c = b * 10; }); }, {}, {},
              fenced(on_stream(2), {{&t, 2}}, {{&t, 3}}));
  engine.Push([&](const RunContext& ctx) { launch(ctx, [&] { b = a + 1; }); }, {}, {},
              fenced(on_stream(1), {{&t, 1}}, {{&t, 2}}));
  CHECK(stream_executor(engine).stats().ops_issued == 0);
  engine.Push([&](const RunContext& ctx) { launch(ctx, [&] { gate.hold(), a = 4; }); }, {}, {},
              fenced(on_stream(0), {}, {{&t, 1}}));
  // A's issue promises 1 with {(S0,1)}: B is issued on S1 with one wait on it. B's issue promises 2 with
  // {(S0,1),(S1,1)}: C is issued on S2 and waits once, on (S1,1), whose event implies (S0,1) (elided). Nothing has
  // run: the gate holds S0, and S1 and S2 wait behind it on the device.
  const StreamExecutor& streams = stream_executor(engine);
  CHECK(streams.stats().ops_issued == 3);
  CHECK(streams.stats(0, StreamKind::kCompute, 1).waits_issued == 1);
  CHECK(streams.stats(0, StreamKind::kCompute, 2).waits_issued == 1);
  CHECK(streams.stats(0, StreamKind::kCompute, 2).waits_elided == 1);
  CHECK(streams.stats().waits_issued == 2);
  CHECK(t.query() == 0);  // fences are signalled at completion
  gate.open();
  engine.WaitForFence({&t, 3});
  CHECK(c == 50);
  CHECK(t.query() == 3);
  CHECK(streams.stats().host_synchronizations == 0);
}

TEST_CASE("a late waiter with >= semantics waits for the signal that first reached its value, not for later ones",
          "[stream_executor][fences]") {
  Watchdog watchdog("late waiter");
  StreamEngine engine({.compute_streams = 3});
  Timeline t({.name = "s"});
  StreamGate gate_a, gate_b;
  std::atomic<bool> b_done{false};
  std::uint64_t a = 0, c = 0;
  Axis axis_a{}, axis_b{};
  Var out = engine.NewVariable();
  // A (S0) raises t to 2; B (S1) waits for 2 and raises t to 5. Both are held on the device.
  engine.Push(
      [&](const RunContext& ctx) {
        axis_a = ctx.stream->axis;
        launch(ctx, [&] { gate_a.hold(), a = 6; });
      },
      {}, {}, fenced(on_stream(0), {}, {{&t, 2}}));
  engine.Push(
      [&](const RunContext& ctx) {
        axis_b = ctx.stream->axis;
        launch(ctx, [&] { gate_b.hold(), b_done.store(true, std::memory_order_relaxed); });
      },
      {}, {}, fenced(on_stream(1), {{&t, 2}}, {{&t, 5}}));
  // C waits for t >= 2 on S2. Two promises cover 2 (A's of 2, B's of 5); the smallest, A's, is the one that first
  // reaches 2: C waits on (S0,1) alone, and never for B.
  engine.Push([&](const RunContext& ctx) { launch(ctx, [&] { c = a * 10; }); }, {}, {out},
              fenced(on_stream(2), {{&t, 2}}, {}));
  const StreamExecutor& streams = stream_executor(engine);
  CHECK(streams.stats(0, StreamKind::kCompute, 2).waits_issued == 1);
  gate_a.open();
  engine.WaitForVar(out);  // returns while B is still held: C did not wait for it
  CHECK(c == 60);
  CHECK_FALSE(b_done.load(std::memory_order_relaxed));
  gate_b.open();
  engine.WaitForFence({&t, 5});
  CHECK(b_done.load(std::memory_order_relaxed));
  // What the signals carried: the import for 2 is A's knowledge (its own epoch), not B's; the one for 5 knows both.
  REQUIRE(t.poll(2).is_reached());
  CHECK(knows(t.poll(2).knowledge(), axis_a));
  CHECK_FALSE(knows(t.poll(2).knowledge(), axis_b));
  CHECK(knows(t.poll(5).knowledge(), axis_a));
  CHECK(knows(t.poll(5).knowledge(), axis_b));
  // A waiter arriving now, when t is at 5, waits for nothing: 2 was reached by completed work.
  const std::uint64_t waits_before = streams.stats().waits_issued;
  engine.Push([&](const RunContext& ctx) { launch(ctx, [&] { c = 1; }); }, {}, {out},
              fenced(on_stream(1), {{&t, 2}}, {}));
  engine.WaitForVar(out);
  CHECK(c == 1);
  CHECK(streams.stats().waits_issued == waits_before);
}

TEST_CASE("a CPU op waiting on a fence of a delayed stream op runs only after the device work completed",
          "[stream_executor][fences]") {
  Watchdog watchdog("CPU fence waiter");
  Engine engine(stream_engine_options({.launch_delay = std::chrono::milliseconds(2)}));
  constexpr int kRounds = 20;
  Timeline t;
  std::atomic<int> early{0};
  for (int round = 1; round <= kRounds; ++round) {
    auto done = std::make_shared<std::atomic<bool>>(false);
    // The CPU op is pushed first: it cannot take the stream op's promise (only a stream can wait on a device). The
    // stream ops share one stream, so they complete, and raise t, in round order.
    engine.Push(
        [done, &early] {
          // acquire: pairs with the release below, if the stream work has run.
          if (!done->load(std::memory_order_acquire)) early.fetch_add(1, std::memory_order_relaxed);
        },
        {}, {}, fenced(PushOptions{.context = {.executor = kCpu}}, {{&t, static_cast<std::uint64_t>(round)}}, {}));
    engine.Push(
        [done](const RunContext& ctx) {
          launch(ctx, [done] { done->store(true, std::memory_order_release); });  // pairs with the acquire above
        },
        {}, {}, fenced(on_stream(0), {}, {{&t, static_cast<std::uint64_t>(round)}}));
  }
  engine.WaitForAll();
  CHECK(early.load(std::memory_order_relaxed) == 0);
  CHECK(t.query() == kRounds);
}

TEST_CASE("external signals taint a timeline until a stream op signals past them", "[stream_executor][fences]") {
  Watchdog watchdog("external taint");
  Engine engine(stream_engine_options());
  Timeline t;
  Var v = engine.NewVariable();
  Axis axis{};
  engine.Push([&](const RunContext& ctx) { axis = ctx.stream->axis; }, {}, {v}, fenced(on_stream(0), {}, {{&t, 1}}));
  engine.WaitForFence({&t, 1});
  t.signal_external(3);  // e.g. an event imported from another process
  bool ran = false;
  engine.Push([&](const RunContext& ctx) { launch(ctx, [&] { ran = true; }); }, {}, {v},
              fenced(on_stream(0), {{&t, 3}}, {{&t, 4}}));
  engine.WaitForFence({&t, 4});
  CHECK(ran);
  // The wait for 3 ran on the external value; its import then was tainted knowledge. Now the engine's signal of 4
  // (the stream's second op, which knows its first) covers 3 again, untainted.
  const TimelineWaitResult three = t.poll(3);
  REQUIRE(three.is_reached());
  CHECK_FALSE(three.knowledge().tainted());
  CHECK(three.knowledge().epoch(axis) == 2);
}

TEST_CASE("a device failure fails the timelines its op signals, and their waiters", "[stream_executor][fences]") {
  Watchdog watchdog("fence failure");
  Engine engine(stream_engine_options({.compute_streams = 2}));
  Timeline t;
  Var cpu_out = engine.NewVariable();
  std::atomic<bool> cpu_ran{false};
  engine.Push([&] { cpu_ran.store(true, std::memory_order_relaxed); }, {}, {cpu_out},
              fenced(PushOptions{.context = {.executor = kCpu}}, {{&t, 1}}, {}));
  engine.Push([](const RunContext& ctx) { launch(ctx, [] { throw OpFailure(7); }); }, {}, {},
              fenced(on_stream(0), {}, {{&t, 1}}));
  auto cause = [](const std::exception_ptr& error) {
    try {
      std::rethrow_exception(error);
    } catch (const StreamError& e) {
      return thrown_id([&] { std::rethrow_exception(e.cause()); });
    } catch (...) {
      return -2;
    }
  };
  std::exception_ptr fence_error;
  try {
    engine.WaitForFence({&t, 1});
  } catch (...) {
    fence_error = std::current_exception();
  }
  REQUIRE(fence_error != nullptr);
  CHECK(cause(fence_error) == 7);
  CHECK(t.failed());
  std::exception_ptr var_error;
  try {
    engine.WaitForVar(cpu_out);
  } catch (...) {
    var_error = std::current_exception();
  }
  CHECK(cause(var_error) == 7);  // the CPU waiter was skipped, passing the failure on to what it mutates
  CHECK_FALSE(cpu_ran.load(std::memory_order_relaxed));
  CHECK_NOTHROW(engine.WaitForAll());  // the waits above reported the one failure
}

}  // namespace
}  // namespace depengine::test
