// Minimum effective task granularity, METG(50%), the metric Task Bench introduced: the smallest task granularity at
// which a system still reaches 50% of the compute throughput it reaches with large tasks.
//
// A sweep runs the same graph with the kernel's iteration count going down from large to small. For each point:
//   granularity = wall time x cores / tasks        (the time one task occupies one core, overhead included)
//   efficiency  = (iterations / wall time) / (iterations_0 / wall time_0)
// where point 0 is the largest iteration count (the reference: there the runtime's overhead is negligible). METG is
// where efficiency first falls below the threshold, interpolated between the two points around the crossing, linearly
// in efficiency against log(granularity).
//
// Thread safety: pure functions. Allocation: the result's vectors.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace depengine::bench::taskbench {

struct SweepPoint {
  std::int64_t iterations = 0;
  double ns_per_task = 0;  // wall time / tasks
};

struct Metg {
  double metg_ns = 0;    // the interpolated granularity at the threshold; see `crossed`
  bool crossed = false;  // false: efficiency never fell below the threshold, metg_ns is the smallest granularity
  std::vector<double> granularity_ns;  // per point
  std::vector<double> efficiency;      // per point
};

// `points` in the order swept (iterations descending). Throws std::invalid_argument if empty or not descending.
Metg compute_metg(std::span<const SweepPoint> points, int cores, double threshold = 0.5);

// The workload name of one sweep point's record: "<pattern>/W=<width>/T=<steps>/iters=<iterations>", shared by the
// harness that writes records and the runner that reads them.
std::string point_name(std::string_view pattern, int width, int steps, std::int64_t iterations);

}  // namespace depengine::bench::taskbench
