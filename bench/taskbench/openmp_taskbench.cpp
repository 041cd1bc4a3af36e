// The Task-Bench-style harness on OpenMP tasks, built twice like bench/peers/openmp (GCC + libgomp, clang + libomp;
// the runtime that ran is checked and printed). One thread of a team of OMP_NUM_THREADS (2) creates every task inside
// `single`, timestep by timestep: task (t, p) has depend(in: ...) on its dependencies' cells in field (t - 1) mod 2
// (an OpenMP 5.0 depend iterator over the list) and depend(inout: ...) on its own cell in field t mod 2; trivial
// tasks have no depend clause. Timed from the first task's creation to the return of taskwait.
#include <chrono>
#include <cstdio>
#include <exception>

#include "bench/peers/common/peer_main.h"
#include "bench/peers/openmp/openmp_runtime.h"
#include "bench/taskbench/harness.h"

namespace depengine::bench::taskbench {
namespace {

double run_graph(const TaskGraph& graph, TaskData& data, std::int64_t iterations) {
  const bool trivial = graph.pattern() == Pattern::kTrivial;
  double ns = 0;
#pragma omp parallel default(none) shared(graph, data, ns) firstprivate(trivial, iterations)
#pragma omp single
  {
    int deps[TaskGraph::kMaxWidth];
    const auto start = std::chrono::steady_clock::now();
    for (int t = 0; t < graph.steps(); ++t) {
      // maybe_unused: GCC 12 does not count uses in depend clauses and would warn these unused.
      [[maybe_unused]] Cell* const in = &data.cell(TaskGraph::field_of(t + 1), 0);  // field (t - 1) mod 2
      [[maybe_unused]] Cell* const out = &data.cell(TaskGraph::field_of(t), 0);
      for (int p = 0; p < graph.active(t); ++p) {
        const int n = graph.dependencies(t, p, deps);
        const int* const d = deps;
        if (trivial) {
#pragma omp task default(none) shared(data) firstprivate(t, p, iterations)
          data.execute(t, p, iterations);
        } else {
// clang-format off
#pragma omp task default(none) shared(data) firstprivate(t, p, iterations) \
                 depend(iterator(j = 0 : n), in : in[d[j]]) depend(inout : out[p])
          data.execute(t, p, iterations);
          // clang-format on
        }
      }
    }
#pragma omp taskwait
    ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  }
  return ns;
}

}  // namespace
}  // namespace depengine::bench::taskbench

int main(int argc, char** argv) try {
  using namespace depengine::bench::taskbench;
  using namespace depengine::bench::peers;
  pin_environment(argv, kOpenmpEnvironment);
  const HarnessOptions options = parse_harness_options(argc, argv);
  const std::string system = openmp_system();
  print_setting(system, "runtime " + checked_openmp_runtime() + ", compiler " + __VERSION__);
  print_setting(system, describe_environment(kOpenmpPrinted));
  report(options.common, sweep(options, system, omp_get_max_threads(), run_graph));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "taskbench_openmp: %s\n", e.what());
  return 1;
}
