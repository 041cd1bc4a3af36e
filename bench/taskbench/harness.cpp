#include "bench/taskbench/harness.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string_view>

#include "bench/taskbench/metg.h"

namespace depengine::bench::taskbench {
namespace {

std::vector<std::int64_t> parse_list(const std::string& text) {
  std::vector<std::int64_t> out;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const std::size_t comma = std::min(text.find(',', pos), text.size());
    out.push_back(std::stoll(text.substr(pos, comma - pos)));
    if (out.back() < 1) throw std::invalid_argument("--iterations values must be at least 1");
    pos = comma + 1;
  }
  return out;
}

}  // namespace

HarnessOptions parse_harness_options(int argc, char** argv) {
  HarnessOptions options;
  std::vector<char*> rest{argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(std::string(arg) + " needs a value");
      return argv[++i];
    };
    if (arg == "--pattern") {
      options.pattern = parse_pattern(value());
    } else if (arg == "--width") {
      options.width = std::stoi(value());
    } else if (arg == "--steps") {
      options.steps = std::stoi(value());
    } else if (arg == "--iterations") {
      options.iterations = parse_list(value());
    } else {
      rest.push_back(argv[i]);
    }
  }
  options.common =
      parse_options(static_cast<int>(rest.size()), rest.data(),
                    "[--pattern P] [--width W] [--steps T] [--iterations N,N,...] [--runs N] [--json FILE] [--smoke]");
  if (options.iterations.empty()) {
    for (std::int64_t n = std::int64_t{1} << 16; n >= 1; n /= 2) options.iterations.push_back(n);
  }
  for (std::size_t k = 1; k < options.iterations.size(); ++k) {
    if (options.iterations[k] >= options.iterations[k - 1]) {
      throw std::invalid_argument("--iterations must be strictly descending");
    }
  }
  return options;
}

std::vector<Record> sweep(const HarnessOptions& options, const std::string& system, int threads,
                          const RunGraph& run_graph) {
  const TaskGraph graph(options.pattern, options.width, options.steps);
  TaskData data(graph);
  auto run_checked = [&](std::int64_t iterations) {
    data.reset();
    const double ns = run_graph(graph, data, iterations);
    data.check();
    return ns / static_cast<double>(graph.num_tasks());
  };
  run_checked(options.iterations.back());  // warm-up

  std::vector<Record> records;
  std::vector<SweepPoint> points;
  for (const std::int64_t iterations : options.iterations) {
    std::vector<double> samples;
    for (int run = 0; run < options.common.runs; ++run) samples.push_back(run_checked(iterations));
    points.push_back({iterations, median(samples)});
    records.push_back({point_name(name_of(options.pattern), options.width, options.steps, iterations), system, threads,
                       points.back().ns_per_task, options.common.runs});
  }
  const Metg metg = compute_metg(points, threads);
  std::printf("%-12s %14s %12s\n", "iterations", "granularity_us", "efficiency");
  for (std::size_t k = 0; k < points.size(); ++k) {
    std::printf("%-12lld %14.3f %12.3f\n", static_cast<long long>(points[k].iterations), metg.granularity_ns[k] / 1e3,
                metg.efficiency[k]);
  }
  std::printf("METG(50%%) %s/W=%d/T=%d on %s: %s%.3f us\n", std::string(name_of(options.pattern)).c_str(),
              options.width, options.steps, system.c_str(), metg.crossed ? "" : "< ", metg.metg_ns / 1e3);
  return records;
}

}  // namespace depengine::bench::taskbench
