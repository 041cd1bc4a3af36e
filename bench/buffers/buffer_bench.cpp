// What stream-ordered buffers (buffers/buffer.h) cost and how often they reuse memory without synchronisation,
// on a training-loop-shaped workload over the host stream backend (one device, two compute streams):
//
//   bench_buffers [--runs N] [--json FILE] [--smoke]
//
// One step of an L = 4 layer network, activations and gradients of 256 KiB each, all allocated and freed inside the
// step (weights and the input are allocated once):
//   forward, stream 0:   act[l] = allocate; op reads act[l-1] (the input for l = 0) and w[l], mutates act[l]
//   backward, stream 1:  grad[l] = allocate; op reads act[l], grad[l+1] and w[l], mutates grad[l];
//                        free act[l] and grad[l+1] (their last user has been pushed)
//   update, stream 0:    op reads grad[l], mutates w[l] (right after grad[l]: it overlaps the rest of the backward)
//   free grad[0] after the last update
// Frees use stream -1: the executor keeps each behind its buffer's last user. Every op enqueues an empty host launch,
// so what is measured is the engine, the executor and the pool, not device work.
//
// Rows (system "depengine-buffers"; ns per step, the median of --runs timed runs of N = 400 steps, --smoke: 20 steps
// and 1 run):
//   step-by-step   WaitForAll after every step: one step's transient memory in flight at a time
//   pipelined-8    8 steps pushed before each WaitForAll: up to 8 steps of work in flight
//   pipelined-8-bounded  the same with each device's pool bounded to the inputs plus one step's transient blocks:
//                  allocations that do not fit wait, as pending ops, for frees (each allocation is then a CPU
//                  reservation op plus the stream op)
// Metrics (after the first step, which allocates everything fresh):
//   zero_sync_fraction   acquisitions reused with no synchronisation (dominated), of all acquisitions. A bounded
//                        pool grants blocks on the host (a reservation) before the stream is known; its alloca op
//                        then settles the block on its stream (MemoryPool::settle), and counts here when that stream
//                        follows the block's last users; the waits left to streams show in stream_waits_per_step
//   pool_waits_per_step  device waits the pool added (try before you fence), per step
//   fresh_per_step       fresh blocks from the device, per step (0 in steady state: every block is reused)
//   peak_over_step       peak bytes held by the pool / one step's transient bytes (2 L blocks): the target is about
//                        1 for pipelined-8 too, since frees are issued, and their blocks reused, a step at a time
//   stream_waits_per_step  device waits the stream executor issued for the ops themselves, per step
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <depengine/buffers/buffer.h>
#include <depengine/engine/engine.h>
#include <depengine/executors/host_stream/host_stream_backend.h>
#include <depengine/executors/stream/stream_executor.h>
#include <depengine/executors/threadpool/threadpool_executor.h>

#include "bench/common/report.h"

