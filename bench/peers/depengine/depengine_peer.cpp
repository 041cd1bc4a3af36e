// depengine in the side-by-side comparison: the threadpool executor with 2 workers (DEPENGINE_CPU_WORKERS, when set,
// overrides the count: peer_env.h), driven exactly as bench_engine drives it: bench/common/engine_run.h (fresh
// variables per run, every op pushed from this thread, timed from the first Push to the return of WaitForAll). Also its
// replayed form, "depengine-replay" (engine/graph.h), phased as the graph-building peers are: build (the capture of a
// step) and run (its replays), on the workloads with empty bodies only (a replay reruns a step of ops, which the check
// of randsum-work's bodies against a serial run of the workload cannot follow); and two settings on a pool of 1 worker,
// each an engine of its own: "depengine-work-first" (ThreadPoolOptions::work_first) and "depengine-helping"
// (EngineOptions::help_above = 1024). Before the first workload, the process's pool of op records is filled to the
// in-flight bound (fill_record_pool()).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <depengine/engine/engine.h>
#include <depengine/executors/threadpool/threadpool_executor.h>

#include "bench/common/engine_run.h"
#include "bench/peers/common/peer_env.h"
#include "bench/peers/common/peer_main.h"

namespace depengine::bench::peers {
namespace {

constexpr int kWorkers = 2;

// Fills the process's pool of op records to the engine's in-flight bound, once, as the warm-up of every workload
// (peer_main.h) means to and cannot: its kWarmupOps ops reach the bound only if the workers run none of them meanwhile.
// A timed run that then ran further ahead of the workers than the warm-up had carved records as it pushed, faulting
// in and zeroing a huge page per 2 MiB of them (bench/README.md, "The record pool before the first timed run"). An
// asynchronous op holds a variable, completed by this thread, while `bound` - 2 more queue behind it: the push never
// reaches the bound, so it never waits, and no thread waits inside an op (on any executor, the inline one included).
void fill_record_pool(Engine& engine, std::size_t bound) {
  std::optional<Completion> hold;
  std::atomic<bool> ran{false};
  const Var held = engine.NewVariable();
  engine.PushAsync(
      [&](Completion done) {
        hold.emplace(std::move(done));
        ran.store(true, std::memory_order_release);  // pairs with the acquire load below: `hold` is set
      },
      {}, {held});
  for (std::size_t i = 2; i < bound; ++i) engine.Push([] {}, {}, {held});
  while (!ran.load(std::memory_order_acquire)) std::this_thread::yield();  // a worker runs it at once
  (*hold)();
  engine.WaitForAll();
  engine.DeleteVariable(held);
  engine.WaitForAll();
}

// A setting of ours on a pool of 1 worker, an engine of its own, pushed from this thread as the main system is: in
// that setting the pushing thread runs ops too, so the run uses two threads, as each OpenMP run does.
std::vector<Record> measure_setting(const PeerOptions& options, const std::vector<Workload>& workloads,
                                    const std::string& name, EngineOptions engine_options,
                                    const std::string& description) {
  Engine engine(std::move(engine_options));
  print_setting(name, "threadpool executor, workers=1, " + description + ", pushing from the main thread");
  return measure(options, workloads, name, kWorkers,
                 [&](const Workload& w) { return RunTiming{run_workload(engine, w, name)}; });
}

}  // namespace
}  // namespace depengine::bench::peers

int main(int argc, char** argv) try {
  using namespace depengine;
  using namespace depengine::bench;
  using namespace depengine::bench::peers;
  const PeerOptions options = parse_peer_options(argc, argv);
  const std::vector<Workload> workloads = selected_workloads(options);
  const std::string system = "depengine";
  EngineOptions engine_options;
  const std::size_t bound = engine_options.max_in_flight;
  const ThreadPoolOptions pool{.workers = depengine_pool_workers(kWorkers), .waiters_work = depengine_waiters_work()};
  auto executor = std::make_unique<ThreadPoolExecutor>(pool);
  const int workers = executor->workers();
  engine_options.executors.push_back(std::move(executor));
  Engine engine(std::move(engine_options));
  fill_record_pool(engine, bound);
  print_setting(system, "threadpool executor, workers=" + std::to_string(workers) +
                            (pool.workers == 0 ? " (DEPENGINE_CPU_WORKERS)" : "") +
                            (pool.waiters_work ? ", waiters_work" : "") + ", idle spin " +
                            std::to_string(pool.spin.count()) + " ns, pushing from the main thread");
  std::vector<Record> records = measure(options, workloads, system, kWorkers,
                                        [&](const Workload& w) { return RunTiming{run_workload(engine, w)}; });
  // The replayed form, phased like the graph-building peers: "build" is the capture of one step of kReplayStep ops,
  // "run" its replays until the workload's size.
  print_setting(system + "-replay", "the same engine; a step of the first " + std::to_string(kReplayStep) +
                                        " ops captured once (build), replayed until the workload's size (run)");
  std::vector<Workload> empty_bodies;
  for (const Workload& w : workloads) {
    if (w.body_iterations() == 0) empty_bodies.push_back(w);
  }
  for (Record& r : measure(options, empty_bodies, system + "-replay", kWorkers, [&](const Workload& w) {
         const ReplayTiming t = replay_workload(engine, w);
         const double step = static_cast<double>(std::min(kReplayStep, w.size()));
         return RunTiming{t.run_ns + t.capture_ns * step / static_cast<double>(w.size()), t.capture_ns, t.run_ns};
       })) {
    records.push_back(std::move(r));
  }
  // Work-first pushes (ThreadPoolOptions::work_first), and helping pushes (EngineOptions::help_above).
  EngineOptions work_first;
  work_first.executors.push_back(
      std::make_unique<ThreadPoolExecutor>(ThreadPoolOptions{.workers = 1, .work_first = true}));
  EngineOptions helping;
  helping.executors.push_back(std::make_unique<ThreadPoolExecutor>(ThreadPoolOptions{.workers = 1}));
  helping.help_above = 1024;
  for (Record& r : measure_setting(options, workloads, system + "-work-first", std::move(work_first),
                                   "work_first (the pushing thread runs what it pushed while the worker is behind)")) {
    records.push_back(std::move(r));
  }
  for (Record& r : measure_setting(options, workloads, system + "-helping", std::move(helping),
                                   "help_above=1024 (a push more than 1024 ops ahead of the worker runs its queued "
                                   "ops)")) {
    records.push_back(std::move(r));
  }
  report(options.common, records);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_peer_depengine: %s\n", e.what());
  return 1;
}
