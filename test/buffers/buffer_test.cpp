// Buffers (buffers/buffer.h) on the host stream backend: a block freed on a stream is reused at once by the next
// allocation on that stream, with no wait, while nothing has run yet; one freed on another stream costs exactly one
// device wait; a randomized workload of allocations, pattern writes, checked reads and frees over 2 devices x 2 streams
// with random stream delays never hands out a block while a user of it can still run; misuse errors.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <future>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <depengine/buffers/buffer.h>
#include <depengine/executors/inline_executor.h>
#include <depengine/executors/threadpool/threadpool_executor.h>

#include "test/executors/stream/stream_executor_support.h"

namespace depengine::test {
namespace {

// Atomics: counters bumped by ops are read by the test thread after a wait (WaitForAll, WaitForVar, WaitForScope), a
// join or the engine's destruction, which orders every op's writes before the read, so they are relaxed.

// Inside a stream op: enqueues a fill of the whole block with `value` (captured now, at issue).
void fill(const RunContext& ctx, void* data, std::size_t bytes, unsigned char value) {
  launch(ctx, [data, bytes, value] { std::memset(data, value, bytes); });
}

// True when every byte of the block is `value`.
bool holds(const void* data, std::size_t bytes, unsigned char value) {
  const auto* p = static_cast<const unsigned char*>(data);
  return std::all_of(p, p + bytes, [value](unsigned char b) { return b == value; });
}

TEST_CASE("Buffers: a block freed on a stream is reused at once by the next allocation there, with no wait",
          "[memory][buffers]") {
  Watchdog watchdog("buffer reuse on one stream");
  StreamEngine engine({.compute_streams = 2});
  {
    Buffers buffers(engine, kStream);
    StreamGate gate;
    Var held = engine.NewVariable();
    engine.Push([&](const RunContext& ctx) { launch(ctx, [&] { gate.hold(); }); }, {}, {held}, on_stream(0));
    // Everything below is issued by this thread while stream 0 is held: nothing has run, nothing has completed.
    Buffer a = buffers.allocate(1000, 0, 0);
    void* a_data = nullptr;
    engine.Push(
        [&, a](const RunContext& ctx) {
          a_data = a.data();
          fill(ctx, a.data(), a.bytes(), 1);
        },
        {}, {a.var()}, on_stream(0));
    buffers.deallocate(a, 0);
    Buffer b = buffers.allocate(1000, 0, 0);
    void* b_data = nullptr;
    std::atomic<bool> b_holds_2{false};
    engine.Push(
        [&, b](const RunContext& ctx) {
          b_data = b.data();
          fill(ctx, b.data(), b.bytes(), 2);
        },
        {}, {b.var()}, on_stream(0));
    engine.Push([&, b] { b_holds_2.store(holds(b.data(), b.bytes(), 2), std::memory_order_relaxed); }, {b.var()}, {},
                PushOptions{.context = {.executor = kCpu}});
    // The free's death frontier is its users' signals, {(S0, epoch of the fill)}; the second allocation, later on
    // stream 0, knows it: reused with no synchronisation, before the first user has even run.
    const MemoryPoolStats stats = buffers.pool(0).stats();
    CHECK(stats.fresh_allocations == 1);
    CHECK(stats.reuse_dominated == 1);
    CHECK(stats.waits_added == 0);
    CHECK(a_data != nullptr);
    CHECK(b_data == a_data);
    CHECK(stream_executor(engine).stats(0, StreamKind::kCompute, 0).waits_issued == 0);
    gate.open();
    buffers.deallocate(b);
    engine.WaitForAll();
    CHECK(b_holds_2.load(std::memory_order_relaxed));
  }
}

TEST_CASE("Buffers: a block freed on one stream and allocated on another costs exactly one device wait",
          "[memory][buffers]") {
  Watchdog watchdog("buffer reuse across streams");
  StreamEngine engine({.compute_streams = 2});
  {
    Buffers buffers(engine, kStream);
    StreamGate gate;
    Var held = engine.NewVariable();
    engine.Push([&](const RunContext& ctx) { launch(ctx, [&] { gate.hold(); }); }, {}, {held}, on_stream(0));
    Buffer a = buffers.allocate(4096, 0, 0);
    engine.Push([a](const RunContext& ctx) { fill(ctx, a.data(), a.bytes(), 7); }, {}, {a.var()}, on_stream(0));
    void* a_data = nullptr;
    engine.Push([&, a](const RunContext&) { a_data = a.data(); }, {a.var()}, {}, on_stream(0));
    buffers.deallocate(a, 0);
    const std::uint64_t waits_before = stream_executor(engine).stats(0, StreamKind::kCompute, 1).waits_issued;
    // Stream 1 knows nothing of stream 0, and stream 0 has not completed: the block is reused with one device wait,
    // on the epoch of its last use on stream 0, which orders stream 1's fill after stream 0's.
    Buffer b = buffers.allocate(4096, 0, 1);
    void* b_data = nullptr;
    engine.Push(
        [&, b](const RunContext& ctx) {
          b_data = b.data();
          fill(ctx, b.data(), b.bytes(), 9);
        },
        {}, {b.var()}, on_stream(1));
    const MemoryPoolStats stats = buffers.pool(0).stats();
    CHECK(stats.reuse_with_waits == 1);
    CHECK(stats.waits_added == 1);
    CHECK(stream_executor(engine).stats(0, StreamKind::kCompute, 1).waits_issued == waits_before + 1);
    CHECK(b_data == a_data);
    gate.open();
    bool nines = false;
    engine.Push([&, b] { nines = holds(b.data(), b.bytes(), 9); }, {b.var()}, {},
                PushOptions{.context = {.executor = kCpu}});
    engine.WaitForVar(b.var());
    CHECK(nines);  // stream 0's fill of 7 ran before stream 1's fill of 9
    buffers.deallocate(b);
    engine.WaitForAll();
  }
}

void random_buffers(std::size_t limit);

TEST_CASE("Buffers: random allocations, writes, checked reads and frees never see a block reused early",
          "[memory][buffers][random]") {
  // Unbounded pools (every allocation acquires at issue), and pools of 16 KiB per device (allocations of up to 8 KiB
  // blocks wait for frees, and take blocks whose users may still run, with device waits).
  for (const std::size_t limit : {~std::size_t{0}, std::size_t{16} * 1024}) {
    DYNAMIC_SECTION((limit == ~std::size_t{0} ? std::string("unbounded") : std::string("bounded"))) {
      random_buffers(limit);
    }
  }
}

void random_buffers(std::size_t limit) {
  // Slots of buffers on 2 devices x 2 compute streams, each stream with a random simulated device time. Every write
  // fills its block with a fresh byte; every read (on a stream, or on the CPU) checks the whole block holds the last
  // byte written. A block handed to a new buffer while an old user could still run would show as a wrong byte (and,
  // under ThreadSanitizer, as a race between two streams' host work).
  constexpr std::size_t kSlots = 6;
  const int ops = static_cast<int>(sized(3000, 400, 800));
  for (const std::uint64_t seed : test_seeds()) {
    CAPTURE(seed);
    Watchdog watchdog("random buffers");
    watchdog.note("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    Engine engine(stream_engine_options({.devices = 2, .compute_streams = 2, .workers = 2}));
    std::atomic<int> wrong{0};
    {
      Buffers buffers(engine, kStream, {.limit = limit});
      for (std::uint32_t device = 0; device < 2; ++device) {
        for (std::int32_t index = 0; index < 2; ++index) {
          const auto delay = std::chrono::microseconds(rng() % 3 == 0 ? 0 : rng() % 100);
          Var scratch = engine.NewVariable();
          engine.Push(
              [delay](const RunContext& ctx) {
                HostStreamBackend::of(*ctx.stream)->set_launch_delay(ctx.stream->stream, delay);
              },
              {}, {scratch}, on_stream(index, device));
          engine.DeleteVariable(scratch);
        }
      }
      struct Slot {
        Buffer buffer;
        unsigned char value = 0;  // the last byte written; 0: nothing written yet
      };
      std::vector<Slot> slots(kSlots);
      const std::size_t sizes[] = {300, 1000, 4096, 5000};
      auto any_stream = [&rng] { return rng() % 3 == 0 ? -1 : static_cast<std::int32_t>(rng() % 2); };
      for (int i = 0; i < ops; ++i) {
        Slot& slot = slots[rng() % kSlots];
        if (slot.buffer.var().is_null()) {
          slot.buffer = buffers.allocate(sizes[rng() % 4], static_cast<std::uint32_t>(rng() % 2), any_stream());
          slot.value = 0;
          continue;
        }
        const Buffer b = slot.buffer;
        switch (rng() % 5) {
          case 0:
          case 1: {  // write a fresh byte on a stream of the buffer's device
            const auto value = static_cast<unsigned char>(1 + rng() % 255);
            engine.Push([b, value](const RunContext& ctx) { fill(ctx, b.data(), b.bytes(), value); }, {}, {b.var()},
                        on_stream(any_stream(), b.device()));
            slot.value = value;
            break;
          }
          case 2: {  // check on a stream
            if (slot.value == 0) break;
            const unsigned char value = slot.value;
            engine.Push(
                [b, value, &wrong](const RunContext& ctx) {
                  launch(ctx, [data = b.data(), bytes = b.bytes(), value, &wrong] {
                    if (!holds(data, bytes, value)) wrong.fetch_add(1, std::memory_order_relaxed);
                  });
                },
                {b.var()}, {}, on_stream(any_stream(), b.device()));
            break;
          }
          case 3: {  // check on the CPU (after the device work it depends on completed)
            if (slot.value == 0) break;
            const unsigned char value = slot.value;
            engine.Push(
                [b, value, &wrong] {
                  if (!holds(b.data(), b.bytes(), value)) wrong.fetch_add(1, std::memory_order_relaxed);
                },
                {b.var()}, {}, PushOptions{.context = {.executor = kCpu}});
            break;
          }
          default:  // free
            buffers.deallocate(slot.buffer, any_stream());
            break;
        }
      }
      for (Slot& slot : slots) {
        if (!slot.buffer.var().is_null()) buffers.deallocate(slot.buffer);
      }
      engine.WaitForAll();
      CHECK(wrong.load(std::memory_order_relaxed) == 0);
      const MemoryPoolStats stats = buffers.pool(0).stats();
      CHECK(stats.bytes_in_use == 0);
      CHECK(stats.reuse_dominated + stats.reuse_complete + stats.reuse_with_waits + stats.reuse_reserved > 0);
    }
  }
}

TEST_CASE("Buffers: two jobs that fit a bounded pool only one at a time run one after the other, nothing blocked",
          "[memory][buffers]") {
  // The seed's example scaled down: jobs of 400 KiB in a 512 KiB pool. Both are pushed at once from this thread; the
  // second allocation waits as a pending op until the first job's free, and then takes its block.
  Watchdog watchdog("bounded jobs");
  Engine engine(stream_engine_options({.compute_streams = 2}));
  {
    constexpr std::size_t kJob = 400 * 1024;
    Buffers buffers(engine, kStream, {.limit = 512 * 1024});
    CHECK_THROWS_WITH((void)buffers.allocate(600 * 1024, 0), Catch::Contains("larger than the pool's limit"));
    StreamGate gate;
    void* data[2] = {nullptr, nullptr};
    bool checked[2] = {false, false};
    for (int job = 0; job < 2; ++job) {
      Buffer b = buffers.allocate(kJob, 0);
      const auto value = static_cast<unsigned char>(job + 1);
      engine.Push(
          [&, b, value, job](const RunContext& ctx) {
            if (job == 0) launch(ctx, [&] { gate.hold(); });
            fill(ctx, b.data(), b.bytes(), value);
          },
          {}, {b.var()}, on_stream(job));
      engine.Push(
          [&, b, value, job] {
            data[job] = b.data();
            checked[job] = holds(b.data(), b.bytes(), value);
          },
          {b.var()}, {}, PushOptions{.context = {.executor = kCpu}});
      buffers.deallocate(b);
    }
    // The first job is held on its stream; the second's reservation is queued, no thread blocked.
    CHECK(wait_until([&] { return buffers.pool(0).stats().reservations_queued == 1; }));
    // The engine's in-flight report says what the queued reservation waits for.
    const std::string report = engine.InFlightReport();
    CAPTURE(report);
    CHECK_THAT(report, Catch::Contains("memory pool 'device 0': 1 reservations queued, the first for a block of 524288 "
                                       "B; holds 524288 of 524288 B (524288 in use, 0 free, 0 tainted); waits for a "
                                       "release"));
    gate.open();
    engine.WaitForAll();
    CHECK(checked[0]);
    CHECK(checked[1]);
    CHECK(data[1] == data[0]);
    const MemoryPoolStats stats = buffers.pool(0).stats();
    CHECK(stats.fresh_allocations == 1);
    CHECK(stats.peak_bytes_held == 512 * 1024);
  }
}

TEST_CASE("Buffers: pipelined training steps complete in a pool bounded to one step's memory", "[memory][buffers]") {
  // Per step: activations a0, a1 on stream 0, then gradients g1, g0 on stream 1, each gradient reading its
  // activation and the next gradient, frees as soon as the last user is pushed, and an update on stream 0 reading g0.
  // Steps are pushed 8 at a time into a pool that holds one step's transient blocks (4) and the weight: every
  // allocation of a later step must wait for frees of an earlier one, whatever order the reservation ops run in. Were
  // reservations granted out of push order, a later step's activations could take the memory an earlier step's
  // gradients wait for, whose frees depend on them: a deadlock (the watchdog would fail the test).
  Watchdog watchdog("bounded pipelined steps");
  Engine engine(stream_engine_options({.compute_streams = 2}));
  {
    constexpr std::size_t kBlock = 4096;
    Buffers buffers(engine, kStream, {.limit = 5 * kBlock});
    Buffer w = buffers.allocate(kBlock, 0, 0);
    auto op = [](const RunContext& ctx) { launch(ctx, [] {}); };
    const int steps = static_cast<int>(sized(64, 16, 32));
    for (int s = 0; s < steps; s += 8) {
      for (int k = 0; k < 8 && s + k < steps; ++k) {
        Buffer a0 = buffers.allocate(kBlock, 0, 0);
        engine.Push(op, {w.var()}, {a0.var()}, on_stream(0));
        Buffer a1 = buffers.allocate(kBlock, 0, 0);
        engine.Push(op, {a0.var(), w.var()}, {a1.var()}, on_stream(0));
        Buffer g1 = buffers.allocate(kBlock, 0, 1);
        engine.Push(op, {a1.var()}, {g1.var()}, on_stream(1));
        buffers.deallocate(a1);
        Buffer g0 = buffers.allocate(kBlock, 0, 1);
        engine.Push(op, {a0.var(), g1.var()}, {g0.var()}, on_stream(1));
        buffers.deallocate(a0);
        buffers.deallocate(g1);
        engine.Push(op, {g0.var()}, {w.var()}, on_stream(0));
        buffers.deallocate(g0);
      }
      engine.WaitForAll();
    }
    buffers.deallocate(w);
    engine.WaitForAll();
    const MemoryPoolStats stats = buffers.pool(0).stats();
    CHECK(stats.peak_bytes_held <= 5 * kBlock);
    CHECK(stats.bytes_in_use == 0);
  }
}

TEST_CASE("Buffers on a CPU executor: host blocks for CPU ops, reused after each free with no wait, bounded too",
          "[memory][buffers]") {
  Watchdog watchdog("host buffers");
  Engine engine(stream_engine_options());
  for (const bool bounded : {false, true}) {
    DYNAMIC_SECTION((bounded ? "bounded" : "unbounded")) {
      constexpr std::size_t kBytes = 4096;
      BuffersOptions options;
      if (bounded) options.limit = 2 * kBytes;  // two blocks: a chain of 50 steps runs in them
      Buffers buffers(engine, kCpu, options);
      constexpr int kSteps = 50;
      std::vector<unsigned char> seen(kSteps, 0);
      Buffer previous = buffers.allocate(kBytes, 0);
      engine.Push([previous] { std::memset(previous.data(), 1, kBytes); }, {}, {previous.var()});
      for (int step = 1; step < kSteps; ++step) {
        Buffer next = buffers.allocate(kBytes, 0);
        const auto value = static_cast<unsigned char>(step + 1);
        engine.Push(
            [previous, next, value, &seen, step] {
              seen[static_cast<std::size_t>(step)] =
                  holds(previous.data(), kBytes, static_cast<unsigned char>(value - 1));
              std::memset(next.data(), value, kBytes);
            },
            {previous.var()}, {next.var()});
        buffers.deallocate(previous);
        previous = next;
      }
      buffers.deallocate(previous);
      engine.WaitForAll();
      for (int step = 1; step < kSteps; ++step) CHECK(seen[static_cast<std::size_t>(step)] == 1);
      const MemoryPoolStats stats = buffers.pool(0).stats();
      // Unbounded, a block is taken by the first data() of its buffer (racing first calls may take one more each and
      // give it back); bounded to two blocks, every step reuses the block freed two steps before.
      CHECK(stats.fresh_allocations + stats.reuse_dominated + stats.reuse_complete + stats.reuse_reserved >= kSteps);
      if (bounded) {
        CHECK(stats.fresh_allocations + stats.reuse_dominated + stats.reuse_complete + stats.reuse_reserved == kSteps);
      }
      CHECK(stats.reuse_with_waits == 0);
      if (bounded) CHECK(stats.fresh_allocations == 2);
      CHECK(stats.bytes_in_use == 0);
      if (bounded) CHECK(stats.peak_bytes_held <= 2 * kBytes);
      CHECK_THROWS_WITH((void)buffers.allocate(64, 1), Catch::Contains("device 1"));
    }
  }
}

// On a CPU executor memory is committed when the work reaches it: allocate() takes nothing, the buffer's first op to
// run takes the block (its first data()), and a pusher that runs ahead of the work holds no memory for it. Before,
// each allocation was an op that ran as soon as it was pushed, so the pool held a block per buffer pushed.
TEST_CASE("Buffers on a CPU executor take a block when the buffer's first op runs, not when it is allocated",
          "[memory][buffers]") {
  Watchdog watchdog("host buffers committed on use");
  constexpr std::size_t kBytes = 4096;
  constexpr int kSteps = 50;
  EngineOptions options;
  options.executors.push_back(std::make_unique<InlineExecutor>());  // runs the held chain on the gate's thread
  Engine engine(std::move(options));
  Buffers buffers(engine, 0);
  std::optional<Completion> gate_done;
  const Var gate = engine.NewVariable();
  engine.PushAsync([&gate_done](Completion done) { gate_done.emplace(done); }, {}, {gate});

  // A chain of steps, all held behind the gate: step k reads step k - 1's buffer, writes its own, and the previous
  // buffer is freed right after.
  std::vector<unsigned char> seen(kSteps, 0);
  Buffer previous = buffers.allocate(kBytes, 0);
  engine.Push([previous] { std::memset(previous.data(), 1, kBytes); }, {gate}, {previous.var()});
  for (int step = 1; step < kSteps; ++step) {
    Buffer next = buffers.allocate(kBytes, 0);
    const auto value = static_cast<unsigned char>(step + 1);
    engine.Push(
        [previous, next, value, &seen, step] {
          seen[static_cast<std::size_t>(step)] = holds(previous.data(), kBytes, static_cast<unsigned char>(value - 1));
          std::memset(next.data(), value, kBytes);
        },
        {previous.var()}, {next.var()});
    buffers.deallocate(previous);
    previous = next;
  }
  const MemoryPoolStats pushed = buffers.pool(0).stats();
  CHECK(pushed.bytes_held == 0);  // 50 buffers pushed, none reached by the work
  CHECK(pushed.fresh_allocations == 0);

  (*gate_done)();  // the chain runs here, inline: one step at a time, each free right after its step's reader
  engine.WaitForVar(previous.var());
  for (int step = 1; step < kSteps; ++step) CHECK(seen[static_cast<std::size_t>(step)] == 1);
  const MemoryPoolStats ran = buffers.pool(0).stats();
  // A step's input and output, and the next step's output if it runs before the input's free (both are made ready by
  // the same completion); from then on every output reuses a freed block.
  CHECK(ran.peak_bytes_held <= 3 * kBytes);
  CHECK(ran.fresh_allocations <= 3);
  CHECK(ran.bytes_in_use == kBytes);  // the last buffer, not freed yet
  buffers.deallocate(previous);
  engine.WaitForAll();
  CHECK(buffers.pool(0).stats().bytes_in_use == 0);

  // A buffer freed without ever being used takes no memory at all.
  Buffer unused = buffers.allocate(kBytes, 0);
  buffers.deallocate(unused);
  engine.WaitForAll();
  CHECK(buffers.pool(0).stats().fresh_allocations == ran.fresh_allocations);
}

// Two ops that read a buffer no op has written run at once, and both call data() first: they must agree on one block,
// and the block a loser took goes back to the pool.
TEST_CASE("Buffers on a CPU executor: concurrent first uses of a buffer agree on one block", "[memory][buffers]") {
  Watchdog watchdog("host buffers: racing first uses");
  Engine engine(stream_engine_options({.workers = 2}));
  Buffers buffers(engine, kCpu);
  const int rounds = static_cast<int>(sized(200, 50, 50));
  for (int round = 0; round < rounds; ++round) {
    Buffer x = buffers.allocate(256, 0);
    std::atomic<void*> seen[2] = {nullptr, nullptr};
    for (std::atomic<void*>& mine : seen) {
      engine.Push([x, &mine] { mine.store(x.data(), std::memory_order_relaxed); }, {x.var()}, {});
    }
    buffers.deallocate(x);
    engine.WaitForAll();  // orders the relaxed stores before the loads
    CHECK(seen[0].load(std::memory_order_relaxed) != nullptr);
    CHECK(seen[0].load(std::memory_order_relaxed) == seen[1].load(std::memory_order_relaxed));
  }
  const MemoryPoolStats stats = buffers.pool(0).stats();
  CHECK(stats.bytes_in_use == 0);
  CHECK(stats.bytes_held <= 2 * 256);  // at most one block per racing op, each reused from then on
}

// One round of the unwinding scenario: an op fails, buffers are allocated, written by ops held behind a gate that
// another thread opens at any moment, and freed; WaitForVar rethrows the failure and the stack unwinds through Buffers
// and the engine, in the order of declaration `buffers_first` picks, while those ops may still be pending.
void unwind_through_buffers(bool buffers_first, std::uint32_t executor, const BuffersOptions& buffers_options,
                            std::thread& releaser) {
  // Declared first, so it outlives the engine: the op that fulfils it may run only after WaitForVar has thrown (the
  // two ops are independent), and a promise destroyed before then broke the releaser's future.
  std::promise<Completion> held;
  std::optional<Buffers> early;  // declared before the engine: destroyed after it
  Engine engine(stream_engine_options());
  std::optional<Buffers> late;  // destroyed before the engine
  Buffers& buffers = buffers_first ? early.emplace(engine, executor, buffers_options)
                                   : late.emplace(engine, executor, buffers_options);
  const PushOptions placement = executor == kStream ? on_stream() : PushOptions{};
  Var gate = engine.NewVariable();
  engine.PushAsync([&held](Completion done) { held.set_value(done); }, {}, {gate});
  releaser = std::thread([future = held.get_future()]() mutable { future.get()(); });
  Var loss = engine.NewVariable();
  engine.Push([] { throw std::runtime_error("loss is NaN"); }, {}, {loss});
  for (int i = 0; i < 64; ++i) {
    Buffer x = buffers.allocate(1024, 0);
    engine.Push(
        [x](const RunContext& ctx) {
          if (ctx.stream != nullptr) {
            launch(ctx, [x] { static_cast<char*>(x.data())[0] = 1; });
          } else {
            static_cast<char*>(x.data())[0] = 1;
          }
        },
        {gate}, {x.var()}, placement);
    buffers.deallocate(x);
  }
  engine.WaitForVar(loss);  // throws
}

TEST_CASE("Buffers and its engine unwind in either order with ops pending: no crash, no leak, the error reported",
          "[memory][buffers][errors]") {
  Watchdog watchdog("unwinding through Buffers");
  const int rounds = static_cast<int>(sized(20, 10, 10));
  for (const bool buffers_first : {false, true}) {
    for (const std::uint32_t executor : {kStream, kCpu}) {
      for (const bool bounded : {false, true}) {
        DYNAMIC_SECTION((buffers_first ? "Buffers declared first" : "engine declared first")
                        << (executor == kStream ? ", host streams" : ", CPU pool")
                        << (bounded ? ", bounded" : ", unbounded")) {
          BuffersOptions options;
          if (bounded) options.limit = 4 * 1024;  // four blocks for 64 buffers: allocations wait for frees
          for (int round = 0; round < rounds; ++round) {
            std::thread releaser;
            CHECK_THROWS_WITH(unwind_through_buffers(buffers_first, executor, options, releaser), "loss is NaN");
            releaser.join();
          }
        }
      }
    }
  }
}

TEST_CASE("Buffers whose engine was destroyed refuses further use with an Error", "[memory][buffers][errors]") {
  std::optional<Buffers> buffers;
  {
    Engine engine(stream_engine_options());
    buffers.emplace(engine, kStream);
    Buffer x = buffers->allocate(64, 0);
    buffers->deallocate(x);
  }
  CHECK_THROWS_WITH((void)buffers->allocate(64, 0), Catch::Contains("engine has been destroyed"));
  CHECK_THROWS_WITH((void)buffers->pool(0), Catch::Contains("engine has been destroyed"));
}

TEST_CASE("Buffers: misuse gets clear errors", "[memory][buffers][errors]") {
  Engine engine(stream_engine_options());
  Buffers buffers(engine, kStream);
  CHECK_THROWS_WITH((void)buffers.allocate(0, 0), Catch::Contains("0 bytes"));
  CHECK_THROWS_WITH((void)buffers.allocate(64, 3), Catch::Contains("device 3"));
  Buffer null;
  CHECK_THROWS_WITH(buffers.deallocate(null), Catch::Contains("null buffer"));
  Buffer b = buffers.allocate(64, 0);
  Buffer copy = b;
  buffers.deallocate(b);
  CHECK(b.var().is_null());
  CHECK_THROWS_AS(buffers.deallocate(copy), Error);  // the variable is dead: DeleteVariable says so
  engine.WaitForAll();
}

// A step with a temporary buffer, for the capture tests below: the first op zeroes the block on its first run and adds
// 1 to every byte on later ones; the second records the first byte and whether the block is uniform. Nothing depends on
// RunContext::replay, so a recorded graph (which calls the functions once) does the same work every replay.
struct TemporaryStep {
  static constexpr std::size_t kBytes = 4096;
  bool started = false;             // the first op's; the buffer's variable orders its runs
  std::vector<int> values;          // the second op's; `out` orders its runs
  std::vector<const void*> blocks;  // likewise
  std::atomic<int> torn{0};         // blocks found not uniform

  void update(void* data) {
    auto* p = static_cast<unsigned char*>(data);
    if (!started) {
      std::memset(p, 0, kBytes);
      started = true;
      return;
    }
    for (std::size_t i = 0; i < kBytes; ++i) ++p[i];
  }
  void check(const void* data) {
    const auto* p = static_cast<const unsigned char*>(data);
    if (!holds(p, kBytes, p[0])) torn.fetch_add(1, std::memory_order_relaxed);
    values.push_back(p[0]);
    blocks.push_back(data);
  }
};

// What a replay may not change in a pool that serves planned buffers only: every count of pool work, and the bytes.
void check_no_pool_work(const MemoryPoolStats& before, const MemoryPoolStats& after) {
  CHECK(after.fresh_allocations == before.fresh_allocations);
  CHECK(after.reuse_dominated == before.reuse_dominated);
  CHECK(after.reuse_complete == before.reuse_complete);
  CHECK(after.reuse_with_waits == before.reuse_with_waits);
  CHECK(after.reservations_queued == before.reservations_queued);
  CHECK(after.settled_swapped + after.settled_dominated == before.settled_swapped + before.settled_dominated);
  CHECK(after.bytes_in_use == before.bytes_in_use);
  CHECK(after.bytes_held == before.bytes_held);
}

TEST_CASE(
    "Buffers allocated and freed inside a Capture on a CPU executor: one block for every replay, no pool work "
    "after the first, back in the pool at ~Graph",
    "[memory][buffers][graph]") {
  for (const int variant : {0, 1}) {
    const char* const names[] = {"inline", "2 workers"};
    DYNAMIC_SECTION(names[variant]) {
      Watchdog watchdog(std::string("planned buffers on ") + names[variant]);
      EngineOptions options;
      if (variant == 0) {
        options.executors.push_back(std::make_unique<InlineExecutor>());
      } else {
        options.executors.push_back(std::make_unique<ThreadPoolExecutor>(ThreadPoolOptions{.workers = 2}));
      }
      Engine engine(std::move(options));
      Buffers buffers(engine, 0);
      const Var out = engine.NewVariable();
      TemporaryStep step;
      Graph graph = engine.Capture([&] {
        Buffer t = buffers.allocate(TemporaryStep::kBytes, 0);
        engine.Push([t, &step] { step.update(t.data()); }, {}, {t.var()});
        engine.Push([t, &step] { step.check(t.data()); }, {t.var()}, {out});
        buffers.deallocate(t);
        CHECK(t.var().is_null());
      });
      CHECK(buffers.pool(0).stats().bytes_held == 0);  // a capture takes nothing
      engine.Replay(graph);
      engine.WaitForAll();
      const MemoryPoolStats first = buffers.pool(0).stats();
      CHECK(first.fresh_allocations == 1);
      CHECK(first.bytes_in_use == TemporaryStep::kBytes);
      constexpr int kReplays = 20;
      for (int k = 1; k < kReplays; ++k) engine.Replay(graph);
      engine.WaitForAll();
      check_no_pool_work(first, buffers.pool(0).stats());
      std::vector<int> expected(kReplays);
      for (int k = 0; k < kReplays; ++k) expected[k] = k;
      CHECK(step.values == expected);  // each replay found the bytes the one before left
      CHECK(step.torn.load(std::memory_order_relaxed) == 0);
      REQUIRE(step.blocks.size() == kReplays);
      CHECK(std::all_of(step.blocks.begin(), step.blocks.end(), [&](const void* b) { return b == step.blocks[0]; }));
      graph = Graph{};
      engine.WaitForAll();
      const MemoryPoolStats after = buffers.pool(0).stats();
      CHECK(after.bytes_in_use == 0);  // the graph's end freed it
      Buffer again = buffers.allocate(TemporaryStep::kBytes, 0);
      const void* reused = nullptr;
      engine.Push([again, &reused] { reused = again.data(); }, {}, {again.var()});
      engine.WaitForAll();
      CHECK(reused == step.blocks[0]);  // the next allocation of its class takes it back
      CHECK(buffers.pool(0).stats().fresh_allocations == 1);
      buffers.deallocate(again);
      engine.WaitForAll();
    }
  }
}

TEST_CASE("Buffers allocated and freed inside a Capture on host streams: one block for every replay, recorded or not",
          "[memory][buffers][graph]") {
  for (const bool recorded : {false, true}) {
    DYNAMIC_SECTION((recorded ? "recorded graphs" : "graphs run step by step")) {
      Watchdog watchdog(std::string("planned buffers on host streams, ") + (recorded ? "recorded" : "step by step"));
      Engine engine(stream_engine_options({.compute_streams = 2, .records_work = recorded}));
      Buffers buffers(engine, kStream);
      // A block freed before the capture, its death frontier on stream 1: the planned allocation, which must not wait
      // on the device (a recording cannot), takes a fresh block rather than wait for this one.
      Buffer earlier = buffers.allocate(TemporaryStep::kBytes, 0, 1);
      engine.Push([earlier](const RunContext& ctx) { fill(ctx, earlier.data(), earlier.bytes(), 9); }, {},
                  {earlier.var()}, on_stream(1));
      buffers.deallocate(earlier, 1);
      const Var out = engine.NewVariable();
      TemporaryStep step;
      Graph graph = engine.Capture([&] {
        Buffer t = buffers.allocate(TemporaryStep::kBytes, 0, 0);
        engine.Push(
            [t, &step](const RunContext& ctx) {
              void* data = t.data();
              launch(ctx, [data, &step] { step.update(data); });
            },
            {}, {t.var()}, on_stream(0));
        engine.Push(
            [t, &step](const RunContext& ctx) {
              const void* data = t.data();
              launch(ctx, [data, &step] { step.check(data); });
            },
            {t.var()}, {out}, on_stream(0));
        buffers.deallocate(t, 0);
      });
      engine.Replay(graph);
      engine.WaitForAll();
      const MemoryPoolStats first = buffers.pool(0).stats();
      CHECK(first.waits_added == 0);
      CHECK(first.bytes_in_use == TemporaryStep::kBytes);
      constexpr int kReplays = 12;
      for (int k = 1; k < kReplays; ++k) engine.Replay(graph);
      engine.WaitForAll();
      check_no_pool_work(first, buffers.pool(0).stats());
      std::vector<int> expected(kReplays);
      for (int k = 0; k < kReplays; ++k) expected[k] = k;
      CHECK(step.values == expected);
      CHECK(step.torn.load(std::memory_order_relaxed) == 0);
      REQUIRE(step.blocks.size() == kReplays);
      CHECK(std::all_of(step.blocks.begin(), step.blocks.end(), [&](const void* b) { return b == step.blocks[0]; }));
      graph = Graph{};
      engine.WaitForAll();
      CHECK(buffers.pool(0).stats().bytes_in_use == 0);
    }
  }
}

TEST_CASE("Buffers inside a Capture: what a graph cannot plan throws Error; a graph may outlive its Buffers",
          "[memory][buffers][graph][errors]") {
  SECTION("a free, inside a capture, of a buffer allocated before it") {
    EngineOptions options;
    options.executors.push_back(std::make_unique<InlineExecutor>());
    Engine engine(std::move(options));
    Buffers buffers(engine, 0);
    Buffer kept = buffers.allocate(64, 0);
    engine.Push([kept] { std::memset(kept.data(), 0, 64); }, {}, {kept.var()});  // takes its block
    const Graph graph = engine.Capture([&] {
      CHECK_THROWS_WITH(buffers.deallocate(kept),
                        Catch::Contains("Buffers::deallocate") && Catch::Contains("made before the capture"));
    });
    CHECK(graph.empty());
    CHECK_FALSE(kept.var().is_null());  // the refused free left the buffer alive
    buffers.deallocate(kept);
    engine.WaitForAll();
    CHECK(buffers.pool(0).stats().bytes_in_use == 0);
  }
  SECTION("a bounded pool, on a CPU executor and on a stream executor") {
    // Planned, a step that allocates, frees and allocates again within the limit would wait for ever for room.
    for (const bool streams : {false, true}) {
      Engine engine(stream_engine_options());
      Buffers buffers(engine, streams ? kStream : kCpu, BuffersOptions{.limit = 4096});
      const Graph graph = engine.Capture([&] {
        CHECK_THROWS_WITH((void)buffers.allocate(4096, 0),
                          Catch::Contains("Buffers::allocate inside Capture") && Catch::Contains("bounded"));
      });
      CHECK(graph.empty());
      CHECK(buffers.pool(0).stats().bytes_held == 0);
    }
  }
  SECTION("a graph replayed after its Buffers is gone, then destroyed") {
    EngineOptions options;
    options.executors.push_back(std::make_unique<ThreadPoolExecutor>(ThreadPoolOptions{.workers = 2}));
    Engine engine(std::move(options));
    const Var out = engine.NewVariable();
    TemporaryStep step;
    Graph graph;
    {
      Buffers buffers(engine, 0);
      graph = engine.Capture([&] {
        Buffer t = buffers.allocate(TemporaryStep::kBytes, 0);
        engine.Push([t, &step] { step.update(t.data()); }, {}, {t.var()});
        engine.Push([t, &step] { step.check(t.data()); }, {t.var()}, {out});
        buffers.deallocate(t);
      });
      engine.Replay(graph);
    }  // ~Buffers does not wait for the graph
    engine.Replay(graph);
    engine.WaitForAll();
    CHECK(step.values == std::vector<int>{0, 1});
    graph = Graph{};  // the free runs into the pool the graph kept alive
    engine.WaitForAll();
  }
}

TEST_CASE("Buffers take executors by typed id as by index, and refuse an id that other options issued",
          "[memory][buffers][executor_id]") {
  Watchdog watchdog("Buffers with typed ids");
  StreamEngine engine({.compute_streams = 2});
  const StreamEngineIds& ids = engine.ids();
  EngineOptions other;
  const ExecutorId<InlineExecutor> foreign = other.emplace<InlineExecutor>();
  CHECK_THROWS_WITH(Buffers(engine, foreign), Catch::Contains("another engine"));
  CHECK_THROWS_WITH(Buffers(engine, ids.streams, {.limit = 1 << 20, .cpu_executor = foreign}),
                    Catch::Contains("another engine"));
  {
    Buffers buffers(engine, ids.streams, {.limit = 1 << 20, .cpu_executor = ids.cpu});
    Buffer a = buffers.allocate(1000, 0, 0);
    engine.Push([a](const RunContext& ctx) { fill(ctx, a.data(), a.bytes(), 3); }, {}, {a.var()},
                PushOptions{.context = {.executor = ids.streams, .device = 0, .stream = 1}});
    std::atomic<bool> holds_3{false};
    engine.Push([&, a] { holds_3.store(holds(a.data(), a.bytes(), 3), std::memory_order_relaxed); }, {a.var()}, {},
                PushOptions{.context = {.executor = ids.cpu}});
    buffers.deallocate(a, 1);
    engine.WaitForAll();
    CHECK(holds_3.load(std::memory_order_relaxed));
    CHECK(stream_executor(engine).stats(0, StreamKind::kCompute, 1).ops_issued >= 1);  // the fill ran on stream 1
    CHECK(buffers.pool(0).stats().fresh_allocations == 1);
  }
  engine.WaitForAll();
}

}  // namespace
}  // namespace depengine::test
