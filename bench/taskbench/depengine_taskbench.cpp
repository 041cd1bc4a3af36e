// The Task-Bench-style harness on depengine: the threadpool executor with 2 workers, as in bench/peers
// (DEPENGINE_CPU_WORKERS, when set, overrides the count). Each cell of the two fields is a Var; task (t, p) is pushed
// reading the Vars of its dependencies' cells in field (t - 1) mod 2 and mutating its own cell's Var in field t mod 2
// (trivial tasks name no Var). All tasks are pushed from the main thread, timestep by timestep, then WaitForAll.
#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <vector>

#include <depengine/engine/engine.h>
#include <depengine/executors/threadpool/threadpool_executor.h>

#include "bench/peers/common/peer_env.h"
#include "bench/peers/common/peer_main.h"
#include "bench/taskbench/harness.h"

namespace depengine::bench::taskbench {
namespace {

constexpr int kWorkers = 2;

double run_graph(Engine& engine, const std::vector<Var>& vars, const TaskGraph& graph, TaskData& data,
                 std::int64_t iterations) {
  const int width = graph.width();
  const bool trivial = graph.pattern() == Pattern::kTrivial;
  int deps[TaskGraph::kMaxWidth];
  Var reads[TaskGraph::kMaxWidth];
  const auto start = std::chrono::steady_clock::now();
  for (int t = 0; t < graph.steps(); ++t) {
    const Var* in = &vars[static_cast<std::size_t>(TaskGraph::field_of(t + 1) * width)];  // field (t - 1) mod 2
    const Var* out = &vars[static_cast<std::size_t>(TaskGraph::field_of(t) * width)];
    for (int p = 0; p < graph.active(t); ++p) {
      const int n = graph.dependencies(t, p, deps);
      for (int j = 0; j < n; ++j) reads[j] = in[deps[j]];
      auto task = [&data, t, p, iterations] { data.execute(t, p, iterations); };
      if (trivial) {
        engine.Push(task, {}, {});
      } else {
        engine.Push(task, std::span<const Var>(reads, static_cast<std::size_t>(n)), std::span<const Var>(&out[p], 1));
      }
    }
  }
  engine.WaitForAll();
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace
}  // namespace depengine::bench::taskbench

int main(int argc, char** argv) try {
  using namespace depengine;
  using namespace depengine::bench::taskbench;
  const HarnessOptions options = parse_harness_options(argc, argv);
  EngineOptions engine_options;
  const ThreadPoolOptions pool{.workers = depengine::bench::peers::depengine_pool_workers(kWorkers),
                               .waiters_work = depengine::bench::peers::depengine_waiters_work()};
  auto executor = std::make_unique<ThreadPoolExecutor>(pool);
  const int workers = executor->workers();
  engine_options.executors.push_back(std::move(executor));
  Engine engine(std::move(engine_options));
  std::vector<Var> vars(static_cast<std::size_t>(TaskGraph::kFields * options.width));
  for (Var& v : vars) v = engine.NewVariable();
  const std::string system = "depengine";
  depengine::bench::peers::print_setting(system, "threadpool executor, workers=" + std::to_string(workers) +
                                                     (pool.workers == 0 ? " (DEPENGINE_CPU_WORKERS)" : "") +
                                                     (pool.waiters_work ? ", waiters_work" : "") +
                                                     ", pushing from the main thread");
  report(options.common, sweep(options, system, kWorkers, [&](const TaskGraph& g, TaskData& d, std::int64_t n) {
           return run_graph(engine, vars, g, d, n);
         }));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "taskbench_depengine: %s\n", e.what());
  return 1;
}
