// The side-by-side comparison of depengine with OpenMP tasks (libgomp and libomp), oneTBB flow graph and StarPU on
// the four standard workloads and randsum-work (bodies that compute, with the bodies alone as the "serial" row), and
// the Task-Bench-style METG sweep on depengine and both OpenMP runtimes. See bench/README.md for what is measured and
// how to read the tables.
//
//   bench_peers [--runs N] [--json FILE] [--smoke] [--part peers|metg|all] [--only SYSTEM,...] [--workload NAME]
//               [--curves] [--metg-steps T] [--metg-max-us U]
//
// --workload restricts the side-by-side half to one workload; --only to some systems ("serial" among them).
//
// Every measurement runs in a child process (spawn.h): one per system, workload (or pattern and width) and
// repetition, started in the order A B C D A B C D ..., so that a slow spell of the machine hits every system alike
// instead of one system's whole series. Each child does one untimed warm-up run and one timed run; the tables hold
// the median over the N repetitions (--runs, default 5). --smoke: tiny sizes and one repetition, to check that
// everything builds and runs (CI). --json FILE writes every median as a report.h record; the METG rows have workload
// "metg50/<pattern>/W=<w>/T=<t>" and the METG in ns as ns_per_op, and each sweep point its own record (metg.h).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "bench/common/line_transfer.h"
#include "bench/common/read_records.h"
#include "bench/common/report.h"
#include "bench/peers/runner/spawn.h"
#include "bench/peers/runner/tables.h"
#include "bench/taskbench/kernel.h"
#include "bench/taskbench/metg.h"

namespace depengine::bench::peers {
namespace {

const std::vector<std::string> kPeerSystems = {"depengine", "openmp-libgomp", "openmp-libomp", "tbb-flow", "starpu"};
const std::vector<std::string> kMetgSystems = {"depengine", "openmp-libgomp", "openmp-libomp"};
const std::vector<std::string> kWorkloads = {"independent", "chain", "randsum", "fanout", "randsum-work"};
// The workloads whose bodies compute (bench/common/op_body.h): the serial row (kSerial) runs beside the systems on
// them, and they are not in the target, which is about the cost of the runtime alone.
const std::vector<std::string> kComputing = {"randsum-work"};
// The bodies alone on one thread, no runtime (bench_peer_serial): a reference column, never counted as a peer.
constexpr const char* kSerial = "serial";
const std::vector<std::string> kPatterns = {"trivial", "no_comm", "stencil_1d", "nearest", "fft", "tree", "all_to_all"};
const std::vector<int> kWidths = {2, 8};
constexpr const char* kOurs = "depengine";
// Other settings of ours that the depengine peer also measures (its own rows, never counted as peers): work-first and
// helping pushes on a pool of 1 worker, two threads with the pushing one, as each OpenMP run has.
const std::vector<std::string> kOurVariants = {"depengine-work-first", "depengine-helping"};
constexpr int kCores = 2;  // every system runs with 2 threads; the METG granularity counts 2 cores

struct RunnerOptions {
  Options common;
  std::string part = "all";
  std::vector<std::string> only;
  std::string workload;  // empty: all of kWorkloads
  bool curves = false;
  int metg_steps = 1000;
  double metg_max_us = 200;  // the largest task of a sweep, about: the efficiency reference
};

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

RunnerOptions parse_runner_options(int argc, char** argv) {
  RunnerOptions options;
  std::vector<char*> rest{argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(std::string(arg) + " needs a value");
      return argv[++i];
    };
    if (arg == "--part") {
      options.part = value();
      if (options.part != "peers" && options.part != "metg" && options.part != "all") {
        throw std::invalid_argument("--part must be peers, metg or all");
      }
    } else if (arg == "--only") {
      options.only = split(value());
      for (const std::string& s : options.only) {
        if (std::find(kPeerSystems.begin(), kPeerSystems.end(), s) == kPeerSystems.end() && s != kSerial) {
          throw std::invalid_argument(
              "unknown system '" + s +
              "' (expected depengine, openmp-libgomp, openmp-libomp, tbb-flow, starpu, serial)");
        }
      }
    } else if (arg == "--workload") {
      options.workload = value();
      if (std::find(kWorkloads.begin(), kWorkloads.end(), options.workload) == kWorkloads.end()) {
        throw std::invalid_argument("unknown workload '" + options.workload +
                                    "' (expected independent, chain, randsum, fanout or randsum-work)");
      }
    } else if (arg == "--curves") {
      options.curves = true;
    } else if (arg == "--metg-steps") {
      options.metg_steps = std::stoi(value());
    } else if (arg == "--metg-max-us") {
      options.metg_max_us = std::stod(value());
    } else {
      rest.push_back(argv[i]);
    }
  }
  options.common = parse_options(static_cast<int>(rest.size()), rest.data(),
                                 "[--runs N] [--json FILE] [--smoke] [--part peers|metg|all] [--only SYSTEM,...] "
                                 "[--workload NAME] [--curves] [--metg-steps T] [--metg-max-us U]");
  return options;
}

bool chosen(const RunnerOptions& options, const std::string& system) {
  return options.only.empty() || std::find(options.only.begin(), options.only.end(), system) != options.only.end();
}

std::vector<std::string> selected(const RunnerOptions& options, const std::vector<std::string>& systems) {
  std::vector<std::string> out;
  for (const std::string& s : systems) {
    if (chosen(options, s)) out.push_back(s);
  }
  return out;
}

bool computes(const std::string& workload) {
  return std::find(kComputing.begin(), kComputing.end(), workload) != kComputing.end();
}

std::string executable_name(const std::string& prefix, const std::string& system) {
  std::string out = prefix + system;
  for (char& c : out) {
    if (c == '-') c = '_';
  }
  return out;
}

// Runs children and gathers their records; echoes each executable's "# " setting lines the first time it runs.
class Children {
 public:
  explicit Children(std::string directory) : directory_(std::move(directory)) {}

