// Buffers over the GPU backends that were built (CUDA, HIP), skipped with the backend's reason without a device: a
// pattern travels host -> buffer -> (device copy on the other compute stream) -> second buffer -> host, every round in
// freshly allocated buffers freed right after, so that later rounds reuse earlier rounds' blocks; a CPU op checks
// each round. Copies only (no kernels), so the test needs no device compiler.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <depengine/buffers/buffer.h>
#include <depengine/engine/engine.h>
#include <depengine/executors/stream/stream_executor.h>
#include <depengine/executors/threadpool/threadpool_executor.h>

#include "test/executors/stream/stream_test_support.h"

namespace depengine::test {
namespace {

TEST_CASE("Buffers on GPU backends: reused device blocks carry every round's pattern intact", "[memory][gpu]") {
  const auto factories = gpu_backend_factories();
  if (factories.empty()) {
    std::printf("gpu buffers: no GPU backend built\n");
    return;
  }
  for (const auto& factory : factories) {
    DYNAMIC_SECTION(factory.name) {
      std::unique_ptr<StreamBackend> backend = factory.make();
      if (backend->device_count() == 0) {
        std::printf("gpu buffers %s: skipped: %s\n", factory.name.c_str(), std::string(backend->status()).c_str());
        continue;
      }
      Watchdog watchdog("gpu buffers " + factory.name);
      EngineOptions options;
      const ExecutorId<ThreadPoolExecutor> cpu = options.emplace<ThreadPoolExecutor>(ThreadPoolOptions{.workers = 1});
      const ExecutorId<StreamExecutor> streams = options.emplace<StreamExecutor>(
          std::move(backend), StreamExecutorOptions{.devices = 1, .compute_streams = 2, .copy_streams = 0});
      Engine engine(std::move(options));
      constexpr int kRounds = 100;
      constexpr std::size_t kWords = 1 << 16;  // 512 KiB per buffer
      std::vector<std::vector<std::uint64_t>> in(kRounds), out(kRounds);
      int wrong = 0;
      {
        Buffers buffers(engine, streams);
        auto on = [&streams](std::int32_t stream) {
          PushOptions o;
          o.context = Context{.executor = streams, .device = 0, .stream_kind = StreamKind::kCompute, .stream = stream};
          return o;
        };
        for (int r = 0; r < kRounds; ++r) {
          in[r].assign(kWords, 0);
          for (std::size_t i = 0; i < kWords; ++i) in[r][i] = (std::uint64_t(r) << 32) | i;
          out[r].assign(kWords, 0);
          Buffer a = buffers.allocate(kWords * 8, 0, r % 2);
          Buffer b = buffers.allocate(kWords * 8, 0, (r + 1) % 2);
          const std::uint64_t* src = in[r].data();
          std::uint64_t* dst = out[r].data();
          engine.Push(
              [a, src](const RunContext& ctx) {
                ctx.stream->backend->copy(ctx.stream->stream, a.data(), src, kWords * 8, CopyDirection::kHostToDevice);
              },
              {}, {a.var()}, on(r % 2));
          engine.Push(
              [a, b](const RunContext& ctx) {
                ctx.stream->backend->copy(ctx.stream->stream, b.data(), a.data(), kWords * 8,
                                          CopyDirection::kDeviceToDevice);
              },
              {a.var()}, {b.var()}, on((r + 1) % 2));
          buffers.deallocate(a);
          engine.Push(
              [b, dst](const RunContext& ctx) {
                ctx.stream->backend->copy(ctx.stream->stream, dst, b.data(), kWords * 8, CopyDirection::kDeviceToHost);
              },
              {b.var()}, {b.var()}, on((r + 1) % 2));
          engine.Push([&, r] { wrong += out[r] != in[r] ? 1 : 0; }, {b.var()}, {},
                      PushOptions{.context = {.executor = cpu}});
          buffers.deallocate(b);
        }
        engine.WaitForAll();
        const MemoryPoolStats stats = buffers.pool(0).stats();
        const StreamStats stream_stats = engine.executor(streams).stats();
        std::printf(
            "gpu buffers %s: %d rounds, %llu fresh blocks, %llu reused dominated, %llu after waits (%llu waits), "
            "%llu complete; peak %zu bytes; stream waits issued %llu, host synchronisations %llu\n",
            factory.name.c_str(), kRounds, static_cast<unsigned long long>(stats.fresh_allocations),
            static_cast<unsigned long long>(stats.reuse_dominated),
            static_cast<unsigned long long>(stats.reuse_with_waits), static_cast<unsigned long long>(stats.waits_added),
            static_cast<unsigned long long>(stats.reuse_complete), stats.peak_bytes_held,
            static_cast<unsigned long long>(stream_stats.waits_issued),
            static_cast<unsigned long long>(stream_stats.host_synchronizations));
        CHECK(stats.bytes_in_use == 0);
        CHECK(stats.fresh_allocations < 2 * kRounds);  // blocks were reused
        CHECK(stream_stats.host_synchronizations == 0);
      }
      CHECK(wrong == 0);
    }
  }
}

}  // namespace
}  // namespace depengine::test
