// Graphs of stream ops (engine/graph.h, "Graphs of stream ops") on host streams: a capture of stream ops replays as
// one stream op whose issue runs the captured functions on one stream, in captured order. Checked against serial
// execution, at the boundary with ordinary pushes, with errors step by step, and for what a capture refuses.
#include <catch2/catch.hpp>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <depengine/engine/engine.h>

#include "test/executors/stream/stream_executor_support.h"

namespace depengine::test {
namespace {

using Catch::Contains;

TEST_CASE("a graph of stream ops replays as its ops pushed again, between pushes on the same variables",
          "[stream_graph]") {
  Watchdog watchdog("stream graph vs serial");
  const int replays = static_cast<int>(sized(60, 20, 20));
  // Host memory that only stream work touches, ordered by the variables a (of a_value) and b (of b_value).
  std::int64_t a_value = 1;
  std::int64_t b_value = 0;
  Engine engine(stream_engine_options({.launch_delay = std::chrono::microseconds(20)}));
  const Var a = engine.NewVariable();
  const Var b = engine.NewVariable();
  int functions_called = 0;  // the steps' functions, on the issuing thread
  const Graph step = engine.Capture([&] {
    engine.Push(
        [&](const RunContext& ctx) {
          ++functions_called;
          const std::int64_t k = ctx.replay;
          launch(ctx, [&, k] { a_value = (a_value * 3 + k) % 1000003; });
        },
        {}, {a}, on_stream(0));
    engine.Push(
        [&](const RunContext& ctx) {
          ++functions_called;
          launch(ctx, [&] { b_value = (b_value + a_value) % 1000003; });
        },
        {a}, {b}, on_stream(1));
    engine.Push(
        [&](const RunContext& ctx) {
          ++functions_called;
          launch(ctx, [&] { a_value -= 1; });
        },
        {}, {a}, on_stream(0));
  });
  REQUIRE(step.size() == 3);
  CHECK(functions_called == 0);  // captured, not run

  std::int64_t a_serial = 1;
  std::int64_t b_serial = 0;
  for (int k = 0; k < replays; ++k) {
    // An ordinary push on a before the replay (on the stream the executor chooses), another on b after it.
    engine.Push([&](const RunContext& ctx) { launch(ctx, [&] { a_value += 7; }); }, {}, {a}, on_stream());
    engine.Replay(step);
    engine.Push([&](const RunContext& ctx) { launch(ctx, [&] { b_value = b_value * 2 % 1000003; }); }, {}, {b},
                on_stream(1));
    a_serial += 7;
    a_serial = (a_serial * 3 + k) % 1000003;
    b_serial = (b_serial + a_serial) % 1000003;
    a_serial -= 1;
    b_serial = b_serial * 2 % 1000003;
  }
  engine.WaitForVar(a);
  engine.WaitForVar(b);
  CHECK(a_value == a_serial);
  CHECK(b_value == b_serial);
  CHECK(functions_called == 3 * replays);  // host streams record nothing: each replay calls the functions
  // Versions count each captured mutation, as if pushed: a twice per replay and once per push, b once and once.
  CHECK(engine.Version(a) == static_cast<std::uint64_t>(3 * replays));
  CHECK(engine.Version(b) == static_cast<std::uint64_t>(2 * replays));
  engine.WaitForAll();
}

TEST_CASE("replays of a graph of stream ops from two threads are numbered in issue order and each runs whole",
          "[stream_graph]") {
  Watchdog watchdog("stream graph from two threads");
  const int per_thread = static_cast<int>(sized(100, 30, 30));
  Engine engine(stream_engine_options());
  const Var v = engine.NewVariable();
  std::vector<std::int64_t> seen;  // appended by stream work, ordered by v
  const Graph step = engine.Capture([&] {
    for (int part = 0; part < 2; ++part) {
      engine.Push(
          [&](const RunContext& ctx) {
            const std::int64_t k = ctx.replay;
            launch(ctx, [&, k] { seen.push_back(k); });
          },
          {}, {v}, on_stream());
    }
  });
  std::thread other([&] {
    for (int k = 0; k < per_thread; ++k) engine.Replay(step);
  });
  for (int k = 0; k < per_thread; ++k) engine.Replay(step);
  other.join();
  engine.WaitForVar(v);
  REQUIRE(seen.size() == static_cast<std::size_t>(4 * per_thread));
  for (std::size_t i = 0; i < seen.size(); ++i) CHECK(seen[i] == static_cast<std::int64_t>(i / 2));
  engine.WaitForAll();
}

TEST_CASE("a replay of stream ops waits only for earlier pushes on its own variables", "[stream_graph][boundary]") {
  Watchdog watchdog("stream graph boundary");
  Engine engine(stream_engine_options());
  const Var held = engine.NewVariable();
  const Var v = engine.NewVariable();
  int value = 0;
  const Graph step = engine.Capture(
      [&] { engine.Push([&](const RunContext& ctx) { launch(ctx, [&] { ++value; }); }, {}, {v}, on_stream(1)); });
  StreamGate gate;
  engine.Push([&](const RunContext& ctx) { launch(ctx, [&] { gate.hold(); }); }, {}, {held}, on_stream(0));
  engine.Replay(step);
  engine.Replay(step);
  engine.WaitForVar(v);  // returns while the op on `held` is still stopped at the gate
  CHECK(value == 2);
  gate.open();
  engine.WaitForAll();
}

TEST_CASE("errors inside a replay of stream ops are per step, as if the steps were pushed", "[stream_graph][errors]") {
  Watchdog watchdog("stream graph errors");
  Engine engine(stream_engine_options());
  const Var x = engine.NewVariable();
  const Var a = engine.NewVariable();
  const Var b = engine.NewVariable();
  const Var c = engine.NewVariable();
  int a_value = 0, b_value = 0, c_value = 0;
  const Graph step = engine.Capture([&] {
    engine.Push([&](const RunContext& ctx) { launch(ctx, [&] { ++a_value; }); }, {}, {a}, on_stream());
    engine.Push([&](const RunContext& ctx) { launch(ctx, [&] { ++b_value; }); }, {x}, {b}, on_stream());
    engine.Push(
        [&](const RunContext& ctx) {
          if (ctx.replay == 1) throw std::runtime_error("step 3 failed in replay 1");
          launch(ctx, [&] { ++c_value; });
        },
        {}, {c}, on_stream());
    engine.Push([&](const RunContext& ctx) { launch(ctx, [&] { ++a_value; }); }, {c}, {a}, on_stream());
  });
  engine.Replay(step);  // replay 0: clean
  engine.WaitForVar(a);
  CHECK(a_value == 2);
  CHECK(b_value == 1);
  CHECK(c_value == 1);

  engine.Replay(step);  // replay 1: step 3 throws; step 4 reads c, so it is skipped and a takes the error
  CHECK_THROWS_WITH(engine.WaitForVar(c), Contains("step 3 failed in replay 1"));
  CHECK_THROWS_WITH(engine.WaitForVar(a), Contains("step 3 failed in replay 1"));
  engine.WaitForVar(b);  // step 2 ran
  CHECK(a_value == 3);   // step 1 ran, step 4 did not
  CHECK(b_value == 2);
  CHECK(c_value == 1);

  CHECK_NOTHROW(engine.WaitForAll());  // both waits reported the error, and cleared it
}

TEST_CASE("a step skipped on an input error leaves the graph's other variables clean", "[stream_graph][errors]") {
  Watchdog watchdog("stream graph input error");
  Engine engine(stream_engine_options());
  const Var x = engine.NewVariable();
  const Var a = engine.NewVariable();
  const Var b = engine.NewVariable();
  int a_value = 0, b_value = 0;
  const Graph step = engine.Capture([&] {
    engine.Push([&](const RunContext& ctx) { launch(ctx, [&] { ++a_value; }); }, {}, {a}, on_stream());
    engine.Push([&](const RunContext& ctx) { launch(ctx, [&] { ++b_value; }); }, {x}, {b}, on_stream());
  });
  engine.Push([](const RunContext&) { throw std::runtime_error("x is bad"); }, {}, {x}, on_stream());
  engine.Replay(step);
  engine.WaitForVar(a);
  CHECK(a_value == 1);
  CHECK_THROWS_WITH(engine.WaitForVar(b), Contains("x is bad"));
  CHECK(b_value == 0);
  CHECK_THROWS_WITH(engine.WaitForVar(x), Contains("x is bad"));
  CHECK_NOTHROW(engine.WaitForAll());
}

TEST_CASE("a replay waiting for a failed stream is skipped whole, and still counts every captured mutation",
          "[stream_graph][errors]") {
  Watchdog watchdog("stream graph after a failed stream");
  for (const bool records : {false, true}) {
    DYNAMIC_SECTION((records ? "recorded" : "called")) {
      Engine engine(stream_engine_options({.records_work = records}));
      const Var x = engine.NewVariable();
      const Var a = engine.NewVariable();
      int ran = 0;
      const Graph step = engine.Capture([&] {
        engine.Push([&](const RunContext& ctx) { launch(ctx, [&] { ++ran; }); }, {x}, {a}, on_stream(1));
        engine.Push([&](const RunContext& ctx) { launch(ctx, [&] { ++ran; }); }, {}, {a}, on_stream(1));
      });
      // Stream 0 fails in the op that writes x: the replay then waits for a stream that failed before producing x.
      // (A later op on stream 0, on y, says when the failure is known; waiting on x would clear x's error.)
      const Var y = engine.NewVariable();
      engine.Push([](const RunContext& ctx) { launch(ctx, [] { throw std::runtime_error("device fault"); }); }, {}, {x},
                  on_stream(0));
      engine.Push([](const RunContext& ctx) { launch(ctx, [] {}); }, {}, {y}, on_stream(0));
      CHECK_THROWS_WITH(engine.WaitForVar(y), Contains("device fault"));
      engine.Replay(step);
      CHECK_THROWS_WITH(engine.WaitForVar(a), Contains("device fault"));
      CHECK(ran == 0);
      CHECK(engine.Version(a) == 2);  // as the two pushed ops would have counted, skipped or not
      CHECK_THROWS_WITH(engine.WaitForVar(x), Contains("device fault"));
      CHECK_NOTHROW(engine.WaitForAll());
    }
  }
}

// On a backend that records work (HostStreamOptions::records_work stands in for CUDA graphs): the first replay
// records what the steps enqueue, and every replay launches that recording.
TEST_CASE("a recorded graph of stream ops: recorded by its first replay, relaunched by every replay",
          "[stream_graph][recorded]") {
  Watchdog watchdog("recorded stream graph");
  const int replays = static_cast<int>(sized(60, 20, 20));
  StreamEngine engine({.launch_delay = std::chrono::microseconds(20), .records_work = true});
  REQUIRE(stream_executor(engine).records_work());
  const Var a = engine.NewVariable();
  const Var b = engine.NewVariable();
  std::int64_t a_value = 1;
  std::int64_t b_value = 0;
  std::int64_t input = 0;  // written by a pushed op before each replay; the recorded work reads it when it runs
  int functions_called = 0;
  const Graph step = engine.Capture([&] {
    engine.Push(
        [&](const RunContext& ctx) {
          ++functions_called;
          launch(ctx, [&] { a_value = (a_value * 3 + input) % 1000003; });
        },
        {}, {a}, on_stream(0));
    engine.Push(
        [&](const RunContext& ctx) {
          ++functions_called;
          launch(ctx, [&] { b_value = (b_value + a_value) % 1000003; });
        },
        {a}, {b}, on_stream(1));
  });
  std::int64_t a_serial = 1;
  std::int64_t b_serial = 0;
  for (int k = 0; k < replays; ++k) {
    engine.Push([&, k](const RunContext& ctx) { launch(ctx, [&, k] { input = k; }); }, {}, {a}, on_stream());
    engine.Replay(step);
    a_serial = (a_serial * 3 + k) % 1000003;
    b_serial = (b_serial + a_serial) % 1000003;
  }
  engine.WaitForVar(b);
  CHECK(a_value == a_serial);
  CHECK(b_value == b_serial);
  CHECK(functions_called == 2);  // once, while the first replay recorded them
  CHECK(engine.Version(a) == static_cast<std::uint64_t>(2 * replays));
  CHECK(engine.Version(b) == static_cast<std::uint64_t>(replays));
  engine.WaitForAll();
}

TEST_CASE("a recorded graph of stream ops runs whole: an input error skips it, a throw while recording fails it",
          "[stream_graph][recorded][errors]") {
  Watchdog watchdog("recorded stream graph errors");
  Engine engine(stream_engine_options({.records_work = true}));
  const Var x = engine.NewVariable();
  const Var a = engine.NewVariable();
  const Var b = engine.NewVariable();
  int a_value = 0, b_value = 0;
  bool fail_while_recording = true;
  const Graph step = engine.Capture([&] {
    engine.Push([&](const RunContext& ctx) { launch(ctx, [&] { ++a_value; }); }, {}, {a}, on_stream());
    engine.Push(
        [&](const RunContext& ctx) {
          if (fail_while_recording) throw std::runtime_error("cannot record step 2");
          launch(ctx, [&] { ++b_value; });
        },
        {x}, {b}, on_stream());
  });
  engine.Replay(step);  // step 2 throws while the replay records: the replay fails, both outputs take the error
  CHECK_THROWS_WITH(engine.WaitForVar(a), Contains("cannot record step 2"));
  CHECK_THROWS_WITH(engine.WaitForVar(b), Contains("cannot record step 2"));
  CHECK(a_value == 0);  // nothing recorded ran

  fail_while_recording = false;
  engine.Replay(step);  // records again, and runs
  engine.WaitForVar(b);
  CHECK(a_value == 1);
  CHECK(b_value == 1);

  // x carries an error: the whole recorded work is skipped, and both outputs take the error.
  engine.Push([](const RunContext&) { throw std::runtime_error("x is bad"); }, {}, {x}, on_stream());
  engine.Replay(step);
  CHECK_THROWS_WITH(engine.WaitForVar(a), Contains("x is bad"));
  CHECK_THROWS_WITH(engine.WaitForVar(b), Contains("x is bad"));
  CHECK_THROWS_WITH(engine.WaitForVar(x), Contains("x is bad"));
  CHECK(a_value == 1);
  CHECK(b_value == 1);
  CHECK_NOTHROW(engine.WaitForAll());
}

TEST_CASE("a capture of stream ops refuses what one stream op cannot stand for", "[stream_graph][misuse]") {
  Watchdog watchdog("stream graph misuse");
  Engine engine(stream_engine_options({.devices = 2}));
  const Var v = engine.NewVariable();
  const Var w = engine.NewVariable();
  SECTION("a CPU op") {
    const Graph graph = engine.Capture([&] {
      CHECK_THROWS_WITH(engine.Push([] {}, {}, {v}, PushOptions{.context = {.executor = kCpu}}),
                        Contains("stream ops only"));
    });
    CHECK(graph.empty());
  }
  SECTION("ops on two devices") {
    const Graph graph = engine.Capture([&] {
      engine.Push([](const RunContext&) {}, {}, {v}, on_stream(-1, 0));
      CHECK_THROWS_WITH(engine.Push([](const RunContext&) {}, {}, {w}, on_stream(-1, 1)), Contains("one device"));
    });
    CHECK(graph.size() == 1);
  }
  SECTION("ops on two kinds of stream") {
    Engine copying(stream_engine_options({.devices = 1, .copy_streams = 1}));  // a copy stream to name
    const Var a = copying.NewVariable(), b = copying.NewVariable();
    const Graph graph = copying.Capture([&] {
      copying.Push([](const RunContext&) {}, {}, {a}, on_stream());
      CHECK_THROWS_WITH(copying.Push([](const RunContext&) {}, {}, {b}, on_stream(-1, 0, StreamKind::kCopy)),
                        Contains("one kind of stream"));
    });
    CHECK(graph.size() == 1);
  }
  SECTION("ops of two CancelScopes, or of a scope and none") {
    // One op per replay belongs to one scope (test/engine/epoch_resume_test.cpp runs graphs of one scope).
    CancelScope scope, other;
    PushOptions options = on_stream();
    options.scope = &scope;
    PushOptions other_options = on_stream();
    other_options.scope = &other;
    const Graph graph = engine.Capture([&] {
      engine.Push([](const RunContext&) {}, {}, {v}, options);
      engine.Push([](const RunContext&) {}, {}, {w}, options);
      CHECK_THROWS_WITH(engine.Push([](const RunContext&) {}, {}, {w}, other_options), Contains("CancelScope"));
      CHECK_THROWS_WITH(engine.Push([](const RunContext&) {}, {}, {w}, on_stream()), Contains("CancelScope"));
    });
    CHECK(graph.size() == 2);
  }
  SECTION("a replay naming a deleted variable") {
    const Var temporary = engine.NewVariable();
    const Graph graph = engine.Capture([&] { engine.Push([](const RunContext&) {}, {v}, {temporary}, on_stream()); });
    engine.DeleteVariable(temporary);
    CHECK_THROWS_WITH(engine.Replay(graph), Contains("Replay") && Contains("deleted"));
  }
  engine.WaitForAll();
}

}  // namespace
}  // namespace depengine::test
