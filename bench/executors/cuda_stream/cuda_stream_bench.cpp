// bench_cuda_stream: dependent kernels across two CUDA streams, through the engine and through two peers measured in
// the same run.
//
//   bench_cuda_stream [--runs N] [--json FILE] [--smoke]
//
// Every row runs a chain of N dependent one-thread kernels (each adds 1 to one device counter, checked at the end):
//   alternating/depengine      engine ops pinned to compute streams 0, 1, 0, 1, ... (every dependency crosses
//                              streams: one device wait per op, recorded by the executor's events)
//   alternating-fences/depengine   the alternating chain ordered by a timeline instead of a variable: op i waits
//                              for t >= i and signals t = i + 1, issued on its predecessor's promise
//   same-stream/depengine      engine ops on a stream the executor chooses (it keeps the chain on one stream)
//   alternating/depengine-replay   the same chain captured once (Engine::Capture) and replayed 10 times after a first
//                              replay that records it: one engine op and one CUDA graph launch per replay of 10^4
//                              kernels (a recorded graph runs on one stream, so no cross-stream waits remain)
//   alternating/cuda-events    hand-written CUDA: launch, cudaEventRecord, cudaStreamWaitEvent on the other stream
//                              (the floor any engine pays for a cross-stream dependency)
//   alternating/cuda-events+hostfunc   the same plus a cudaLaunchHostFunc after each kernel: what completion by
//                              host callback costs
//   alternating/host-sync      the naive policy of MXNet 1.x: launch, then cudaStreamSynchronize, before the next
//   round-trip/depengine       one op pushed on stream 0, one dependent on stream 1, then WaitForVar: the latency
//                              from push to completion seen by the host, per pair (ns_per_op is per pair)
// ns_per_op is wall time from the first push (or launch) until the chain has completed, divided by N: with kernels
// this small, the device-side dispatch-to-dispatch latency once the host issues faster than the device runs. The
// depengine rows add issue_ns_per_op (host time to push the whole chain, per op), waits issued per op, the fraction of
// wait-frontier entries elided, notifications per op and host synchronisations.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <depengine/engine/engine.h>
#include <depengine/executors/cuda_stream/cuda_stream_backend.h>
#include <depengine/executors/stream/stream_executor.h>
#include <depengine/executors/threadpool/threadpool_executor.h>
#include <depengine/frontier/timeline.h>

#include "bench/common/report.h"
#include "bench/executors/cuda_stream/bump_kernel.h"

namespace depengine::bench {
namespace {

using Clock = std::chrono::steady_clock;

void check(cudaError_t status, const char* call) {
  if (status != cudaSuccess) throw std::runtime_error(std::string(call) + ": " + cudaGetErrorString(status));
}

double ns_since(Clock::time_point start, std::size_t ops) {
  return std::chrono::duration<double, std::nano>(Clock::now() - start).count() / static_cast<double>(ops);
}

struct Run {
  double ns_per_op = 0;
  std::vector<Metric> metrics;
};

// A fresh engine per run: CPU pool at 0, the CUDA stream executor (device 0, 2 compute streams) at 1.
struct CudaEngine {
  ExecutorId<StreamExecutor> stream_id;  // set by options() while `engine` is built (declared first)
  Engine engine;
  StreamExecutor& streams;
  unsigned* counter;

