// Buffers::PushReduce (buffers/buffer.h; docs/accumulate.md, "Reduction"): contributions into private copies, folded
// into the buffer by accumulations. On host streams over two devices' worth of streams the folded values are exact,
// and a use after the reductions sees all of them; on a pool, two contributions run at once (they meet, which ops
// that mutated the buffer could not); a contribution that throws poisons the buffer; a null buffer is refused.
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include <depengine/buffers/buffer.h>
#include <depengine/executors/threadpool/threadpool_executor.h>

#include "test/executors/stream/stream_executor_support.h"

namespace depengine::test {
namespace {

constexpr std::size_t kValues = 64;
constexpr std::size_t kBytes = kValues * sizeof(std::uint64_t);

std::uint64_t* values(void* data) { return static_cast<std::uint64_t*>(data); }

TEST_CASE("Buffers::PushReduce: contributions on host streams fold into the buffer exactly, before its next use",
          "[buffers][accumulate]") {
  Watchdog watchdog("reductions on host streams");
  StreamEngine engine({.compute_streams = 2, .launch_delay = std::chrono::microseconds(20)});
  {
    Buffers buffers(engine, kStream);
    Buffer sum = buffers.allocate(kBytes, 0);
    constexpr int kRounds = 3, kContributions = 12;
    std::vector<std::uint64_t> seen(kRounds * kValues, 0);
    for (int round = 0; round < kRounds; ++round) {
      // A mutation first: the round starts from 7 everywhere (and the round's reductions come after it).
      engine.Push(
          [sum](const RunContext& ctx) {
            launch(ctx, [data = sum.data()] {
              for (std::size_t v = 0; v < kValues; ++v) values(data)[v] = 7;
            });
          },
          {}, {sum.var()}, on_stream(0));
      for (int c = 1; c <= kContributions; ++c) {
        buffers.PushReduce(
            [c](const RunContext& ctx, void* copy) {  // adds c * (v + 1) to value v
              launch(ctx, [copy, c] {
                for (std::size_t v = 0; v < kValues; ++v) values(copy)[v] += static_cast<std::uint64_t>(c) * (v + 1);
              });
            },
            {}, sum,
            [](const RunContext& ctx, void* copy) {  // the identity of + : a reused block holds an older copy's sums
              launch(ctx, [copy] { std::memset(copy, 0, kBytes); });
            },
            [](const RunContext& ctx, void* into, void* copy) {
              launch(ctx, [into, copy] {
                for (std::size_t v = 0; v < kValues; ++v) values(into)[v] += values(copy)[v];
              });
            },
            on_stream(c % 2));
      }
      engine.Push(
          [sum, out = seen.data() + round * kValues](const RunContext& ctx) {
            launch(ctx, [data = sum.data(), out] { std::memcpy(out, data, kBytes); });
          },
          {sum.var()}, {}, on_stream(1));
    }
    buffers.deallocate(sum);
    engine.WaitForAll();
    const std::uint64_t total = kContributions * (kContributions + 1) / 2;
    for (int round = 0; round < kRounds; ++round) {
      for (std::size_t v = 0; v < kValues; ++v) {
        CAPTURE(round, v);
        CHECK(seen[round * kValues + v] == 7 + total * (v + 1));
      }
    }
  }
}

TEST_CASE("Buffers::PushReduce: contributions run at once, and a failing one poisons the buffer",
          "[buffers][accumulate]") {
  Watchdog watchdog("reductions on a pool");
  EngineOptions options;
  (void)options.emplace<ThreadPoolExecutor>(ThreadPoolOptions{.workers = 2});
  Engine engine(std::move(options));
  Buffers buffers(engine, 0);
  Buffer sum = buffers.allocate(kBytes, 0);
  engine.Push([sum] { std::memset(sum.data(), 0, kBytes); }, {}, {sum.var()});
  auto identity = [](const RunContext&, void* copy) { std::memset(copy, 0, kBytes); };
  auto add = [](const RunContext&, void* into, void* copy) {
    for (std::size_t v = 0; v < kValues; ++v) values(into)[v] += values(copy)[v];
  };
  // Two contributions that wait for each other: they meet only if they run at the same time.
  Rendezvous meet(2);
  std::atomic<int> met{0};
  for (int c = 0; c < 2; ++c) {
    buffers.PushReduce(
        [&](const RunContext&, void* copy) {
          if (meet.arrive_and_wait()) met.fetch_add(1, std::memory_order_relaxed);
          values(copy)[0] = 1;
        },
        {}, sum, identity, add);
  }
  std::uint64_t first = 0;
  engine.Push([sum, &first] { first = values(sum.data())[0]; }, {sum.var()}, {});
  engine.WaitForVar(sum.var());
  CHECK(met.load(std::memory_order_relaxed) == 2);
  CHECK(first == 2);
  // A contribution that throws: its fold is skipped, and the buffer carries the error.
  buffers.PushReduce([](const RunContext&, void*) { throw std::runtime_error("contribution failed"); }, {}, sum,
                     identity, add);
  CHECK_THROWS_WITH(engine.WaitForVar(sum.var()), Catch::Contains("contribution failed"));
  CHECK_THROWS_WITH(buffers.PushReduce([](const RunContext&, void*) {}, {}, Buffer(), identity, add),
                    Catch::Contains("null buffer"));
  buffers.deallocate(sum);
  engine.WaitForAll();
}

}  // namespace
}  // namespace depengine::test
