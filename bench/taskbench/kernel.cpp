#include "bench/taskbench/kernel.h"

#include <algorithm>
#include <chrono>

namespace depengine::bench::taskbench {
namespace {

constexpr double kM = 0.999999;
constexpr double kC = 1e-6;

#if defined(__x86_64__)
[[gnu::target("fma")]] double kernel_fma(double seed, std::int64_t iterations) noexcept {
  double a0 = seed, a1 = seed + 0.25, a2 = seed + 0.5, a3 = seed + 0.75;
  for (std::int64_t i = 0; i < iterations; ++i) {
    a0 = __builtin_fma(a0, kM, kC);
    a1 = __builtin_fma(a1, kM, kC);
    a2 = __builtin_fma(a2, kM, kC);
    a3 = __builtin_fma(a3, kM, kC);
  }
  return a0 + a1 + a2 + a3;
}
#endif

double kernel_plain(double seed, std::int64_t iterations) noexcept {
  double a0 = seed, a1 = seed + 0.25, a2 = seed + 0.5, a3 = seed + 0.75;
  for (std::int64_t i = 0; i < iterations; ++i) {
    a0 = a0 * kM + kC;
    a1 = a1 * kM + kC;
    a2 = a2 * kM + kC;
    a3 = a3 * kM + kC;
  }
  return a0 + a1 + a2 + a3;
}

using KernelFn = double (*)(double, std::int64_t) noexcept;

KernelFn choose() noexcept {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("fma")) return kernel_fma;
#endif
  return kernel_plain;
}

// Chosen during static initialisation, before any task can run.
const KernelFn chosen = choose();

}  // namespace

double kernel(double seed, std::int64_t iterations) noexcept { return chosen(seed, iterations); }

double kernel_ns_per_iteration(double budget_ns) {
  using Clock = std::chrono::steady_clock;
  // Doubles the iteration count until one call takes budget_ns / kTrials, then keeps the fastest of kTrials calls:
  // on a shared machine a call can only be slowed down, never sped up, by what else runs.
  constexpr int kTrials = 5;
  std::int64_t iterations = 1 << 10;
  double sink = 0;
  double best = 0;
  for (;;) {
    const auto start = Clock::now();
    sink += kernel(1.0, iterations);
    best = std::chrono::duration<double, std::nano>(Clock::now() - start).count();
    if (best >= budget_ns / kTrials || iterations >= (std::int64_t{1} << 40)) break;
    iterations *= 2;
  }
  for (int trial = 1; trial < kTrials; ++trial) {
    const auto start = Clock::now();
    sink += kernel(1.0, iterations);
    best = std::min(best, std::chrono::duration<double, std::nano>(Clock::now() - start).count());
  }
  // sink is always finite; the comparison only keeps it (and so the kernel calls) alive.
  return sink == -1.0 ? 0 : best / static_cast<double>(iterations);
}

}  // namespace depengine::bench::taskbench
