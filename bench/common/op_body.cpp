#include "bench/common/op_body.h"

#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

namespace depengine::bench {

std::uint64_t arithmetic_body(std::uint32_t iterations, std::uint64_t seed) noexcept {
  // Knuth's MMIX linear congruential step: each depends on the one before, so the loop cannot be vectorised or folded.
  std::uint64_t x = seed;
  for (std::uint32_t i = 0; i < iterations; ++i) x = x * 6364136223846793005ULL + 1442695040888963407ULL;
  return x;
}

void compute(const Workload& workload, std::size_t op, std::span<Cell> cells) noexcept {
  std::uint64_t seed = op;
  for (const std::uint32_t v : workload.reads(op)) seed += cells[v].value;
  const std::uint64_t value = arithmetic_body(workload.body_iterations(), seed);
  for (const std::uint32_t v : workload.mutates(op)) cells[v].value = value;
}

void compute_all(const Workload& workload, std::span<Cell> cells) noexcept {
  for (std::size_t op = 0; op < workload.size(); ++op) compute(workload, op, cells);
}

void check_against_serial(std::string_view system, const Workload& workload, std::span<const Cell> cells) {
  if (cells.size() != workload.num_vars()) {
    throw std::invalid_argument(std::string(system) + ": " + std::to_string(cells.size()) + " cells for the " +
                                std::to_string(workload.num_vars()) + " variables of " + workload.name());
  }
  std::vector<Cell> serial(workload.num_vars());
  compute_all(workload, serial);
  for (std::size_t v = 0; v < serial.size(); ++v) {
    if (cells[v].value != serial[v].value) {
      throw std::logic_error(std::string(system) + ": " + workload.name() + " computed variable " + std::to_string(v) +
                             " differently from a serial run: an op ran out of order");
    }
  }
}

double run_serial(const Workload& workload) {
  std::vector<Cell> cells(workload.num_vars());
  const auto start = std::chrono::steady_clock::now();
  compute_all(workload, cells);
  // The numbers escape before the clock stops (Google Benchmark's DoNotOptimize): the compiler may neither drop the
  // loop that nothing reads nor finish it after the clock.
  asm volatile("" : : "r"(cells.data()) : "memory");
  const auto stop = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::nano>(stop - start).count() / static_cast<double>(workload.size());
}

}  // namespace depengine::bench
