// The compute-bound kernel of the Task-Bench-style harness: a loop of fused multiply-adds whose length sets a task's
// granularity. Four independent accumulators, each iteration one FMA on each (a = a * m + c, with m < 1 so the values
// stay bounded), so the loop runs at the FMA unit's latency, not at memory's. Where the CPU has FMA instructions
// (x86-64 with FMA3, chosen once at start-up) they are used; elsewhere a separate multiply and add.
//
// Thread safety: pure; any thread. Cost: about iterations x the FMA latency; no allocation.
#pragma once

#include <cstdint>

namespace depengine::bench::taskbench {

// Runs `iterations` iterations from `seed` and returns the sum of the accumulators (which the caller must use, so
// that the loop is not optimised away).
double kernel(double seed, std::int64_t iterations) noexcept;

// Nanoseconds per iteration of kernel() on this thread: the fastest of a few calls, about `budget_ns` in all.
double kernel_ns_per_iteration(double budget_ns = 2e7);

}  // namespace depengine::bench::taskbench
