// depengine in the side-by-side comparison: the threadpool executor with 2 workers, driven exactly as bench_engine
// drives it (bench/engine/engine_bench.cpp): fresh variables per run, every op pushed from this thread with its
// read and mutate lists as std::span<const Var>, timed from the first Push to the return of WaitForAll.
#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <vector>

#include "bench/peers/common/peer_main.h"
#include "engine/engine.h"
#include "executors/threadpool/threadpool_executor.h"

namespace depengine::bench::peers {
namespace {

constexpr int kWorkers = 2;

RunTiming run_once(Engine& engine, const Workload& workload) {
  std::vector<Var> vars(workload.num_vars());
  for (Var& var : vars) var = engine.NewVariable();
  std::vector<Var> reads(workload.max_list()), mutates(workload.max_list());
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t op = 0; op < workload.size(); ++op) {
    std::size_t r = 0, m = 0;
    for (const std::uint32_t v : workload.reads(op)) reads[r++] = vars[v];
    for (const std::uint32_t v : workload.mutates(op)) mutates[m++] = vars[v];
    engine.Push([] {}, std::span<const Var>(reads.data(), r), std::span<const Var>(mutates.data(), m));
  }
  engine.WaitForAll();
  const auto stop = std::chrono::steady_clock::now();
  for (const Var& var : vars) engine.DeleteVariable(var);
  engine.WaitForAll();
  return {std::chrono::duration<double, std::nano>(stop - start).count() / static_cast<double>(workload.size())};
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
  const ThreadPoolOptions pool{.workers = kWorkers};
  engine_options.executors.push_back(std::make_unique<ThreadPoolExecutor>(pool));
  Engine engine(std::move(engine_options));
  print_setting(system, "threadpool executor, workers=" + std::to_string(kWorkers) + ", idle spin " +
                            std::to_string(pool.spin.count()) + " ns, pushing from the main thread");
  report(options.common,
         measure(options, workloads, system, kWorkers, [&](const Workload& w) { return run_once(engine, w); }));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_peer_depengine: %s\n", e.what());
  return 1;
}
