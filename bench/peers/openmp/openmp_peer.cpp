// OpenMP tasks in the side-by-side comparison. One source, built twice (see CMakeLists.txt): by GCC against libgomp
// (bench_peer_openmp_libgomp) and by clang against LLVM's libomp (bench_peer_openmp_libomp). Which runtime actually
// ran is checked, not assumed: libomp defines __kmpc_* entry points and libgomp does not, and the library that
// defines omp_get_num_threads is printed.
//
// Each variable of the workload is one byte of a buffer, used only as a dependence address. Each op is an empty task
// with depend(in: ...) on what it reads and depend(inout: ...) on what it mutates, created by one thread of a team of
// OMP_NUM_THREADS (2) inside `single`; the other thread runs tasks from the implicit barrier. Timed from before the
// first task is created to the return of taskwait; the team is started before the clock starts, as depengine's pool
// is.
//
// Task creation uses the plainest clause for the shape at hand: one fixed `inout` (or `in`) item for the ops that have
// exactly one (independent, chain, fanout), OpenMP 5.0 depend iterators over the lists otherwise (randsum), so the
// runtime is never handed a longer dependence array than the op has.
//
// randsum-work (bodies that compute, common/op_body.h) runs the same way with its tasks' bodies compute(workload, op,
// cells): each variable's Cell is both its number and its dependence address, and every task uses the iterator form,
// as randsum's do. The cells are checked against a serial run after the clock stops.
#include <chrono>
#include <cstdio>
#include <exception>
#include <span>
#include <string>
#include <vector>

#include "bench/common/op_body.h"
#include "bench/peers/common/peer_main.h"
#include "bench/peers/openmp/openmp_runtime.h"

namespace depengine::bench::peers {
namespace {

RunTiming run_empty(const Workload& workload) {
  std::vector<unsigned char> storage(workload.num_vars());
  // maybe_unused: GCC 12 does not count uses in depend clauses and would warn it unused.
  [[maybe_unused]] unsigned char* const slot = storage.data();
  double ns = 0;
#pragma omp parallel default(none) shared(workload, ns) firstprivate(slot)
#pragma omp single
  {
    const auto start = std::chrono::steady_clock::now();
    for (std::size_t op = 0; op < workload.size(); ++op) {
      const std::span<const std::uint32_t> reads = workload.reads(op);
      const std::span<const std::uint32_t> mutates = workload.mutates(op);
      if (reads.empty() && mutates.size() == 1) {
        const std::uint32_t m = mutates[0];
#pragma omp task default(none) depend(inout : slot[m])
        {}
      } else if (reads.size() == 1 && mutates.empty()) {
        const std::uint32_t r = reads[0];
#pragma omp task default(none) depend(in : slot[r])
        {}
      } else {
        const std::uint32_t* const r = reads.data();
        const std::uint32_t* const m = mutates.data();
        const int nr = static_cast<int>(reads.size());
        const int nm = static_cast<int>(mutates.size());
// clang-format off
#pragma omp task default(none) depend(iterator(j = 0 : nr), in : slot[r[j]]) \
                                 depend(iterator(j = 0 : nm), inout : slot[m[j]])
        {}
        // clang-format on
      }
    }
#pragma omp taskwait
    const auto stop = std::chrono::steady_clock::now();
    ns = std::chrono::duration<double, std::nano>(stop - start).count();
  }
  return {ns / static_cast<double>(workload.size())};
}

// The ops of a workload whose bodies compute: each task runs compute() over the cells it reads and mutates.
RunTiming run_computing(const std::string& system, const Workload& workload) {
  std::vector<Cell> storage(workload.num_vars());
  // maybe_unused: GCC 12 does not count uses in depend clauses, as for `slot` above.
  [[maybe_unused]] Cell* const cells = storage.data();
  const std::span<Cell> all(storage);
  double ns = 0;
#pragma omp parallel default(none) shared(workload, ns, all) firstprivate(cells)
#pragma omp single
  {
    const auto start = std::chrono::steady_clock::now();
    for (std::size_t op = 0; op < workload.size(); ++op) {
      const std::span<const std::uint32_t> reads = workload.reads(op);
      const std::span<const std::uint32_t> mutates = workload.mutates(op);
      const std::uint32_t* const r = reads.data();
      const std::uint32_t* const m = mutates.data();
      const int nr = static_cast<int>(reads.size());
      const int nm = static_cast<int>(mutates.size());
// clang-format off
#pragma omp task default(none) shared(workload, all) firstprivate(op) \
                 depend(iterator(j = 0 : nr), in : cells[r[j]]) depend(iterator(j = 0 : nm), inout : cells[m[j]])
      compute(workload, op, all);
      // clang-format on
    }
#pragma omp taskwait
    const auto stop = std::chrono::steady_clock::now();
    ns = std::chrono::duration<double, std::nano>(stop - start).count();
  }
  check_against_serial(system, workload, storage);
  return {ns / static_cast<double>(workload.size())};
}

RunTiming run_once(const std::string& system, const Workload& workload) {
  return workload.body_iterations() > 0 ? run_computing(system, workload) : run_empty(workload);
}

}  // namespace
}  // namespace depengine::bench::peers

int main(int argc, char** argv) try {
  using namespace depengine::bench;
  using namespace depengine::bench::peers;
  pin_environment(argv, kOpenmpEnvironment);
  const PeerOptions options = parse_peer_options(argc, argv);
  const std::vector<Workload> workloads = selected_workloads(options);
  const std::string system = openmp_system();
  const int threads = omp_get_max_threads();
  print_setting(system, "runtime " + checked_openmp_runtime() + ", compiler " + __VERSION__ + ", _OPENMP " +
                            std::to_string(_OPENMP));
  print_setting(system, describe_environment(kOpenmpPrinted));
  report(options.common,
         measure(options, workloads, system, threads, [&](const Workload& w) { return run_once(system, w); }));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_peer_openmp: %s\n", e.what());
  return 1;
}