namespace depengine::bench {
namespace {

constexpr int kLayers = 4;
constexpr std::size_t kBlockBytes = 256 * 1024;
constexpr std::uint32_t kStreams = 1;  // Context::executor of the stream executor

PushOptions on(std::int32_t stream) {
  PushOptions o;
  o.context = Context{.executor = kStreams, .device = 0, .stream_kind = StreamKind::kCompute, .stream = stream};
  return o;
}

void empty_launch(const RunContext& ctx) {
  launch_host(*ctx.stream, HostTask([] {}));
}

struct Network {
  Buffer input;
  Buffer w[kLayers];
};

void push_step(Engine& engine, Buffers& buffers, Network& net) {
  Buffer act[kLayers], grad[kLayers + 1];
  for (int l = 0; l < kLayers; ++l) {
    act[l] = buffers.allocate(kBlockBytes, 0, 0);
    const Var in = l == 0 ? net.input.var() : act[l - 1].var();
    engine.Push(empty_launch, {in, net.w[l].var()}, {act[l].var()}, on(0));
  }
  for (int l = kLayers - 1; l >= 0; --l) {
    grad[l] = buffers.allocate(kBlockBytes, 0, 1);
    if (l == kLayers - 1) {
      engine.Push(empty_launch, {act[l].var(), net.w[l].var()}, {grad[l].var()}, on(1));
    } else {
      engine.Push(empty_launch, {act[l].var(), grad[l + 1].var(), net.w[l].var()}, {grad[l].var()}, on(1));
      buffers.deallocate(grad[l + 1]);
    }
    buffers.deallocate(act[l]);
    engine.Push(empty_launch, {grad[l].var()}, {net.w[l].var()}, on(0));
  }
  buffers.deallocate(grad[0]);
}

struct Sample {
  double ns_per_step = 0;
  double zero_sync_fraction = 0, pool_waits_per_step = 0, fresh_per_step = 0, peak_over_step = 0;
  double stream_waits_per_step = 0;
};

// One timed run of `steps` steps, `depth` steps pushed per WaitForAll, on a fresh engine (so the pool's peak is this
// run's own).
Sample run(int steps, int depth, std::size_t limit) {
  EngineOptions options;
  options.emplace<ThreadPoolExecutor>(ThreadPoolOptions{.workers = 1});
  const ExecutorId<StreamExecutor> stream_id = options.emplace<StreamExecutor>(
      std::make_unique<HostStreamBackend>(), StreamExecutorOptions{.compute_streams = 2});
  Engine engine(std::move(options));
  StreamExecutor& streams = engine.executor(stream_id);
  Sample sample;
  {
    Buffers buffers(engine, stream_id, {.limit = limit});
    Network net;
    net.input = buffers.allocate(kBlockBytes, 0, 0);
    for (Buffer& w : net.w) w = buffers.allocate(kBlockBytes, 0, 0);
    push_step(engine, buffers, net);  // the first step allocates its transient blocks fresh: not measured
    engine.WaitForAll();
    const MemoryPoolStats before = buffers.pool(0).stats();
    const std::uint64_t stream_waits_before = streams.stats().waits_issued;
    const auto start = std::chrono::steady_clock::now();
    for (int s = 0; s < steps; s += depth) {
      for (int k = 0; k < depth && s + k < steps; ++k) push_step(engine, buffers, net);
      engine.WaitForAll();
    }
    const auto stop = std::chrono::steady_clock::now();
    const MemoryPoolStats after = buffers.pool(0).stats();
    const double n = steps;
    const double acquisitions = static_cast<double>(
        (after.reuse_dominated - before.reuse_dominated) + (after.reuse_complete - before.reuse_complete) +
        (after.reuse_with_waits - before.reuse_with_waits) + (after.reuse_reserved - before.reuse_reserved) +
        (after.fresh_allocations - before.fresh_allocations));
    sample.ns_per_step = std::chrono::duration<double, std::nano>(stop - start).count() / n;
    // A bounded pool's reservations are settled on their stream (MemoryPool::settle): followed there, no sync.
    sample.zero_sync_fraction = static_cast<double>((after.reuse_dominated - before.reuse_dominated) +
                                                    (after.settled_dominated - before.settled_dominated)) /
                                acquisitions;
    sample.pool_waits_per_step = static_cast<double>(after.waits_added - before.waits_added) / n;
    sample.fresh_per_step = static_cast<double>(after.fresh_allocations - before.fresh_allocations) / n;
    sample.peak_over_step =
        static_cast<double>(after.peak_bytes_held - (1 + kLayers) * kBlockBytes) / (2.0 * kLayers * kBlockBytes);
    sample.stream_waits_per_step = static_cast<double>(streams.stats().waits_issued - stream_waits_before) / n;
    buffers.deallocate(net.input);
    for (Buffer& w : net.w) buffers.deallocate(w);
    engine.WaitForAll();
  }
  return sample;
}

Record measure(const std::string& workload, int runs, int steps, int depth, std::size_t limit = ~std::size_t{0}) {
  std::vector<double> ns, zero_sync, pool_waits, fresh, peak, stream_waits;
  for (int r = 0; r < runs; ++r) {
    const Sample s = run(steps, depth, limit);
    ns.push_back(s.ns_per_step);
    zero_sync.push_back(s.zero_sync_fraction);
    pool_waits.push_back(s.pool_waits_per_step);
    fresh.push_back(s.fresh_per_step);
    peak.push_back(s.peak_over_step);
    stream_waits.push_back(s.stream_waits_per_step);
  }
  return Record{workload,
                "depengine-buffers",
                2,
                median(ns),
                runs,
                {{"zero_sync_fraction", median(zero_sync)},
                 {"pool_waits_per_step", median(pool_waits)},
                 {"fresh_per_step", median(fresh)},
                 {"peak_over_step", median(peak)},
                 {"stream_waits_per_step", median(stream_waits)}}};
}

}  // namespace
}  // namespace depengine::bench

int main(int argc, char** argv) try {
  using namespace depengine::bench;
  const Options options = parse_options(argc, argv);
  const int steps = options.smoke ? 20 : 400;
  std::vector<Record> records;
  records.push_back(measure("step-by-step", options.runs, steps, 1));
  records.push_back(measure("pipelined-8", options.runs, steps, 8));
  records.push_back(measure("pipelined-8-bounded", options.runs, steps, 8, (1 + 3 * kLayers) * kBlockBytes));
  report(options, records);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_buffers: %s\n", e.what());
  return 1;
}
