#include "bench/taskbench/metg.h"

#include <cmath>
#include <stdexcept>

namespace depengine::bench::taskbench {

Metg compute_metg(std::span<const SweepPoint> points, int cores, double threshold) {
  if (points.empty()) throw std::invalid_argument("METG of an empty sweep");
  Metg out;
  const double reference = static_cast<double>(points[0].iterations) / points[0].ns_per_task;
  for (std::size_t k = 0; k < points.size(); ++k) {
    if (k > 0 && points[k].iterations >= points[k - 1].iterations) {
      throw std::invalid_argument("METG sweep points must go from large to small iteration counts");
    }
    out.granularity_ns.push_back(points[k].ns_per_task * cores);
    out.efficiency.push_back(static_cast<double>(points[k].iterations) / points[k].ns_per_task / reference);
  }
  for (std::size_t k = 1; k < points.size(); ++k) {
    const double e0 = out.efficiency[k - 1], e1 = out.efficiency[k];
    if (e1 >= threshold) continue;
    const double g0 = std::log(out.granularity_ns[k - 1]), g1 = std::log(out.granularity_ns[k]);
    const double f = e0 > e1 ? (e0 - threshold) / (e0 - e1) : 0;
    out.metg_ns = std::exp(g0 + f * (g1 - g0));
    out.crossed = true;
    return out;
  }
  out.metg_ns = out.granularity_ns.back();
  return out;
}

std::string point_name(std::string_view pattern, int width, int steps, std::int64_t iterations) {
  return std::string(pattern) + "/W=" + std::to_string(width) + "/T=" + std::to_string(steps) +
         "/iters=" + std::to_string(iterations);
}

}  // namespace depengine::bench::taskbench
