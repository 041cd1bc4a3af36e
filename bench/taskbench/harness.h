// What every runtime's Task-Bench-style harness shares: the command line, the sweep over kernel sizes, the checks
// and the records. A runtime supplies only "run this graph once with this many iterations per task".
//
//   taskbench_<system> [--pattern P] [--width W] [--steps T] [--iterations N,N,...] [--runs N] [--json FILE] [--smoke]
//
// Defaults: stencil_1d, W = 2, T = 1000, iterations 2^16, 2^15, ..., 1. Iterations are swept in the order given
// (descending, so the first is the reference of metg.h). Before the sweep one untimed run at the smallest count
// warms the runtime up. Each point is measured `runs` times; its record ("<pattern>/W=../T=../iters=..", see
// point_name) holds the median wall time per task in ns. After every run TaskData::check() must pass: a run that
// broke dependency order ends the program with an error naming the task. The METG itself is computed by the runner
// (bench_peers) from the medians of all repetitions; run alone, the harness prints it for its own sweep.
//
// Thread safety: main thread only. Allocation: freely, outside what the runtime times.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bench/common/report.h"
#include "bench/taskbench/task_graph.h"

namespace depengine::bench::taskbench {

struct HarnessOptions {
  Options common;
  Pattern pattern = Pattern::kStencil1d;
  int width = 2;
  int steps = 1000;
  std::vector<std::int64_t> iterations;  // descending
};

// Throws std::invalid_argument for an unknown option, a bad value or iterations that are not descending.
HarnessOptions parse_harness_options(int argc, char** argv);

// Runs every task of `graph` once, each with `iterations`, on `data` (already reset) and returns the wall time in ns,
// from the submission of the first task to the completion of the last.
using RunGraph = std::function<double(const TaskGraph& graph, TaskData& data, std::int64_t iterations)>;

// The sweep described above. Prints the points and the METG of this sweep; returns the records.
std::vector<Record> sweep(const HarnessOptions& options, const std::string& system, int threads,
                          const RunGraph& run_graph);

}  // namespace depengine::bench::taskbench