  static EngineOptions options(ExecutorId<StreamExecutor>& streams) {
    EngineOptions o;
    o.emplace<ThreadPoolExecutor>(ThreadPoolOptions{.workers = 1});
    streams = o.emplace<StreamExecutor>(
        std::make_unique<CudaStreamBackend>(),
        StreamExecutorOptions{.devices = 1, .compute_streams = 2, .copy_streams = 0, .name = "cuda"});
    return o;
  }
  CudaEngine()
      : engine(options(stream_id)),
        streams(engine.executor(stream_id)),
        counter(static_cast<unsigned*>(streams.backend().allocate(0, sizeof(unsigned)))) {
    check(cudaMemset(counter, 0, sizeof(unsigned)), "cudaMemset");
  }
  ~CudaEngine() {
    engine.WaitForAll();
    streams.backend().deallocate(0, counter);
  }
  [[nodiscard]] unsigned value() const {
    unsigned host = 0;
    check(cudaMemcpy(&host, counter, sizeof host, cudaMemcpyDeviceToHost), "cudaMemcpy");
    return host;
  }
};

// A chain of n dependent kernels on the engine; stream -2 alternates 0, 1, 0, ...; -1 lets the executor choose. The
// chain is ordered by a variable, or with `by_fences` by a timeline alone.
Run depengine_chain(std::size_t n, int placement, bool by_fences = false) {
  Timeline t;  // before the engine: outlives every op that names it
  CudaEngine setup;
  Var x = setup.engine.NewVariable();
  unsigned* counter = setup.counter;
  const auto start = Clock::now();
  for (std::size_t i = 0; i < n; ++i) {
    PushOptions o;
    o.context = Context{.executor = 1, .stream = placement == -2 ? static_cast<std::int32_t>(i % 2) : placement};
    if (by_fences) {
      o.wait_fences = {Fence{&t, i}};
      o.signal_fences = {Fence{&t, i + 1}};
    }
    setup.engine.Push([counter](const RunContext& ctx) { launch_bump(ctx.stream->native, counter); }, {},
                      by_fences ? VarList{} : VarList{x}, o);
  }
  const double issue = ns_since(start, n);
  if (by_fences) {
    setup.engine.WaitForFence({&t, n});
  } else {
    setup.engine.WaitForVar(x);
  }
  const double total = ns_since(start, n);
  if (setup.value() != n) throw std::runtime_error("depengine chain: wrong counter");
  const StreamStats s = setup.streams.stats();
  const double entries = static_cast<double>(s.waits_issued + s.waits_elided + s.waits_complete);
  const double dn = static_cast<double>(n);
  return {total,
          {{"issue_ns_per_op", issue},
           {"waits_issued_per_op", static_cast<double>(s.waits_issued) / dn},
           {"elided_fraction", entries > 0 ? static_cast<double>(s.waits_elided + s.waits_complete) / entries : 0},
           {"notifications_per_op", static_cast<double>(s.notifications) / dn},
           {"host_synchronizations", static_cast<double>(s.host_synchronizations)}}};
}

// The alternating chain of n kernels captured once as a graph (engine/graph.h) and replayed `replays` times after a
// first replay, not timed, that records it (a CUDA graph launched once per replay). Per kernel.
Run depengine_replay(std::size_t n, std::size_t replays) {
  CudaEngine setup;
  Var x = setup.engine.NewVariable();
  unsigned* counter = setup.counter;
  const Graph chain = setup.engine.Capture([&] {
    for (std::size_t i = 0; i < n; ++i) {
      PushOptions o;
      o.context = Context{.executor = 1, .stream = static_cast<std::int32_t>(i % 2)};
      setup.engine.Push([counter](const RunContext& ctx) { launch_bump(ctx.stream->native, counter); }, {}, {x}, o);
    }
  });
  setup.engine.Replay(chain);
  setup.engine.WaitForVar(x);
  const auto start = Clock::now();
  for (std::size_t r = 0; r < replays; ++r) setup.engine.Replay(chain);
  const double issue = ns_since(start, n * replays);
  setup.engine.WaitForVar(x);
  const double total = ns_since(start, n * replays);
  if (setup.value() != n * (replays + 1)) throw std::runtime_error("depengine replay: wrong counter");
  return {total, {{"issue_ns_per_op", issue}}};
}

// Push one op on stream 0 and a dependent one on stream 1, wait for it; `pairs` times.
Run depengine_round_trip(std::size_t pairs) {
  CudaEngine setup;
  Var x = setup.engine.NewVariable();
  unsigned* counter = setup.counter;
  auto on = [](std::int32_t stream) {
    PushOptions o;
    o.context = Context{.executor = 1, .stream = stream};
    return o;
  };
  const auto start = Clock::now();
  for (std::size_t i = 0; i < pairs; ++i) {
    setup.engine.Push([counter](const RunContext& ctx) { launch_bump(ctx.stream->native, counter); }, {}, {x}, on(0));
    setup.engine.Push([counter](const RunContext& ctx) { launch_bump(ctx.stream->native, counter); }, {}, {x}, on(1));
    setup.engine.WaitForVar(x);
  }
  const double per_pair = ns_since(start, pairs);
  if (setup.value() != 2 * pairs) throw std::runtime_error("round trip: wrong counter");
  return {per_pair, {}};
}

struct RawStreams {
  cudaStream_t stream[2]{};
  cudaEvent_t event[2]{};
  unsigned* counter = nullptr;
  RawStreams() {
    for (int i = 0; i < 2; ++i) {
      check(cudaStreamCreateWithFlags(&stream[i], cudaStreamNonBlocking), "cudaStreamCreate");
      check(cudaEventCreateWithFlags(&event[i], cudaEventDisableTiming), "cudaEventCreate");
    }
    check(cudaMalloc(reinterpret_cast<void**>(&counter), sizeof(unsigned)), "cudaMalloc");
    check(cudaMemset(counter, 0, sizeof(unsigned)), "cudaMemset");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  ~RawStreams() {
    cudaDeviceSynchronize();
    cudaFree(counter);
    for (int i = 0; i < 2; ++i) {
      cudaEventDestroy(event[i]);
      cudaStreamDestroy(stream[i]);
    }
  }
  [[nodiscard]] unsigned value() const {
    unsigned host = 0;
    check(cudaMemcpy(&host, counter, sizeof host, cudaMemcpyDeviceToHost), "cudaMemcpy");
    return host;
  }
};

void CUDART_CB empty_host_function(void* /*data*/) {}

// with_callback: also a host function after every kernel (cudaLaunchHostFunc), the cost of completion by callback.
Run cuda_events_chain(std::size_t n, bool with_callback) {
  RawStreams raw;
  const auto start = Clock::now();
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t s = i % 2;
    if (i > 0) check(cudaStreamWaitEvent(raw.stream[s], raw.event[1 - s], 0), "cudaStreamWaitEvent");
    launch_bump(raw.stream[s], raw.counter);
    check(cudaEventRecord(raw.event[s], raw.stream[s]), "cudaEventRecord");
    if (with_callback) check(cudaLaunchHostFunc(raw.stream[s], &empty_host_function, nullptr), "cudaLaunchHostFunc");
  }
  check(cudaStreamSynchronize(raw.stream[(n - 1) % 2]), "cudaStreamSynchronize");
  const double total = ns_since(start, n);
  if (raw.value() != n) throw std::runtime_error("cuda events chain: wrong counter");
  return {total, {}};
}

Run host_sync_chain(std::size_t n) {
  RawStreams raw;
  const auto start = Clock::now();
  for (std::size_t i = 0; i < n; ++i) {
    launch_bump(raw.stream[i % 2], raw.counter);
    check(cudaStreamSynchronize(raw.stream[i % 2]), "cudaStreamSynchronize");
  }
  const double total = ns_since(start, n);
  if (raw.value() != n) throw std::runtime_error("host-sync chain: wrong counter");
  return {total, {{"host_synchronizations_per_op", 1.0}}};
}

template <class F>
Record measure(const std::string& workload, const std::string& system, int runs, F&& once) {
  std::vector<double> samples;
  std::vector<std::vector<double>> metric_samples;
  std::vector<std::string> names;
  for (int run = 0; run < runs; ++run) {
    Run r = once();
    samples.push_back(r.ns_per_op);
    if (names.empty()) {
      for (const Metric& m : r.metrics) names.push_back(m.name);
      metric_samples.resize(names.size());
    }
    for (std::size_t i = 0; i < r.metrics.size(); ++i) metric_samples[i].push_back(r.metrics[i].value);
  }
  Record record{workload, system, 1, median(samples), runs, {}};
  for (std::size_t i = 0; i < names.size(); ++i) record.metrics.push_back({names[i], median(metric_samples[i])});
  return record;
}

}  // namespace
}  // namespace depengine::bench

