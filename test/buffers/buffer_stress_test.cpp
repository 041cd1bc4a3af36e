// Bounded Buffers under contention (the seed's forward-progress guarantee): threads that each hold at most one buffer
// at a time, of random sizes so that size classes compete for a pool bounded to its largest block, must always
// finish. Any program that fits its limit run serially runs here, pipelined as the limit allows; a reservation that
// waits for a free block's users to complete, to trim it, must be woken however those completions interleave with the
// pool's decisions. A lost wake-up shows as a hang, which the watchdog turns into a failure.
//
// Shapes: the stream executor on host streams with 1 and 2 devices (blocks trimmed once their users complete on the
// tracker), and a pool of host memory on the oneTBB executor (frees after completion, no tracker). Repetitions:
// DEPENGINE_TEST_REPEAT seeds (test_seeds()), each running every shape kRounds times.
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <depengine/buffers/buffer.h>

#include "test/executors/stream/stream_executor_support.h"

namespace depengine::test {
namespace {

struct StressShape {
  const char* name;
  std::uint32_t executor;  // kStream or kCpu
  int devices;             // of the host stream backend (a CPU executor has one host pool)
};

// One run: kThreads threads each allocate, fill, read and free `iterations` buffers of 256 B to 16 KiB (the limit),
// holding one at a time, on a random device; every read checks the whole block holds the byte last filled.
void pooled_threads(const StressShape& shape, std::uint64_t seed, int iterations, std::atomic<int>& wrong) {
  constexpr int kThreads = 4;
  constexpr std::size_t kLimit = 16 * 1024;
  Engine engine(stream_engine_options({.devices = shape.devices, .compute_streams = 1, .copy_streams = 1}));
  {
    Buffers buffers(engine, shape.executor, {.limit = kLimit});
    const bool streams = shape.executor == kStream;
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        std::mt19937_64 rng(seed + static_cast<std::uint64_t>(t));
        for (int i = 0; i < iterations; ++i) {
          const std::size_t bytes = std::size_t{256} << (rng() % 7);  // 256 B .. 16 KiB: 7 competing size classes
          const auto device = streams ? static_cast<std::uint32_t>(rng() % static_cast<unsigned>(shape.devices)) : 0;
          const auto value = static_cast<unsigned char>(1 + rng() % 255);
          const StreamKind read_kind = rng() % 2 == 0 ? StreamKind::kCompute : StreamKind::kCopy;
          Buffer b = buffers.allocate(bytes, device);
          auto check = [b, value, &wrong] {
            const auto* p = static_cast<const unsigned char*>(b.data());
            for (std::size_t k = 0; k < b.bytes(); ++k) {
              if (p[k] != value) {
                wrong.fetch_add(1, std::memory_order_relaxed);  // relaxed: a count read after WaitForAll
                return;
              }
            }
          };
          if (streams) {
            engine.Push(
                [b, value](const RunContext& ctx) {
                  launch(ctx, [data = b.data(), n = b.bytes(), value] { std::memset(data, value, n); });
                },
                {}, {b.var()}, on_stream(-1, device));
            engine.Push([check](const RunContext& ctx) { launch(ctx, check); }, {b.var()}, {},
                        on_stream(-1, device, read_kind));
          } else {
            engine.Push([b, value] { std::memset(b.data(), value, b.bytes()); }, {}, {b.var()},
                        PushOptions{.context = {.executor = kCpu}});
            engine.Push(check, {b.var()}, {}, PushOptions{.context = {.executor = kCpu}});
          }
          buffers.deallocate(b);
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
    engine.WaitForAll();
    for (std::uint32_t d = 0; d < static_cast<std::uint32_t>(streams ? shape.devices : 1); ++d) {
      const MemoryPoolStats stats = buffers.pool(d).stats();
      CHECK(stats.bytes_in_use == 0);
      CHECK(stats.peak_bytes_held <= kLimit);
    }
  }
}

TEST_CASE("Buffers: threads whose allocations compete for a pool bounded to the largest block always finish",
          "[memory][buffers][random][stress]") {
  const StressShape shapes[] = {
      {"host streams, 1 device", kStream, 1},
      {"host streams, 2 devices", kStream, 2},
      {"host pool on the CPU executor", kCpu, 1},
  };
  const int rounds = static_cast<int>(sized(12, 6, 4));
  const int iterations = static_cast<int>(sized(1500, 600, 800));
  for (const StressShape& shape : shapes) {
    DYNAMIC_SECTION(shape.name) {
      for (const std::uint64_t seed : test_seeds()) {
        CAPTURE(seed);
        for (int round = 0; round < rounds; ++round) {
          const std::uint64_t run_seed = mix(seed, static_cast<std::uint64_t>(round));
          Watchdog watchdog(std::string("bounded buffers under contention, ") + shape.name);
          watchdog.note("seed " + std::to_string(seed) + ", round " + std::to_string(round));
          std::atomic<int> wrong{0};
          pooled_threads(shape, run_seed, iterations, wrong);
          CHECK(wrong.load(std::memory_order_relaxed) == 0);
        }
      }
    }
  }
}

}  // namespace
}  // namespace depengine::test
