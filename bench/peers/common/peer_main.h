// What every peer executable in bench/peers shares: its command line, the measuring loop over the comparison's
// workloads (bench/common/workloads.h: the four standard ones and randsum-work), and its records. Each peer supplies
// only "run this workload once and say how long it took", so the systems differ in nothing but how they run the ops.
//
//   bench_peer_<system> [--workload NAME] [--runs N] [--json FILE] [--smoke]
//
// --workload restricts the run to one of the five (the runner, bench_peers, starts one process per system, workload
// and repetition so that it can alternate systems); the other options are report.h's.
//
// A workload whose bodies compute (Workload::body_iterations() > 0, randsum-work) runs common/op_body.h's compute() in
// each op's body, on cells of its own per run, and every run, warm-up included, ends with check_against_serial(),
// untimed: a system that ran an op out of order fails with std::logic_error naming itself and the variable.
//
// Per workload: one untimed warm-up run on its first kWarmupOps ops (enough to start every runtime's threads and warm
// its allocator; a full-size warm-up would double the time of the slowest peers for nothing), then `runs` timed runs;
// the record holds their median. depengine's record pool grows with the ops in flight, up to
// EngineOptions::max_in_flight, further than a warm-up runs ahead: its peer fills it once besides
// (depengine_peer.cpp). A system that builds a graph before running it (oneTBB flow
// graph) reports the two phases separately as well: records "<system>/build" and "<system>/run" beside "<system>",
// whose figure is their sum, the figure comparable with systems that discover dependencies as ops are pushed.
//
// Thread safety: main thread only. Allocation: freely, outside what run_once times.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "bench/common/report.h"
#include "bench/common/workloads.h"

namespace depengine::bench::peers {

inline constexpr std::size_t kWarmupOps = std::size_t{1} << 16;

struct PeerOptions {
  Options common;
  std::string workload;  // empty: all five
};

// Parses the command line above. Throws std::invalid_argument for an unknown option or workload name.
PeerOptions parse_peer_options(int argc, char** argv);

// One timed run, in nanoseconds per op. build_ns and run_ns are set (>= 0) only by systems with two phases, and then
// total_ns == build_ns + run_ns.
struct RunTiming {
  double total_ns = 0;
  double build_ns = -1;
  double run_ns = -1;
};
using RunOnce = std::function<RunTiming(const Workload&)>;

// The selected workloads (all five, or the one named by --workload), at full or smoke sizes.
std::vector<Workload> selected_workloads(const PeerOptions& options);

// Measures `run_once` on each workload of `workloads` as described above and returns the records.
std::vector<Record> measure(const PeerOptions& options, const std::vector<Workload>& workloads,
                            const std::string& system, int threads, const RunOnce& run_once);

// Prints one "# <system>: <text>" line: the runner echoes lines of this shape, so every table says which runtime,
// library and settings produced it.
void print_setting(const std::string& system, const std::string& text);

}  // namespace depengine::bench::peers
