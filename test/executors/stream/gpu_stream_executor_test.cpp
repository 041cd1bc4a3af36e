// StreamExecutor over the GPU backends that were built (CUDA, HIP). Without a device, constructing the executor
// raises the backend's clear "no CUDA device" / "no HIP device" StreamError and the rest is skipped with that reason.
// With one, ops move data with the backend's copies only (no kernels, so the test needs no device compiler):
// a value travels host -> device -> (device copies alternating between two compute streams and a copy stream) ->
// host, each step an engine op that depends on the previous one through a variable, and a CPU op checks it; the
// same journey ordered by a timeline alone (fences), pushed last step first; and the device part of the journey
// captured as a graph, recorded by its first replay and relaunched by the others.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <depengine/engine/engine.h>
#include <depengine/executors/stream/stream_executor.h>
#include <depengine/executors/threadpool/threadpool_executor.h>

#include "test/executors/stream/stream_test_support.h"

namespace depengine::test {
namespace {

constexpr int kSteps = 200;
constexpr std::size_t kBytes = sizeof(std::uint64_t);

PushOptions placed(std::int32_t stream, StreamKind kind) {
  PushOptions o;
  o.context = Context{.executor = 1, .device = 0, .stream_kind = kind, .stream = stream};
  return o;
}

void print_stats(const std::string& what, const StreamStats& stats) {
  std::printf(
      "%s: %llu ops, %llu waits issued, %llu elided, %llu complete, %llu notifications, %llu host synchronisations\n",
      what.c_str(), static_cast<unsigned long long>(stats.ops_issued),
      static_cast<unsigned long long>(stats.waits_issued), static_cast<unsigned long long>(stats.waits_elided),
      static_cast<unsigned long long>(stats.waits_complete), static_cast<unsigned long long>(stats.notifications),
      static_cast<unsigned long long>(stats.host_synchronizations));
}

// Runs `body(engine, streams, name)` on an engine of a 1-worker pool (executor 0) and a StreamExecutor with 2 compute
// streams and 1 copy stream on device 0 (executor 1), once per GPU backend built; skips, saying why, without a device.
template <class Body>
void on_each_gpu(const char* what, Body&& body) {
  const auto factories = gpu_backend_factories();
  if (factories.empty()) {
    std::printf("%s: no GPU backend built\n", what);
    return;
  }
  for (const auto& factory : factories) {
    DYNAMIC_SECTION(factory.name) {
      std::unique_ptr<StreamBackend> backend = factory.make();
      if (backend->device_count() == 0) {
        const std::string status(backend->status());
        CHECK_THROWS_WITH(StreamExecutor(std::move(backend)), Catch::Contains(status));
        std::printf("%s %s: skipped: %s\n", what, factory.name.c_str(), status.c_str());
        continue;
      }
      Watchdog watchdog(std::string(what) + " " + factory.name);
      EngineOptions options;
      options.emplace<ThreadPoolExecutor>(ThreadPoolOptions{.workers = 1});
      const ExecutorId<StreamExecutor> streams = options.emplace<StreamExecutor>(
          std::move(backend), StreamExecutorOptions{.devices = 1, .compute_streams = 2, .copy_streams = 1});
      Engine engine(std::move(options));
      body(engine, engine.executor(streams), std::string(what) + " " + factory.name);
    }
  }
}

TEST_CASE("the stream executor on GPU backends: chains of device copies across streams", "[stream_executor][gpu]") {
  on_each_gpu("gpu stream executor", [](Engine& engine, StreamExecutor& streams, const std::string& name) {
    StreamBackend& gpu = streams.backend();
    void* a = gpu.allocate(0, kBytes);
    void* b = gpu.allocate(0, kBytes);
    Var va = engine.NewVariable(), vb = engine.NewVariable(), host = engine.NewVariable();
    std::vector<std::uint64_t> seen;
    for (std::uint64_t round = 1; round <= 5; ++round) {
      auto in = std::make_shared<std::uint64_t>(round * 1000);
      auto out = std::make_shared<std::uint64_t>(0);
      engine.Push(
          [in, a](const RunContext& ctx) {
            ctx.stream->backend->copy(ctx.stream->stream, a, in.get(), kBytes, CopyDirection::kHostToDevice);
          },
          {}, {va}, placed(0, StreamKind::kCopy));
      for (int step = 0; step < kSteps; ++step) {  // a -> b -> a ..., alternating compute streams
        const bool forward = step % 2 == 0;
        engine.Push(
            [a, b, forward](const RunContext& ctx) {
              ctx.stream->backend->copy(ctx.stream->stream, forward ? b : a, forward ? a : b, kBytes,
                                        CopyDirection::kDeviceToDevice);
            },
            {forward ? va : vb}, {forward ? vb : va}, placed(step % 2, StreamKind::kCompute));
      }
      engine.Push(
          [out, a](const RunContext& ctx) {
            ctx.stream->backend->copy(ctx.stream->stream, out.get(), a, kBytes, CopyDirection::kDeviceToHost);
          },
          {va}, {host}, placed(0, StreamKind::kCopy));
      engine.Push([out, &seen] { seen.push_back(*out); }, {host}, {host});  // a CPU op: runs after the copy completed
    }
    engine.WaitForVar(host);
    CHECK(seen == std::vector<std::uint64_t>{1000, 2000, 3000, 4000, 5000});
    const StreamStats stats = streams.stats();
    print_stats(name, stats);
    CHECK(stats.ops_issued == 5 * (kSteps + 2));
    CHECK(stats.host_synchronizations == 0);
    engine.WaitForAll();
    gpu.deallocate(0, a);
    gpu.deallocate(0, b);
  });
}

TEST_CASE("the stream executor on GPU backends: a copy pipeline ordered by fences, pushed last step first",
          "[stream_executor][gpu][fences]") {
  on_each_gpu("gpu fence pipeline", [](Engine& engine, StreamExecutor& streams, const std::string& name) {
    StreamBackend& gpu = streams.backend();
    void* a = gpu.allocate(0, kBytes);
    void* b = gpu.allocate(0, kBytes);
    Timeline t({.name = "copies"});
    const auto in = std::make_shared<std::uint64_t>(4242);
    const auto out = std::make_shared<std::uint64_t>(0);
    // Step k waits for t >= k and signals t = k + 1: 0 uploads, 1..kSteps copy a -> b -> a ... alternating compute
    // streams, kSteps + 1 downloads. No variable orders them; they are pushed from the last to the first, so every op
    // but the first is held by the engine until its predecessor is issued, then issued on its promise.
    const std::uint64_t last = kSteps + 1;
    auto fences = [&t](PushOptions o, std::uint64_t k) {
      o.wait_fences = {Fence{&t, k}};
      o.signal_fences = {Fence{&t, k + 1}};
      return o;
    };
    engine.Push(
        [out, a](const RunContext& ctx) {
          ctx.stream->backend->copy(ctx.stream->stream, out.get(), a, kBytes, CopyDirection::kDeviceToHost);
        },
        {}, {}, fences(placed(0, StreamKind::kCopy), last));
    for (std::uint64_t k = kSteps; k >= 1; --k) {
      const bool forward = k % 2 == 1;
      engine.Push(
          [a, b, forward](const RunContext& ctx) {
            ctx.stream->backend->copy(ctx.stream->stream, forward ? b : a, forward ? a : b, kBytes,
                                      CopyDirection::kDeviceToDevice);
          },
          {}, {}, fences(placed(static_cast<std::int32_t>(k % 2), StreamKind::kCompute), k));
    }
    CHECK(streams.stats().ops_issued == 0);
    engine.Push(
        [in, a](const RunContext& ctx) {
          ctx.stream->backend->copy(ctx.stream->stream, a, in.get(), kBytes, CopyDirection::kHostToDevice);
        },
        {}, {}, fences(placed(0, StreamKind::kCopy), 0));
    engine.WaitForFence({&t, last + 1});
    CHECK(*out == 4242);
    const StreamStats stats = streams.stats();
    print_stats(name, stats);
    CHECK(stats.ops_issued == kSteps + 2);
    CHECK(stats.host_synchronizations == 0);
    engine.WaitForAll();
    gpu.deallocate(0, a);
    gpu.deallocate(0, b);
  });
}

TEST_CASE("the stream executor on GPU backends: a graph of device copies is recorded once, launched per replay",
          "[stream_executor][gpu][stream_graph]") {
  on_each_gpu("gpu stream graph", [](Engine& engine, StreamExecutor& streams, const std::string& name) {
    StreamBackend& gpu = streams.backend();
    REQUIRE(streams.records_work());
    void* a = gpu.allocate(0, kBytes);
    void* b = gpu.allocate(0, kBytes);
    Var va = engine.NewVariable(), vb = engine.NewVariable(), host = engine.NewVariable();
    int recorded = 0;  // calls of the steps' functions: only while the first replay records them
    const Graph journey = engine.Capture([&] {
      for (int step = 0; step < kSteps; ++step) {  // a -> b -> a ..., as the pushed chain above, in one graph
        const bool forward = step % 2 == 0;
        engine.Push(
            [a, b, forward, &recorded](const RunContext& ctx) {
              ++recorded;
              ctx.stream->backend->copy(ctx.stream->stream, forward ? b : a, forward ? a : b, kBytes,
                                        CopyDirection::kDeviceToDevice);
            },
            {forward ? va : vb}, {forward ? vb : va}, placed(step % 2, StreamKind::kCompute));
      }
    });
    std::vector<std::uint64_t> seen;
    for (std::uint64_t round = 1; round <= 5; ++round) {  // new data before every replay, read back after it
      auto in = std::make_shared<std::uint64_t>(round * 1000);
      auto out = std::make_shared<std::uint64_t>(0);
      engine.Push(
          [in, a](const RunContext& ctx) {
            ctx.stream->backend->copy(ctx.stream->stream, a, in.get(), kBytes, CopyDirection::kHostToDevice);
          },
          {}, {va}, placed(0, StreamKind::kCopy));
      engine.Replay(journey);
      engine.Push(
          [out, a](const RunContext& ctx) {
            ctx.stream->backend->copy(ctx.stream->stream, out.get(), a, kBytes, CopyDirection::kDeviceToHost);
          },
          {va}, {host}, placed(0, StreamKind::kCopy));
      engine.Push([out, &seen] { seen.push_back(*out); }, {host}, {host});
    }
    engine.WaitForVar(host);
    CHECK(seen == std::vector<std::uint64_t>{1000, 2000, 3000, 4000, 5000});
    CHECK(recorded == kSteps);
    const StreamStats stats = streams.stats();
    print_stats(name, stats);
    CHECK(stats.ops_issued == 5 * 3);  // per round: the upload, one replay, the download
    CHECK(stats.host_synchronizations == 0);
    engine.WaitForAll();
    gpu.deallocate(0, a);
    gpu.deallocate(0, b);
  });
}

}  // namespace
}  // namespace depengine::test