int main(int argc, char** argv) {
  using namespace depengine::bench;
  const Options options = parse_options(argc, argv);
  {
    const depengine::CudaStreamBackend probe;
    if (probe.device_count() == 0) {
      std::printf("bench_cuda_stream: skipped: %s\n", std::string(probe.status()).c_str());
      return 0;
    }
  }
  const std::size_t n = options.smoke ? 100 : 10'000;
  const std::size_t pairs = options.smoke ? 10 : 1'000;
  const std::size_t replays = options.smoke ? 2 : 10;
  const int runs = options.smoke ? 1 : options.runs;
  std::vector<Record> records;
  records.push_back(measure("alternating", "depengine", runs, [&] { return depengine_chain(n, -2); }));
  records.push_back(measure("alternating", "depengine-replay", runs, [&] { return depengine_replay(n, replays); }));
  records.push_back(measure("alternating", "cuda-events", runs, [&] { return cuda_events_chain(n, false); }));
  records.push_back(measure("alternating", "cuda-events+hostfunc", runs, [&] { return cuda_events_chain(n, true); }));
  records.push_back(measure("alternating", "host-sync", runs, [&] { return host_sync_chain(n); }));
  records.push_back(
      measure("alternating-fences", "depengine", runs, [&] { return depengine_chain(n, -2, /*by_fences=*/true); }));
  records.push_back(measure("same-stream", "depengine", runs, [&] { return depengine_chain(n, -1); }));
  records.push_back(measure("round-trip", "depengine", runs, [&] { return depengine_round_trip(pairs); }));
  report(options, records);
  return 0;
}
