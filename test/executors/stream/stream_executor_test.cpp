// StreamExecutor driven by an engine on the host backend: the canonical scenarios with the exact device waits the
// design gives (each explained where it is checked), two-level readiness (a CPU successor of a stream op waits for
// completion, and no worker blocks meanwhile), errors, placement and misuse.
//
// Wait counts are made independent of timing by holding the first stream op on a StreamGate until every op of the
// scenario has been issued: nothing completes early, so no entry is elided for being complete already.
#include <algorithm>
#include <array>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "test/engine/test_support.h"
#include "test/engine/trace_file.h"
#include "test/executors/stream/stream_executor_support.h"

namespace depengine::test {
namespace {

TEST_CASE("a same-stream chain of 1,000 ops issues no device wait", "[stream_executor]") {
  Watchdog watchdog("same-stream chain");
  StreamEngine engine;
  Var x = engine.NewVariable();
  StreamGate gate;
  std::uint64_t value = 0;  // touched only by stream work, in stream order
  engine.Push([&](const RunContext& ctx) { launch(ctx, [&] { gate.hold(); }); }, {}, {x}, on_stream());
  constexpr int kOps = 1000;
  for (int i = 0; i < kOps; ++i) {
    engine.Push([&, i](const RunContext& ctx) { launch(ctx, [&, i] { value = mix(value, std::uint64_t(i)); }); }, {},
                {x}, on_stream());
  }
  // Each op's wait frontier is {(S, previous epoch)}. The chooser keeps it on S, the only stream whose tail it
  // depends on and that knows that entry, and FIFO order holds the dependency: 1,000 elided, 0 issued.
  const StreamStats issued = stream_executor(engine).stats();
  CHECK(issued.ops_issued == kOps + 1);
  CHECK(issued.waits_issued == 0);
  CHECK(issued.waits_elided == kOps);
  CHECK(issued.waits_complete == 0);
  gate.open();
  engine.WaitForVar(x);
  std::uint64_t expected = 0;
  for (int i = 0; i < kOps; ++i) expected = mix(expected, std::uint64_t(i));
  CHECK(value == expected);
  CHECK(stream_executor(engine).stats(0, StreamKind::kCompute, 1).ops_issued == 0);  // all on one stream
  CHECK(stream_executor(engine).stats().host_synchronizations == 0);
}

TEST_CASE("a fork over 4 streams and its join wait exactly where the streams do not know", "[stream_executor]") {
  Watchdog watchdog("fork-join");
  StreamEngine engine({.compute_streams = 4});
  Var x = engine.NewVariable(), z = engine.NewVariable();
  Var y[4] = {engine.NewVariable(), engine.NewVariable(), engine.NewVariable(), engine.NewVariable()};
  StreamGate gate;
  std::uint64_t xv = 0, yv[4] = {}, zv = 0;
  engine.Push([&](const RunContext& ctx) { launch(ctx, [&] { gate.hold(), xv = 7; }); }, {}, {x}, on_stream());
  for (int i = 0; i < 4; ++i) {
    engine.Push([&, i](const RunContext& ctx) { launch(ctx, [&, i] { yv[i] = mix(xv, std::uint64_t(i)); }); }, {x},
                {y[i]}, on_stream());
  }
  engine.Push([&](const RunContext& ctx) { launch(ctx, [&] { zv = mix(mix(yv[0], yv[1]), mix(yv[2], yv[3])); }); },
              {y[0], y[1], y[2], y[3]}, {z}, on_stream());
  // Fork: the first branch stays on S0 behind x's producer (its entry (S0,1) elided). S0 now has a tail the other
  // branches do not depend on, so they go to the unused S1..S3, each waiting once on (S0,1): 3 waits.
  // Join: its frontier {(S0,2),(S1,1),(S2,1),(S3,1)}; every stream's tail is in it and each knows exactly one entry
  // (its own), so it waits for the other three: 3 waits, 1 elided. In all 6 issued, 2 elided.
  const StreamStats stats = stream_executor(engine).stats();
  CHECK(stats.ops_issued == 6);
  CHECK(stats.waits_issued == 6);
  CHECK(stats.waits_elided == 2);
  for (std::uint32_t s = 0; s < 4; ++s) {
    CAPTURE(s);
    CHECK(stream_executor(engine).stats(0, StreamKind::kCompute, s).ops_issued >= 1);  // every stream got a branch
  }
  gate.open();
  engine.WaitForVar(z);
  CHECK(zv == mix(mix(mix(7, 0), mix(7, 1)), mix(mix(7, 2), mix(7, 3))));
}

TEST_CASE("a transitive chain over 3 streams: the third waits on the second only", "[stream_executor]") {
  Watchdog watchdog("transitive chain");
  StreamEngine engine({.compute_streams = 3});
  Var x = engine.NewVariable(), y = engine.NewVariable(), z = engine.NewVariable();
  StreamGate gate;
  std::uint64_t xv = 0, yv = 0, zv = 0;
  engine.Push([&](const RunContext& ctx) { launch(ctx, [&] { gate.hold(), xv = 3; }); }, {}, {x}, on_stream(0));
  engine.Push([&](const RunContext& ctx) { launch(ctx, [&] { yv = xv + 1; }); }, {x}, {y}, on_stream(1));
  engine.Push([&](const RunContext& ctx) { launch(ctx, [&] { zv = xv * 10 + yv; }); }, {x, y}, {z}, on_stream(2));
  // The second op waits on (S0,1). The third needs {(S0,1),(S1,1)}; the event of (S1,1) was recorded after S1's wait
  // on (S0,1), so it implies it: one wait on S1, and (S0,1) elided.
  const StreamExecutor& streams = stream_executor(engine);
  CHECK(streams.stats(0, StreamKind::kCompute, 1).waits_issued == 1);
  CHECK(streams.stats(0, StreamKind::kCompute, 2).waits_issued == 1);
  CHECK(streams.stats(0, StreamKind::kCompute, 2).waits_elided == 1);
  CHECK(streams.stats().waits_issued == 2);
  gate.open();
  engine.WaitForVar(z);
  CHECK(zv == 34);
}

TEST_CASE("a write after reads on other streams waits for every read (write-after-read on the device)",
          "[stream_executor]") {
  Watchdog watchdog("write after read");
  StreamEngine engine({.compute_streams = 3});
  Var x = engine.NewVariable(), a = engine.NewVariable(), b = engine.NewVariable();
  StreamGate gate;
  std::uint64_t xv = 1, av = 0, bv = 0;
  engine.Push([&](const RunContext& ctx) { launch(ctx, [&] { gate.hold(), av = xv; }); }, {x}, {a}, on_stream(0));
  engine.Push([&](const RunContext& ctx) { launch(ctx, [&] { bv = xv; }); }, {x}, {b}, on_stream(1));
  engine.Push([&](const RunContext& ctx) { launch(ctx, [&] { xv = 99; }); }, {}, {x}, on_stream(2));
  CHECK(stream_executor(engine).stats(0, StreamKind::kCompute, 2).waits_issued == 2);
  gate.open();
  engine.WaitForAll();
  CHECK(av == 1);  // the reads saw the value before the write
  CHECK(bv == 1);
  CHECK(xv == 99);
}

TEST_CASE("a CPU op after a delayed stream op never runs before that op completes", "[stream_executor]") {
  Watchdog watchdog("CPU after stream");
  // Simulated device time: every launch sleeps 2 ms on its stream's thread before running.
  Engine engine(stream_engine_options({.launch_delay = std::chrono::milliseconds(2)}));
  constexpr int kRounds = 20;
  std::atomic<int> early{0};
  for (int round = 0; round < kRounds; ++round) {
    Var x = engine.NewVariable();
    auto done = std::make_shared<std::atomic<bool>>(false);
    engine.Push(
        [done](const RunContext& ctx) {
          launch(ctx, [done] { done->store(true, std::memory_order_release); });  // pairs with the acquire below
        },
        {}, {x}, on_stream());
    engine.Push(
        [done, &early] {
          // acquire: pairs with the release above, if the stream op has run.
          if (!done->load(std::memory_order_acquire)) early.fetch_add(1, std::memory_order_relaxed);
        },
        {x}, {}, PushOptions{.context = {.executor = kCpu}});
    engine.DeleteVariable(x);
  }
  engine.WaitForAll();
  CHECK(early.load(std::memory_order_relaxed) == 0);
}

// A stream op's completion must reach its CPU successors once the device has run that op, not once the work queued
// behind it has run too: the long op Y below is held until the CPU successor of X has run, so an executor that reports
// X only with Y (one notification shared by X and Y, requested while W's was in flight) never lets Y finish, and Y's
// gate times out, failing the stream (WaitForAll throws).
TEST_CASE("a CPU op after a fast stream op does not wait for a long op issued behind it", "[stream_executor]") {
  for (const StreamCompletion completion : {StreamCompletion::kNotify, StreamCompletion::kPoll}) {
    DYNAMIC_SECTION((completion == StreamCompletion::kNotify ? "notify" : "poll")) {
      Watchdog watchdog("completion behind a long op");
      Engine engine(stream_engine_options({.compute_streams = 1, .completion = completion}));
      const Var w = engine.NewVariable(), x = engine.NewVariable(), y = engine.NewVariable(), z = engine.NewVariable();
      StreamGate lead, behind;
      std::atomic<bool> cpu_ran{false};
      // W is still running (its notification, if any, in flight) while X and Y are issued.
      engine.Push([&](const RunContext& ctx) { launch(ctx, [&lead] { lead.hold(); }); }, {}, {w}, on_stream(0));
      engine.Push([](const RunContext& ctx) { launch(ctx, [] {}); }, {}, {x}, on_stream(0));
      engine.Push([&](const RunContext& ctx) { launch(ctx, [&behind] { behind.hold(); }); }, {}, {y}, on_stream(0));
      engine.Push(
          [&] {
            cpu_ran.store(true, std::memory_order_relaxed);  // relaxed: read after WaitForAll
            behind.open();
          },
          {x}, {z}, PushOptions{.context = {.executor = kCpu}});
      lead.open();
      CHECK_NOTHROW(engine.WaitForAll());
      CHECK(cpu_ran.load(std::memory_order_relaxed));
    }
  }
}

TEST_CASE("no worker thread blocks while device work is pending", "[stream_executor]") {
  Watchdog watchdog("no blocked worker");
  // One CPU worker: had it blocked on the held stream op, none of the independent CPU ops could run.
  Engine engine(stream_engine_options({.workers = 1}));
  Var x = engine.NewVariable(), y = engine.NewVariable();
  StreamGate gate;
  std::atomic<bool> dependent_ran{false};
  engine.Push([&](const RunContext& ctx) { launch(ctx, [&] { gate.hold(); }); }, {}, {x}, on_stream());
  engine.Push([&] { dependent_ran.store(true, std::memory_order_relaxed); }, {x}, {y});  // parked on the tracker
  constexpr int kIndependent = 200;
  std::atomic<int> independent{0};
  for (int i = 0; i < kIndependent; ++i) {
    Var v = engine.NewVariable();
    engine.Push([&] { independent.fetch_add(1, std::memory_order_relaxed); }, {}, {v});
  }
  CHECK(wait_until([&] { return independent.load(std::memory_order_relaxed) == kIndependent; }));
  CHECK_FALSE(dependent_ran.load(std::memory_order_relaxed));
  gate.open();
  engine.WaitForVar(y);
  CHECK(dependent_ran.load(std::memory_order_relaxed));
}

TEST_CASE("WaitForVar waits for device completion, not for issue", "[stream_executor]") {
  Watchdog watchdog("WaitForVar completion");
  Engine engine(stream_engine_options());
  Var x = engine.NewVariable();
  std::atomic<int> value{0};
  for (int i = 1; i <= 50; ++i) {
    engine.Push(
        [&, i](const RunContext& ctx) {
          launch(ctx, [&, i] {
            linger(256);
            value.store(i, std::memory_order_relaxed);
          });
        },
        {}, {x}, on_stream());
    engine.WaitForVar(x);
    CHECK(value.load(std::memory_order_relaxed) == i);
  }
  engine.WaitForAll();
  CHECK(engine.InFlight() == 0);
}

TEST_CASE("a failed stream op's error reaches WaitForVar on its outputs and on its dependents' outputs",
          "[stream_executor][errors]") {
  Watchdog watchdog("stream errors");
  Engine engine(stream_engine_options({.compute_streams = 2}));
  Var x = engine.NewVariable(), cpu_out = engine.NewVariable(), stream_out = engine.NewVariable(),
      later = engine.NewVariable();
  std::atomic<bool> cpu_ran{false};
  engine.Push([](const RunContext& ctx) { launch(ctx, [] { throw OpFailure(41); }); }, {}, {x}, on_stream(0));
  engine.Push([&] { cpu_ran.store(true, std::memory_order_relaxed); }, {x}, {cpu_out});
  engine.Push([](const RunContext& ctx) { launch(ctx, [] {}); }, {x}, {stream_out}, on_stream(1));
  // The backend reports a StreamError whose cause is the host function's exception.
  auto cause_of = [&](Var v) {
    try {
      engine.WaitForVar(v);
    } catch (const StreamError& e) {
      return thrown_id([&] { std::rethrow_exception(e.cause()); });
    } catch (...) {
      return -2;
    }
    return 0;
  };
  CHECK(cause_of(x) == 41);
  CHECK(cause_of(cpu_out) == 41);
  CHECK_FALSE(cpu_ran.load(std::memory_order_relaxed));  // skipped: its input failed
  CHECK(cause_of(stream_out) == 41);
  CHECK(cause_of(x) == 0);  // reported once
  // The stream stays failed (a dead context runs nothing): an op placed on it later fails with the same error.
  engine.Push([](const RunContext& ctx) { launch(ctx, [] {}); }, {}, {later}, on_stream(0));
  CHECK(cause_of(later) == 41);
  CHECK_NOTHROW(engine.WaitForAll());  // one error (the stream's), reported by the waits above
}

TEST_CASE("an exception from a stream op's function is the op's error, as for a CPU op", "[stream_executor][errors]") {
  Watchdog watchdog("issue error");
  Engine engine(stream_engine_options());
  Var x = engine.NewVariable(), y = engine.NewVariable();
  engine.Push([](const RunContext&) { throw OpFailure(5); }, {}, {x}, on_stream());
  std::atomic<bool> ran{false};
  engine.Push([&](const RunContext&) { ran.store(true, std::memory_order_relaxed); }, {x}, {y}, on_stream());
  CHECK(thrown_id([&] { engine.WaitForVar(y); }) == 5);
  CHECK_FALSE(ran.load(std::memory_order_relaxed));
  CHECK(thrown_id([&] { engine.WaitForAll(); }) == 0);  // reported by WaitForVar
  // The stream itself is fine.
  engine.Push([](const RunContext& ctx) { launch(ctx, [] {}); }, {}, {x}, on_stream());
  engine.WaitForVar(x);
}

TEST_CASE("placement: devices, kinds, pinned streams, and what a stream op's function is given", "[stream_executor]") {
  Watchdog watchdog("placement");
  StreamEngine engine({.devices = 2, .compute_streams = 2, .copy_streams = 1});
  const StreamExecutor& streams = stream_executor(engine);
  Var v = engine.NewVariable();
  std::vector<StreamPlacement> seen;
  auto record = [&](const RunContext& ctx) {
    REQUIRE(ctx.stream != nullptr);
    seen.push_back(*ctx.stream);
  };
  engine.Push(record, {}, {v}, on_stream(1, 1, StreamKind::kCompute));
  engine.Push(record, {}, {v}, on_stream(0, 1, StreamKind::kCopy));
  engine.Push(record, {}, {v}, on_stream(-1, 0, StreamKind::kCopy));
  engine.WaitForVar(v);
  REQUIRE(seen.size() == 3);
  CHECK(seen[0].device == 1);
  CHECK(seen[0].kind == StreamKind::kCompute);
  CHECK(seen[0].index == 1);
  CHECK(seen[0].axis == streams.axis(1, StreamKind::kCompute, 1));
  CHECK(seen[0].epoch == 1);
  CHECK(seen[0].backend == &streams.backend());
  CHECK(seen[0].native == streams.backend().native_handle(seen[0].stream));
  CHECK(seen[1].device == 1);
  CHECK(seen[1].kind == StreamKind::kCopy);
  CHECK(seen[2].device == 0);
  CHECK(seen[2].kind == StreamKind::kCopy);
  CHECK(streams.stats().ops_issued == 3);
  // A CPU op sees no stream, and as its waits what it waited for, completed: the signal of the stream op before it.
  Var u = engine.NewVariable();
  StreamPlacement producer;
  engine.Push([&](const RunContext& ctx) { producer = *ctx.stream; }, {}, {u}, on_stream(1, 0, StreamKind::kCompute));
  bool cpu_stream_null = false;
  WaitFrontier cpu_waits;
  engine.Push(
      [&](const RunContext& ctx) {
        cpu_stream_null = ctx.stream == nullptr;
        if (ctx.waits != nullptr) cpu_waits = *ctx.waits;
      },
      {u}, {v});
  engine.WaitForVar(v);
  CHECK(cpu_stream_null);
  CHECK(cpu_waits == WaitFrontier{{producer.axis, producer.epoch}});
  // A stream op sees its wait frontier: here the signal of the last op on v, issued on device 0's copy stream.
  WaitFrontier waits;
  engine.Push([&](const RunContext& ctx) { waits = *ctx.waits; }, {v}, {}, on_stream(0, 0, StreamKind::kCopy));
  engine.WaitForVar(v);
  CHECK(waits == WaitFrontier{});  // the last op on v was a CPU op: it completed, nothing to wait for
  Var w = engine.NewVariable();
  engine.Push([](const RunContext&) {}, {}, {w}, on_stream(0, 0, StreamKind::kCompute));
  engine.Push([&](const RunContext& ctx) { waits = *ctx.waits; }, {w}, {}, on_stream(1, 0, StreamKind::kCompute));
  engine.WaitForVar(w);
  CHECK(waits == WaitFrontier{{streams.axis(0, StreamKind::kCompute, 0), 1}});
}

TEST_CASE("an all-reduce on a collective channel is one frontier entry: each device's next op waits once, not N times",
          "[stream_executor][collective]") {
  Watchdog watchdog("collective channel");
  constexpr int kDevices = 3;
  StreamEngine engine({.devices = kDevices, .compute_streams = 1, .collective_channels = 1});
  const StreamExecutor& streams = stream_executor(engine);
  const Axis channel = streams.axis(0, StreamKind::kCollective, 0);
  CHECK(channel.domain() == AxisDomain::kCollective);
  CHECK(streams.axis_name(channel) == "collective 0");
  CHECK(streams.axis_name(streams.axis(2, StreamKind::kCompute, 0)) == "d2 compute 0");
  StreamGate gate;
  Var grads[kDevices], outs[kDevices];
  std::uint64_t grad[kDevices] = {}, out[kDevices] = {};
  for (int d = 0; d < kDevices; ++d) {
    grads[d] = engine.NewVariable();
    outs[d] = engine.NewVariable();
    engine.Push(
        [&, d](const RunContext& ctx) {
          launch(ctx, [&, d] {
            gate.hold();  // every device: nothing completes before every op is issued
            grad[d] = static_cast<std::uint64_t>(d + 1);
          });
        },
        {}, {grads[d]}, on_stream(-1, static_cast<std::uint32_t>(d)));
  }
  // The all-reduce: one op on the channel, which waits for each device's stream, sums, and writes every copy.
  engine.Push(
      [&](const RunContext& ctx) {
        CHECK(ctx.stream->kind == StreamKind::kCollective);
        CHECK(ctx.stream->axis == channel);
        launch(ctx, [&] {
          const std::uint64_t sum = grad[0] + grad[1] + grad[2];
          for (std::uint64_t& g : grad) g = sum;
        });
      },
      {}, {grads[0], grads[1], grads[2]}, on_stream(-1, 0, StreamKind::kCollective));
  std::vector<WaitFrontier> consumer_waits(kDevices);
  for (int d = 0; d < kDevices; ++d) {
    engine.Push(
        [&, d](const RunContext& ctx) {
          consumer_waits[static_cast<std::size_t>(d)] = *ctx.waits;
          launch(ctx, [&, d] { out[d] = grad[d] * 10 + static_cast<std::uint64_t>(d); });
        },
        {grads[d]}, {outs[d]}, on_stream(-1, static_cast<std::uint32_t>(d)));
  }
  // The channel waited on the three device streams; each device's consumer needs the channel's one entry, not one
  // per device, and waits once.
  CHECK(streams.stats(0, StreamKind::kCollective, 0).waits_issued == kDevices);
  for (int d = 0; d < kDevices; ++d) {
    CAPTURE(d);
    CHECK(consumer_waits[static_cast<std::size_t>(d)] == WaitFrontier{{channel, 1}});
    CHECK(streams.stats(static_cast<std::uint32_t>(d), StreamKind::kCompute, 0).waits_issued == 1);
  }
  gate.open();
  for (int d = 0; d < kDevices; ++d) {
    engine.WaitForVar(outs[d]);
    CHECK(out[d] == 60 + static_cast<std::uint64_t>(d));
  }
}

TEST_CASE("a trace of stream ops: a lane per stream, arrows from the issue, and device-wait counters",
          "[stream_executor][trace]") {
  Watchdog watchdog("stream trace");
  const std::string path = temporary_trace_path("streams");
  {
    Engine engine(stream_engine_options({.compute_streams = 2}));
    Var x = engine.NewVariable(), y = engine.NewVariable(), z = engine.NewVariable();
    engine.StartTrace(path);
    HeldOp gate(engine, {}, {x}, {.name = "gate"});  // a CPU op: everything below is pushed before any of it is ready
    engine.Push([](const RunContext&) {}, {x}, {y}, {.context = on_stream(0).context, .name = "first"});
    engine.Push([](const RunContext&) {}, {y}, {z}, {.context = on_stream(1).context, .name = "second"});
    engine.Push([] {}, {z}, {}, {.context = {.executor = kCpu}, .name = "cpu"});
    REQUIRE(gate.release());
    engine.StopTrace();
  }
  const TraceFile trace = read_trace(path);
  std::remove(path.c_str());
  REQUIRE(trace.slices.size() == 4);
  std::map<std::string, TraceFile::Slice> by_name;
  std::map<std::string, std::uint64_t> ids;
  for (const auto& [id, slice] : trace.slices) {
    by_name[slice.name] = slice;
    ids[slice.name] = id;
  }
  CHECK(trace.lanes.at(by_name.at("first").tid) == "stream d0 compute 0");
  CHECK(trace.lanes.at(by_name.at("second").tid) == "stream d0 compute 1");
  CHECK(trace.lanes.at(by_name.at("cpu").tid).find("stream") == std::string::npos);
  // The gate released "first"; "second" was ordered after "first" (another stream: a device wait, or none if "first"
  // had completed by then); the CPU op waited for "second" to complete. An arrow from a stream op starts where its
  // slice does (it releases at its issue). No arrow from "first" to the CPU op: that dependency runs through "second".
  REQUIRE(trace.flows.size() == 3);
  const std::array<std::array<const char*, 3>, 3> edges = {
      {{"gate", "first", "release"}, {"first", "second", "device wait"}, {"second", "cpu", "host wait"}}};
  for (const auto& edge : edges) {
    const std::string from = edge[0], to = edge[1], kind = edge[2];
    CAPTURE(from, to);
    const auto flow = std::find_if(trace.flows.begin(), trace.flows.end(),
                                   [&](const TraceFile::Flow& f) { return f.from == ids.at(from); });
    REQUIRE(flow != trace.flows.end());
    CHECK(flow->to == ids.at(to));
    if (from == "first") {
      CHECK((flow->name == "device wait" || flow->name == "elided"));
    } else {
      CHECK(flow->name == kind);
    }
    if (from != "gate") CHECK(flow->from_ts == by_name.at(from).ts);
  }
  CHECK(by_name.at("cpu").ts >= by_name.at("second").ts + by_name.at("second").dur - 0.002);
  CHECK(trace.counters.at("device waits") == 2);  // one sample per stream op
}

// Issue 48, item 3: stream ops are ready at their push when what they depend on was issued already, so no release drew
// their arrows (training_loop --device streams: 2,727 slices, 0 arrows). Now every dependency on a stream op has one.
TEST_CASE("a trace of stream ops ready at their push has an arrow for every dependency, elided waits marked",
          "[stream_executor][trace]") {
  Watchdog watchdog("stream trace arrows");
  const std::string path = temporary_trace_path("stream-arrows");
  {
    Engine engine(stream_engine_options({.compute_streams = 2}));
    Var x = engine.NewVariable(), y = engine.NewVariable(), z = engine.NewVariable(), w = engine.NewVariable();
    engine.StartTrace(path);
    // Each is pushed after the one it depends on was issued: ready at its push, released by nothing. "a"'s work holds
    // its stream until `go`, so no stream op completes before all are issued (a completed one needs no device wait).
    std::atomic<bool> go{false};
    engine.Push(
        [&go](const RunContext& ctx) {
          // acquire: pairs with the release store below.
          launch(ctx, [&go] { go.wait(false, std::memory_order_acquire); });
        },
        {}, {x}, {.context = on_stream(0).context, .name = "a"});
    engine.Push([](const RunContext&) {}, {x}, {y}, {.context = on_stream(0).context, .name = "b"});  // same stream
    engine.Push([](const RunContext&) {}, {y}, {z}, {.context = on_stream(1).context, .name = "c"});  // waits for b
    engine.Push([](const RunContext&) {}, {x, z}, {w}, {.context = on_stream(1).context, .name = "d"});
    engine.Push([] {}, {w}, {}, {.context = {.executor = kCpu}, .name = "cpu"});  // parked until d has completed
    go.store(true, std::memory_order_release);  // release: pairs with the acquire in a's work
    go.notify_one();
    engine.StopTrace();  // waits for every op
  }
  const TraceFile trace = read_trace(path);
  std::remove(path.c_str());
  std::map<std::uint64_t, std::string> name;
  for (const auto& [id, slice] : trace.slices) name[id] = slice.name;
  std::set<std::array<std::string, 3>> arrows;
  for (const TraceFile::Flow& flow : trace.flows) arrows.insert({name.at(flow.from), name.at(flow.to), flow.name});
  // d depends on a through x too, but c, which d's stream ran just before it, was ordered after a already.
  CHECK(arrows ==
        std::set<std::array<std::string, 3>>{
            {"a", "b", "elided"}, {"b", "c", "device wait"}, {"c", "d", "elided"}, {"d", "cpu", "host wait"}});
}

// A stream op's slice is when its stream ran it. On stream 0 an expensive op A (2 ms on the stream); on stream 1 an
// empty op B that reads A's output and C behind it. B is issued at once (submit-before-wait) and its stream waits for A
// on the device: before, its slice ran from its issue to the report of its completion, 2 ms for an empty op, drawn
// beside A as if the two had overlapped.
TEST_CASE("a trace shows each stream op when its stream ran it, not from its issue", "[stream_executor][trace]") {
  Watchdog watchdog("stream slices on the device");
  const std::string path = temporary_trace_path("device-time");
  {
    Engine engine(stream_engine_options({.compute_streams = 2}));
    const Var x = engine.NewVariable(), y = engine.NewVariable();
    engine.StartTrace(path);
    HeldOp gate(engine, {}, {x}, {.name = "gate"});  // A, B and C are issued back to back once it completes
    engine.Push(
        [](const RunContext& ctx) {
          launch(ctx, [] { std::this_thread::sleep_for(std::chrono::milliseconds(2)); });  // simulated device time
        },
        {}, {x}, {.context = on_stream(0).context, .name = "A"});
    engine.Push([](const RunContext& ctx) { launch(ctx, [] {}); }, {x}, {y},
                {.context = on_stream(1).context, .name = "B"});
    engine.Push([](const RunContext& ctx) { launch(ctx, [] {}); }, {y}, {},
                {.context = on_stream(1).context, .name = "C"});
    REQUIRE(gate.release());
    engine.StopTrace();
  }
  const TraceFile trace = read_trace(path);
  std::remove(path.c_str());
  std::map<std::string, TraceFile::Slice> by_name;
  for (const auto& [id, slice] : trace.slices) by_name[slice.name] = slice;
  const TraceFile::Slice &a = by_name.at("A"), &b = by_name.at("B"), &c = by_name.at("C");
  CAPTURE(a.ts, a.dur, b.ts, b.dur, c.ts, c.dur);
  CHECK(a.dur >= 2000);         // microseconds: A's 2 ms on its stream
  CHECK(b.ts >= a.ts + a.dur);  // B's stream started it once A was done
  CHECK(b.dur < a.dur);
  CHECK(c.ts >= b.ts + b.dur);
}

// Issue 48, item 4: stream ops that one CPU op's completion released together were issued in push order, ignoring
// their priorities, when the executor was idle (queued behind a busy issue they came out by priority).
TEST_CASE("stream ops released together are issued highest priority first", "[stream_executor][priority]") {
  for (const int workers : {1, 2}) {
    DYNAMIC_SECTION(workers << " worker(s)") {
      Watchdog watchdog("stream priorities");
      Engine engine(stream_engine_options({.workers = workers}));
      const Var v = engine.NewVariable();
      std::atomic<bool> go{false};
      // The releasing op runs on a pool worker, whose completion routes what it made ready (ThreadPoolExecutor::route).
      engine.Push([&go] { go.wait(false, std::memory_order_acquire); }, {}, {v});  // acquire: pairs with the store
      std::mutex mutex;
      std::vector<int> issued;  // priorities, in the order the ops were issued
      for (const int priority : {0, -5, 0, 1, 0, 10, 2}) {
        PushOptions options = on_stream();
        options.priority = priority;
        engine.Push(
            [&, priority](const RunContext&) {
              std::lock_guard lock(mutex);
              issued.push_back(priority);
            },
            {v}, {}, options);
      }
      go.store(true, std::memory_order_release);  // release: pairs with the acquire of the op's wait
      go.notify_one();
      engine.WaitForAll();
      std::lock_guard lock(mutex);
      CHECK(issued == std::vector<int>{10, 2, 1, 0, 0, 0, -5});
    }
  }
}

TEST_CASE("bad placement is refused at the push, and misuse gets clear errors", "[stream_executor][errors]") {
  Watchdog watchdog("stream misuse");
  Engine engine(stream_engine_options({.devices = 1, .compute_streams = 2, .copy_streams = 0}));
  Var v = engine.NewVariable();
  bool ran = false;
  auto op = [&ran] { ran = true; };
  CHECK_THROWS_WITH(engine.Push(op, {}, {v}, on_stream(-1, 3)), Catch::Contains("PushOptions::context") &&
                                                                    Catch::Contains("names device 3") &&
                                                                    Catch::Contains("1 device(s)"));
  CHECK_THROWS_WITH(engine.Push(op, {}, {v}, on_stream(5)), Catch::Contains("stream 5 of kind compute"));
  CHECK_THROWS_WITH(engine.Push(op, {}, {v}, on_stream(-1, 0, StreamKind::kCopy)), Catch::Contains("0 copy stream(s)"));
  CHECK_THROWS_WITH(engine.Push(op, {}, {v}, on_stream(-1, 0, StreamKind::kCollective)),
                    Catch::Contains("0 collective stream(s)"));
  CHECK_THROWS_WITH(engine.DeleteVariable(v, op, on_stream(-1, 2)), Catch::Contains("names device 2"));
  CHECK(engine.InFlight() == 0);  // nothing was pushed
  engine.WaitForVar(v);           // and v is clean and alive
  CHECK_FALSE(ran);
  CHECK(engine.Version(v) == 0);
  CHECK_THROWS_WITH(engine.PushAsync([](Completion done) { done(); }, {}, {v}, on_stream()),
                    Catch::Contains("PushAsync") && Catch::Contains("stream executor"));
}

TEST_CASE("a stream executor needs a device, and an engine at most kMaxEngineAxes streams",
          "[stream_executor][errors]") {
  CHECK_THROWS_WITH(StreamExecutor(std::make_unique<HostStreamBackend>(HostStreamOptions{.devices = 0})),
                    Catch::Contains("host"));
  CHECK_THROWS_AS(StreamExecutor(std::make_unique<HostStreamBackend>(HostStreamOptions{.devices = 1}),
                                 StreamExecutorOptions{.devices = 2}),
                  StreamError);
  CHECK_THROWS_AS(StreamExecutor(std::make_unique<HostStreamBackend>(),
                                 StreamExecutorOptions{.compute_streams = 0, .copy_streams = 0}),
                  std::invalid_argument);
  EngineOptions options;
  options.executors.push_back(
      std::make_unique<StreamExecutor>(std::make_unique<HostStreamBackend>(HostStreamOptions{.devices = 11}),
                                       StreamExecutorOptions{.compute_streams = 2, .copy_streams = 1}));
  CHECK_THROWS_WITH(Engine(std::move(options)), Catch::Contains("33 streams") && Catch::Contains("at most 32") &&
                                                    Catch::Contains("fewer streams per device"));
}

// An 8-device node: 2 compute streams and a copy stream per device, and 2 collective channels, 26 axes in one engine.
// Every stream writes its own variable; one collective op reads all 26 (a wait frontier of 24 entries from other
// streams plus its own channel's predecessor); a CPU op after it sees every write. The writes hold at a gate until the
// collective is issued, so none has completed by then and its waits are device waits (not found complete on the
// tracker, which a slow push, as under ThreadSanitizer, let happen: waits_issued was 0 in 2 of about 30 runs there).
TEST_CASE("an engine takes 8 devices of 2 compute and 1 copy stream with 2 collective channels", "[stream_executor]") {
  Watchdog watchdog("26 stream axes");
  constexpr int kDevices = 8;
  EngineOptions options;
  options.emplace<ThreadPoolExecutor>(ThreadPoolOptions{.workers = 1});
  const ExecutorId<StreamExecutor> stream_id = options.emplace<StreamExecutor>(
      std::make_unique<HostStreamBackend>(HostStreamOptions{.devices = kDevices}),
      StreamExecutorOptions{.compute_streams = 2, .copy_streams = 1, .collective_channels = 2});
  Engine engine(std::move(options));
  for (int round = 0; round < 3; ++round) {
    std::vector<Var> vars;
    std::vector<int> written(kDevices * 3 + 1, 0);  // one per device stream, and one for channel 1
    StreamGate gate;
    auto write = [&](std::size_t index, PushOptions placement) {
      vars.push_back(engine.NewVariable());
      engine.Push(
          [&written, &gate, index](const RunContext& ctx) {
            launch(ctx, [&written, &gate, index] {
              gate.hold();
              written[index] = 1;
            });
          },
          {}, {vars.back()}, placement);
    };
    for (std::uint32_t device = 0; device < kDevices; ++device) {
      write(device * 3, on_stream(0, device));
      write(device * 3 + 1, on_stream(1, device));
      write(device * 3 + 2, on_stream(0, device, StreamKind::kCopy));
    }
    write(kDevices * 3, on_stream(1, 0, StreamKind::kCollective));
    Var sum = engine.NewVariable();
    int seen = -1;
    engine.Push(
        [&written, &seen](const RunContext& ctx) {
          launch(ctx, [&written, &seen] { seen = static_cast<int>(std::count(written.begin(), written.end(), 1)); });
        },
        vars, {sum}, on_stream(0, 0, StreamKind::kCollective));
    int seen_on_cpu = -1;
    engine.Push([&seen, &seen_on_cpu] { seen_on_cpu = seen; }, {sum}, {}, PushOptions{.context = {.executor = kCpu}});
    // The round's 26 stream ops issued (an op counts once its device waits are enqueued), then the writes may run.
    const std::uint64_t issued = 26 * static_cast<std::uint64_t>(round + 1);
    CHECK(wait_until([&] { return engine.executor(stream_id).stats().ops_issued >= issued; }));
    gate.open();
    engine.WaitForAll();
    CHECK(seen == kDevices * 3 + 1);
    CHECK(seen_on_cpu == kDevices * 3 + 1);
  }
  CHECK(engine.executor(stream_id).axis_count() == kDevices * 3 + 2);
  CHECK(engine.executor(stream_id).stats().waits_issued > 0);
}

}  // namespace
}  // namespace depengine::test
