#include "bench/common/engine_run.h"

#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

namespace depengine::bench {

double run_workload(Engine& engine, const Workload& workload) {
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
  return std::chrono::duration<double, std::nano>(stop - start).count() / static_cast<double>(workload.size());
}

}  // namespace depengine::bench
