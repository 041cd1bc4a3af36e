#include "bench/peers/common/peer_main.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string_view>

namespace depengine::bench::peers {

PeerOptions parse_peer_options(int argc, char** argv) {
  PeerOptions options;
  std::vector<char*> rest{argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--workload") {
      if (i + 1 >= argc) throw std::invalid_argument("--workload needs a name");
      options.workload = argv[++i];
    } else {
      rest.push_back(argv[i]);
    }
  }
  options.common =
      parse_options(static_cast<int>(rest.size()), rest.data(), "[--workload NAME] [--runs N] [--json FILE] [--smoke]");
  return options;
}

std::vector<Workload> selected_workloads(const PeerOptions& options) {
  std::vector<Workload> all = comparison_workloads(options.common.smoke);
  if (options.workload.empty()) return all;
  for (Workload& w : all) {
    if (w.name() == options.workload) return {std::move(w)};
  }
  throw std::invalid_argument("unknown workload '" + options.workload +
                              "' (expected independent, chain, randsum, fanout or randsum-work)");
}

namespace {
// The warm-up workload: the first kWarmupOps ops of `workload`.
Workload prefix(const Workload& workload) {
  Workload out(workload.name(), workload.num_vars(), workload.body_iterations());
  for (std::size_t op = 0; op < std::min(workload.size(), kWarmupOps); ++op) {
    out.add(workload.reads(op), workload.mutates(op));
  }
  return out;
}
}  // namespace

std::vector<Record> measure(const PeerOptions& options, const std::vector<Workload>& workloads,
                            const std::string& system, int threads, const RunOnce& run_once) {
  std::vector<Record> records;
  for (const Workload& workload : workloads) {
    run_once(prefix(workload));
    std::vector<double> total, build, run;
    for (int i = 0; i < options.common.runs; ++i) {
      const RunTiming t = run_once(workload);
      total.push_back(t.total_ns);
      if (t.build_ns >= 0) {
        build.push_back(t.build_ns);
        run.push_back(t.run_ns);
      }
    }
    const int runs = options.common.runs;
    records.push_back({workload.name(), system, threads, median(total), runs});
    if (!build.empty()) {
      records.push_back({workload.name(), system + "/build", threads, median(build), runs});
      records.push_back({workload.name(), system + "/run", threads, median(run), runs});
    }
  }
  return records;
}

void print_setting(const std::string& system, const std::string& text) {
  std::printf("# %s: %s\n", system.c_str(), text.c_str());
  std::fflush(stdout);
}

}  // namespace depengine::bench::peers
