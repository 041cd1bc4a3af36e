// The runner's two tables: the side-by-side comparison (median ns/op per workload and system, and depengine's ratio
// to the best peer) and the METG table of the Task-Bench-style harness.
//
// Thread safety: main thread only. Allocation: freely.
#pragma once

#include <string>
#include <vector>

#include "bench/common/report.h"
#include "bench/taskbench/metg.h"

namespace depengine::bench::peers {

// Prints one row per workload: each system's median ns/op (records whose system is exactly the name), then each of
// `variants` (other settings of ours, never counted as peers), then, unless `serial` is empty, the serial row (the
// bodies alone, a reference, "-" where there is none), the best peer (the fastest system other than `ours`), and
// ours / best, then each variant / best. Below, the phases of systems that report them ("<system>/build",
// "<system>/run"), and for each workload with a serial figure, each system's and variant's speedup over it (serial
// ns/op ÷ the system's). Returns the largest ratio over the workloads not in `computing` (those whose bodies do work)
// for ours, then for each variant (0 where there is none).
std::vector<double> print_comparison(const std::vector<Record>& medians, const std::vector<std::string>& workloads,
                                     const std::vector<std::string>& systems, const std::string& ours,
                                     const std::vector<std::string>& variants, const std::string& serial,
                                     const std::vector<std::string>& computing);

struct MetgResult {
  std::string pattern;
  int width = 0;
  std::string system;
  std::vector<taskbench::SweepPoint> points;  // medians over the repetitions
  taskbench::Metg metg;
};

// Prints METG(50%) in microseconds: one row per (pattern, width), one column per system ("<" marks a sweep that never
// fell below 50%: its smallest granularity). With `curves`, each sweep's efficiency curve follows.
void print_metg(const std::vector<MetgResult>& results, const std::vector<std::string>& systems, int steps,
                bool curves);

}  // namespace depengine::bench::peers
