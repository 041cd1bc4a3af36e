// Random mixed CPU/stream workloads over 2 devices x (2 compute + 1 copy) streams, checked against serial execution.
//
// Every op folds the values of the variables it reads into those it mutates with mix(), so any misordering (a read
// that ran before the write it depends on, a write that overtook a read, a lost wait) changes the result. Stream ops
// do their folding as host work on their stream (device time), CPU ops on the pool. Each stream gets a random
// simulated device time, so slow and fast streams race; under ThreadSanitizer a missing device wait or a CPU op run
// before its stream predecessor completed is also a reported data race on the values.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "test/executors/stream/stream_executor_support.h"

namespace depengine::test {
namespace {

struct RandomOp {
  std::vector<std::size_t> reads, writes;
  bool on_stream = false;
  PushOptions options;
};

// The fold every op applies, on the host or on a stream.
void apply(std::uint64_t id, const RandomOp& op, std::vector<std::uint64_t>& values) {
  std::uint64_t h = id;
  for (const std::size_t r : op.reads) h = mix(h, values[r]);
  for (const std::size_t w : op.writes) values[w] = mix(h, values[w]);
}

RandomOp random_op(std::mt19937_64& rng, std::size_t vars, const StreamEngineSetup& setup) {
  RandomOp op;
  std::vector<std::size_t> order(vars);
  for (std::size_t i = 0; i < vars; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  const std::size_t reads = rng() % 4, writes = 1 + rng() % 2;
  op.reads.assign(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(reads));
  op.writes.assign(order.begin() + static_cast<std::ptrdiff_t>(reads),
                   order.begin() + static_cast<std::ptrdiff_t>(reads + writes));
  op.on_stream = rng() % 10 < 6;
  if (op.on_stream) {
    const auto device = static_cast<std::uint32_t>(rng() % static_cast<std::uint64_t>(setup.devices));
    const StreamKind kind = rng() % 4 == 0 ? StreamKind::kCopy : StreamKind::kCompute;
    const std::uint32_t count = kind == StreamKind::kCompute ? setup.compute_streams : setup.copy_streams;
    const std::int32_t stream = rng() % 2 == 0 ? -1 : static_cast<std::int32_t>(rng() % count);
    op.options = on_stream(stream, device, kind);
  } else {
    op.options.context.executor = kCpu;
  }
  return op;
}

// Completion by notification (the host backend's default) and by polling (the GPU backends' default).
const StreamCompletion kCompletions[] = {StreamCompletion::kNotify, StreamCompletion::kPoll};

const char* name_of(StreamCompletion completion) { return completion == StreamCompletion::kNotify ? "notify" : "poll"; }

// The runs of a randomized test: for each completion mode and seed, an engine over 2 devices x (2 compute + 1 copy)
// streams, `vars` fresh variables and a generator seeded for the run, handed to
// body(engine, setup, vars, rng, completion).
template <class Body>
void for_each_run(const char* what, std::size_t vars, Body&& body) {
  for (const StreamCompletion completion : kCompletions)
    for (const std::uint64_t seed : test_seeds()) {
      const StreamEngineSetup setup{
          .devices = 2, .compute_streams = 2, .copy_streams = 1, .workers = 2, .completion = completion};
      CAPTURE(name_of(completion), seed);
      Watchdog watchdog(what);
      watchdog.note("seed " + std::to_string(seed));
      std::mt19937_64 rng(seed);
      StreamEngine engine(setup);
      std::vector<Var> variables;
      for (std::size_t i = 0; i < vars; ++i) variables.push_back(engine.NewVariable());
      body(engine, setup, variables, rng, completion);
    }
}

TEST_CASE("random mixed CPU and stream workloads equal serial execution", "[stream_executor][random]") {
  const std::size_t kVars = 10;
  const std::size_t kOps = sized(600, 200, 300);
  for_each_run(
      "random stream workload", kVars,
      [&](StreamEngine& engine, const StreamEngineSetup& setup, const std::vector<Var>& vars, std::mt19937_64& rng,
          StreamCompletion completion) {
        StreamExecutor& streams = stream_executor(engine);

        // A random simulated device time per stream, set by one op pinned to each stream (from the issuing thread).
        for (std::uint32_t device = 0; device < 2; ++device) {
          for (const StreamKind kind : {StreamKind::kCompute, StreamKind::kCopy}) {
            for (std::uint32_t index = 0; index < streams.streams(kind); ++index) {
              const auto delay = std::chrono::microseconds(rng() % 3 == 0 ? 0 : rng() % 200);
              Var scratch = engine.NewVariable();
              engine.Push(
                  [delay](const RunContext& ctx) {
                    HostStreamBackend::of(*ctx.stream)->set_launch_delay(ctx.stream->stream, delay);
                  },
                  {}, {scratch}, on_stream(static_cast<std::int32_t>(index), device, kind));
              engine.DeleteVariable(scratch);
            }
          }
        }

        std::vector<std::uint64_t> values(kVars, 0), serial(kVars, 0);
        std::size_t stream_ops = 0;
        for (std::uint64_t id = 1; id <= kOps; ++id) {
          const RandomOp op = random_op(rng, kVars, setup);
          std::vector<Var> reads, writes;
          for (const std::size_t r : op.reads) reads.push_back(vars[r]);
          for (const std::size_t w : op.writes) writes.push_back(vars[w]);
          if (op.on_stream) {
            ++stream_ops;
            engine.Push(
                [&values, id, op](const RunContext& ctx) { launch(ctx, [&values, id, op] { apply(id, op, values); }); },
                reads, writes, op.options);
          } else {
            engine.Push([&values, id, op] { apply(id, op, values); }, reads, writes, op.options);
          }
          apply(id, op, serial);
          if (rng() % 50 == 0) {  // a wait in the middle: the variable is final as of now
            const std::size_t v = rng() % kVars;
            engine.WaitForVar(vars[v]);
            CHECK(values[v] == serial[v]);
          }
        }
        engine.WaitForAll();
        CHECK(values == serial);
        const StreamStats stats = streams.stats();
        CHECK(stats.ops_issued == stream_ops + streams.axis_count());  // + the delay-setting ops
        CHECK(stats.host_synchronizations == 0);
        // One notification per op issued, or none when polling.
        CHECK(stats.notifications == (completion == StreamCompletion::kPoll ? 0 : stats.ops_issued));
      });
}

TEST_CASE("random workloads ordered by variables and by fences equal serial execution",
          "[stream_executor][random][fences]") {
  // Besides the variables, kChannels values are ordered by timelines alone: the n-th op on channel k waits for
  // t[k] >= n and raises t[k] to n + 1, like an exclusive use of a variable. Every few ops a run of channel-only ops is
  // pushed last-first, so waiters are pushed before their signallers (held by the engine, then issued on a promise
  // or run when the value is reached).
  constexpr std::size_t kVars = 8, kChannels = 3;
  const std::size_t kOps = sized(600, 200, 300);
  for_each_run(
      "random fence workload", kVars,
      [&](StreamEngine& engine, const StreamEngineSetup& setup, const std::vector<Var>& vars, std::mt19937_64& rng,
          StreamCompletion) {
        std::vector<std::unique_ptr<Timeline>> timelines;
        for (std::size_t k = 0; k < kChannels; ++k) timelines.push_back(std::make_unique<Timeline>());
        // values[0, kVars): the variables; values[kVars + k]: channel k.
        std::vector<std::uint64_t> values(kVars + kChannels, 0), serial(kVars + kChannels, 0);
        std::vector<std::uint64_t> uses(kChannels, 0);  // ops pushed on each channel so far

        struct Pending {
          std::uint64_t id;
          RandomOp op;
        };
        auto push = [&](const Pending& p) {
          std::vector<Var> reads, writes;
          for (const std::size_t r : p.op.reads) reads.push_back(vars[r]);
          for (const std::size_t w : p.op.writes) {
            if (w < kVars) writes.push_back(vars[w]);
          }
          if (p.op.on_stream) {
            engine.Push(
                [&values, p](const RunContext& ctx) { launch(ctx, [&values, p] { apply(p.id, p.op, values); }); },
                reads, writes, p.op.options);
          } else {
            engine.Push([&values, p] { apply(p.id, p.op, values); }, reads, writes, p.op.options);
          }
        };
        // Puts `op` on channel k: it folds the channel's value and takes the channel's next fence pair.
        auto on_channel = [&](RandomOp& op, std::size_t k) {
          op.writes.push_back(kVars + k);
          const std::uint64_t n = uses[k]++;
          op.options.wait_fences = {Fence{timelines[k].get(), n}};
          op.options.signal_fences = {Fence{timelines[k].get(), n + 1}};
        };

        std::uint64_t id = 0;
        while (id < kOps) {
          if (rng() % 8 == 0) {  // a run of channel-only ops, pushed last-first
            const std::size_t k = rng() % kChannels, run = 2 + rng() % 4;
            std::vector<Pending> batch;
            for (std::size_t i = 0; i < run; ++i) {
              RandomOp op = random_op(rng, kVars, setup);
              op.reads.clear();
              op.writes.clear();
              on_channel(op, k);
              batch.push_back({++id, op});
              apply(id, op, serial);
            }
            for (auto it = batch.rbegin(); it != batch.rend(); ++it) push(*it);
            continue;
          }
          RandomOp op = random_op(rng, kVars, setup);
          if (rng() % 3 == 0) on_channel(op, rng() % kChannels);
          const Pending p{++id, op};
          push(p);
          apply(id, op, serial);
        }
        for (std::size_t k = 0; k < kChannels; ++k) engine.WaitForFence({timelines[k].get(), uses[k]});
        engine.WaitForAll();
        CHECK(values == serial);
        for (std::size_t k = 0; k < kChannels; ++k) CHECK(timelines[k]->query() == uses[k]);
        CHECK(stream_executor(engine).stats().host_synchronizations == 0);
      });
}

TEST_CASE("random workloads with failing stream ops: errors follow the data, never an early run",
          "[stream_executor][random][errors]") {
  const std::size_t kVars = 8;
  const std::size_t kOps = sized(300, 100, 150);
  for_each_run("random stream errors", kVars,
               [&](StreamEngine& engine, const StreamEngineSetup& setup, const std::vector<Var>& vars,
                   std::mt19937_64& rng, StreamCompletion) {
                 // One stream op, the first at or after a random point, fails on its stream. What it mutates must
                 // report the error: later ops on those variables are skipped and pass it on. (Other variables may
                 // report it too: an op issued on the failed stream in the same notification window is blamed, and
                 // every later op placed there fails.)
                 std::vector<std::uint64_t> values(kVars, 0);
                 std::vector<std::size_t> failed_writes;
                 std::size_t failures = 0;
                 const std::uint64_t fail_at = 1 + rng() % kOps;
                 for (std::uint64_t id = 1; id <= kOps; ++id) {
                   const RandomOp op = random_op(rng, kVars, setup);
                   std::vector<Var> reads, writes;
                   for (const std::size_t r : op.reads) reads.push_back(vars[r]);
                   for (const std::size_t w : op.writes) writes.push_back(vars[w]);
                   const bool fails = op.on_stream && id >= fail_at && failures == 0;
                   if (fails) {
                     ++failures;
                     failed_writes = op.writes;
                   }
                   if (op.on_stream) {
                     engine.Push(
                         [&values, id, op, fails](const RunContext& ctx) {
                           launch(ctx, [&values, id, op, fails] {
                             if (fails) throw OpFailure(static_cast<int>(id));
                             apply(id, op, values);
                           });
                         },
                         reads, writes, op.options);
                   } else {
                     engine.Push([&values, id, op] { apply(id, op, values); }, reads, writes, op.options);
                   }
                 }
                 // Every variable either is clean or reports a StreamError; nothing hangs and nothing else is thrown.
                 for (std::size_t v = 0; v < kVars; ++v) {
                   CAPTURE(v);
                   bool threw = false;
                   try {
                     engine.WaitForVar(vars[v]);
                   } catch (const StreamError&) {
                     threw = true;
                   }
                   if (std::find(failed_writes.begin(), failed_writes.end(), v) != failed_writes.end()) CHECK(threw);
                 }
                 // The failure reached no variable (its op and those after it on the stream mutated none):
                 // WaitForAll's.
                 try {
                   engine.WaitForAll();
                 } catch (const StreamError&) {
                   CHECK(failures > 0);
                 }
                 engine.WaitForAll();  // errors cleared
               });
}

}  // namespace
}  // namespace depengine::test