  std::vector<Record> run(const std::string& executable, std::vector<std::string> args) {
    const std::string json = temp_.path() + "/records.json", log = temp_.path() + "/log.txt";
    args.push_back("--json");
    args.push_back(json);
    run_child(directory_ + "/" + executable, args, log);
    if (echoed_.insert(executable).second) {
      std::ifstream in(log);
      for (std::string line; std::getline(in, line);) {
        if (line.rfind("# ", 0) == 0) std::printf("%s\n", line.c_str());
      }
      std::fflush(stdout);
    }
    return read_json(json);
  }

 private:
  std::string directory_;
  TempDir temp_;
  std::set<std::string> echoed_;
};

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return one + " " + five + " " + fifteen;
}

// The machine's one-way cache-line transfer latency now: the median of a few short measurements. Printed at the start
// and end of each half, because on a VM it moves by several times within minutes, and every system's figures move
// with it (bench/README.md).
double line_transfer_now() {
  std::vector<double> samples;
  for (int i = 0; i < 5; ++i) samples.push_back(line_transfer_ns(100'000));
  return median(samples);
}

void print_line_transfer(const RunnerOptions& options) {
  if (options.common.smoke) return;  // a smoke run measures nothing
  std::printf("one-way cache-line transfer between two threads: %.0f ns\n", line_transfer_now());
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Medians of `samples` keyed by (workload, system), as records; the serial rows with 1 thread, the others `threads`.
std::vector<Record> medians(const std::map<std::pair<std::string, std::string>, std::vector<double>>& samples,
                            int threads) {
  std::vector<Record> out;
  for (const auto& [key, values] : samples) {
    out.push_back(
        {key.first, key.second, key.second == kSerial ? 1 : threads, median(values), static_cast<int>(values.size())});
  }
  return out;
}

std::vector<Record> run_peers(const RunnerOptions& options, Children& children, bool& target_met) {
  const std::vector<std::string> systems = selected(options, kPeerSystems);
  const std::vector<std::string> workloads =
      options.workload.empty() ? kWorkloads : std::vector<std::string>{options.workload};
  const bool serial = chosen(options, kSerial);
  std::map<std::pair<std::string, std::string>, std::vector<double>> samples;
  const int reps = options.common.runs;
  std::printf("\nside-by-side: %zu systems x %zu workloads x %d repetitions, systems alternating%s\n", systems.size(),
              workloads.size(), reps, serial ? "; the bodies alone (serial) beside them where ops compute" : "");
  print_line_transfer(options);
  for (const std::string& workload : workloads) {
    std::vector<std::string> runs = systems;
    if (serial && computes(workload)) runs.push_back(kSerial);
    const auto start = std::chrono::steady_clock::now();
    for (int rep = 0; rep < reps; ++rep) {
      for (const std::string& system : runs) {
        std::vector<std::string> args = {"--workload", workload, "--runs", "1"};
        if (options.common.smoke) args.push_back("--smoke");
        for (const Record& r : children.run(executable_name("bench_peer_", system), args)) {
          samples[{r.workload, r.system}].push_back(r.ns_per_op);
        }
      }
    }
    std::printf("  %s done in %.1f s\n", workload.c_str(), seconds_since(start));
    std::fflush(stdout);
  }
  print_line_transfer(options);
  std::vector<Record> out = medians(samples, kCores);
  const bool ours_ran = std::find(systems.begin(), systems.end(), kOurs) != systems.end();
  const std::vector<std::string> variants = ours_ran ? kOurVariants : std::vector<std::string>{};
  const std::vector<double> worst =
      print_comparison(out, workloads, systems, kOurs, variants, serial ? kSerial : "", kComputing);
  const bool any_empty =
      std::any_of(workloads.begin(), workloads.end(), [](const std::string& w) { return !computes(w); });
  if (!options.common.smoke && systems.size() > 1 && ours_ran && any_empty) {
    target_met = worst[0] <= 0.5;
    std::printf("target depengine <= 0.5 x best peer on every workload with empty bodies: %s (worst ratio %.2f)\n",
                target_met ? "met" : "NOT met", worst[0]);
    for (std::size_t v = 0; v < variants.size(); ++v) {
      std::printf("  %s (an option, not the default): worst ratio %.2f\n", variants[v].c_str(), worst[v + 1]);
    }
  }
  return out;
}

std::vector<std::int64_t> sweep_iterations(const RunnerOptions& options) {
  std::vector<std::int64_t> out;
  std::int64_t largest = 256;
  if (!options.common.smoke) {
    const double ns_per_iteration = taskbench::kernel_ns_per_iteration();
    // The power of two nearest (in ratio) to the requested size.
    const double wanted = options.metg_max_us * 1e3 / ns_per_iteration;
    largest = 1;
    while (static_cast<double>(largest) * 1.4142 < wanted) largest *= 2;
    std::printf("kernel: %.3f ns per iteration (4 FMAs) on this machine; largest task %lld iterations = %.0f us\n",
                ns_per_iteration, static_cast<long long>(largest),
                static_cast<double>(largest) * ns_per_iteration / 1e3);
  }
  for (std::int64_t n = largest; n >= 1; n /= options.common.smoke ? 4 : 2) out.push_back(n);
  return out;
}

std::vector<Record> run_metg(const RunnerOptions& options, Children& children, bool& target_met) {
  const std::vector<std::string> systems = selected(options, kMetgSystems);
  if (systems.empty()) return {};
  const int steps = options.common.smoke ? 16 : options.metg_steps;
  const std::vector<std::int64_t> iterations = sweep_iterations(options);
  std::string list;
  for (const std::int64_t n : iterations) list += (list.empty() ? "" : ",") + std::to_string(n);
  const int reps = options.common.runs;
  std::printf("\nMETG sweep: %zu systems x %zu patterns x %zu widths x %d repetitions, T = %d, %zu sizes each\n",
              systems.size(), kPatterns.size(), kWidths.size(), reps, steps, iterations.size());
  print_line_transfer(options);

  std::map<std::pair<std::string, std::string>, std::vector<double>> samples;  // (point name, system)
  std::vector<MetgResult> results;
  for (const int width : kWidths) {
    for (const std::string& pattern : kPatterns) {
      const auto start = std::chrono::steady_clock::now();
      for (int rep = 0; rep < reps; ++rep) {
        for (const std::string& system : systems) {
          std::vector<std::string> args = {
              "--pattern", pattern,  "--width", std::to_string(width), "--steps", std::to_string(steps), "--iterations",
              list,        "--runs", "1"};
          for (const Record& r : children.run(executable_name("taskbench_", system), args)) {
            samples[{r.workload, r.system}].push_back(r.ns_per_op);
          }
        }
      }
      for (const std::string& system : systems) {
        MetgResult result{pattern, width, system, {}, {}};
        for (const std::int64_t n : iterations) {
          const auto it = samples.find({taskbench::point_name(pattern, width, steps, n), system});
          if (it == samples.end())
            throw std::runtime_error("no record of " + taskbench::point_name(pattern, width, steps, n));
          result.points.push_back({n, median(it->second)});
        }
        result.metg = taskbench::compute_metg(result.points, kCores);
        results.push_back(std::move(result));
      }
      std::printf("  %s W=%d done in %.1f s\n", pattern.c_str(), width, seconds_since(start));
      std::fflush(stdout);
    }
  }
  print_line_transfer(options);
  print_metg(results, systems, steps, options.curves);
  for (const MetgResult& r : results) {
    if (!options.common.smoke && r.system == kOurs && r.pattern == "stencil_1d" && r.width == 2) {
      target_met = r.metg.crossed && r.metg.metg_ns <= 1000;
      std::printf("target depengine METG(50%%) on stencil_1d at W=2 <= 1 us: %s (%.2f us)\n",
                  target_met ? "met" : "NOT met", r.metg.metg_ns / 1e3);
    }
  }
  std::vector<Record> out = medians(samples, kCores);
  for (const MetgResult& r : results) {
    out.push_back({"metg50/" + r.pattern + "/W=" + std::to_string(r.width) + "/T=" + std::to_string(steps), r.system,
                   kCores, r.metg.metg_ns, reps});
  }
  return out;
}

}  // namespace
}  // namespace depengine::bench::peers

int main(int argc, char** argv) try {
  using namespace depengine::bench;
  using namespace depengine::bench::peers;
  const RunnerOptions options = parse_runner_options(argc, argv);
  const auto start = std::chrono::steady_clock::now();
  std::printf("bench_peers: load average %s at start\n", load_average().c_str());
  Children children(own_directory());
  std::vector<Record> records;
  bool peers_met = true, metg_met = true;
  if (options.part != "metg") {
    for (Record& r : run_peers(options, children, peers_met)) records.push_back(std::move(r));
  }
  if (options.part != "peers") {
    for (Record& r : run_metg(options, children, metg_met)) records.push_back(std::move(r));
  }
  if (!options.common.json_path.empty()) write_json(options.common.json_path, records);
  std::printf("\nbench_peers: %.1f s, load average %s at the end; targets %s\n", seconds_since(start),
              load_average().c_str(), peers_met && metg_met ? "met (or not measured)" : "NOT met");
  // Targets are reported, not enforced: a benchmark on a shared machine must not fail CI on a slow spell.
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_peers: %s\n", e.what());
  return 1;
}
