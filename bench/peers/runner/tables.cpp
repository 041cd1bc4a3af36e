#include "bench/peers/runner/tables.h"

#include <algorithm>
#include <cstdio>
#include <optional>

namespace depengine::bench::peers {
namespace {

std::optional<double> find(const std::vector<Record>& records, const std::string& workload, const std::string& system) {
  for (const Record& r : records) {
    if (r.workload == workload && r.system == system) return r.ns_per_op;
  }
  return std::nullopt;
}

void print_cell(std::optional<double> value, int width) {
  if (value) {
    std::printf(" %*.1f", width, *value);
  } else {
    std::printf(" %*s", width, "-");
  }
}

std::vector<std::string> with_variants(std::vector<std::string> systems, const std::vector<std::string>& variants) {
  systems.insert(systems.end(), variants.begin(), variants.end());
  return systems;
}

// Each system's speedup over the serial row (serial ns/op ÷ its own), for the workloads that have one.
void print_speedups(const std::vector<Record>& medians, const std::vector<std::string>& workloads,
                    const std::vector<std::string>& systems, const std::string& serial) {
  if (serial.empty()) return;
  bool header = false;
  for (const std::string& w : workloads) {
    const std::optional<double> alone = find(medians, w, serial);
    if (!alone) continue;
    if (!header) {
      std::printf("\nspeedup over the bodies alone (%s ns/op / the system's; 2 threads, 2.0 is the ideal)\n%-12s",
                  serial.c_str(), "workload");
      for (const std::string& s : systems) std::printf(" %*s", std::max(15, static_cast<int>(s.size())), s.c_str());
      std::printf("\n");
      header = true;
    }
    std::printf("%-12s", w.c_str());
    for (const std::string& s : systems) {
      const std::optional<double> ns = find(medians, w, s);
      const int width = std::max(15, static_cast<int>(s.size()));
      if (ns) {
        std::printf(" %*.2f", width, *alone / *ns);
      } else {
        std::printf(" %*s", width, "-");
      }
    }
    std::printf("\n");
  }
}

}  // namespace

std::vector<double> print_comparison(const std::vector<Record>& medians, const std::vector<std::string>& workloads,
                                     const std::vector<std::string>& systems, const std::string& ours,
                                     const std::vector<std::string>& variants, const std::string& serial,
                                     const std::vector<std::string>& computing) {
  constexpr int kColumn = 15;
  const auto width = [&](const std::string& header) { return std::max(kColumn, static_cast<int>(header.size())); };
  std::vector<std::string> mine = {ours};  // ours, then its variants: the ratio columns
  mine.insert(mine.end(), variants.begin(), variants.end());
  std::printf("\nmedian ns/op (lower is better)\n%-12s", "workload");
  for (const std::string& s : systems) std::printf(" %*s", kColumn, s.c_str());
  for (const std::string& v : variants) std::printf(" %*s", width(v), v.c_str());
  if (!serial.empty()) std::printf(" %*s", kColumn, serial.c_str());
  std::printf(" %*s", kColumn, "best peer");
  for (const std::string& m : mine) std::printf(" %*s", width(m + "/best"), (m + "/best").c_str());
  std::printf("\n");
  std::vector<double> worst(mine.size(), 0.0);
  for (const std::string& w : workloads) {
    std::printf("%-12s", w.c_str());
    std::optional<double> best;
    std::string best_name = "-";
    for (const std::string& s : systems) {
      const std::optional<double> v = find(medians, w, s);
      print_cell(v, kColumn);
      if (s != ours && v && (!best || *v < *best)) {
        best = v;
        best_name = s;
      }
    }
    for (const std::string& v : variants) print_cell(find(medians, w, v), width(v));
    if (!serial.empty()) print_cell(find(medians, w, serial), kColumn);
    std::printf(" %*s", kColumn, best_name.c_str());
    const bool targeted = std::find(computing.begin(), computing.end(), w) == computing.end();
    for (std::size_t m = 0; m < mine.size(); ++m) {
      const std::optional<double> ns = find(medians, w, mine[m]);
      if (ns && best) {
        const double ratio = *ns / *best;
        if (targeted) worst[m] = std::max(worst[m], ratio);
        std::printf(" %*.2f", width(mine[m] + "/best"), ratio);
      } else {
        std::printf(" %*s", width(mine[m] + "/best"), "-");
      }
    }
    std::printf("\n");
  }
  bool header = false;
  std::vector<std::string> phased;  // each system, then its replayed form (a captured step replayed: engine/graph.h)
  for (const std::string& s : systems) {
    phased.push_back(s);
    phased.push_back(s + "-replay");
  }
  for (const std::string& s : phased) {
    for (const std::string& w : workloads) {
      const std::optional<double> build = find(medians, w, s + "/build"), run = find(medians, w, s + "/run");
      if (!build || !run) continue;
      if (!header) {
        std::printf("\nphases of the graph-building systems, median ns/op\n%-12s %-15s %15s %15s\n", "workload",
                    "system", "build", "run");
        header = true;
      }
      std::printf("%-12s %-17s %15.1f %15.1f\n", w.c_str(), s.c_str(), *build, *run);
    }
  }
  print_speedups(medians, workloads, with_variants(systems, variants), serial);
  return worst;
}

void print_metg(const std::vector<MetgResult>& results, const std::vector<std::string>& systems, int steps,
                bool curves) {
  constexpr int kColumn = 15;
  std::printf("\nMETG(50%%) in us, T = %d timesteps (lower is better)\n%-12s %3s", steps, "pattern", "W");
  for (const std::string& s : systems) std::printf(" %*s", kColumn, s.c_str());
  std::printf("\n");
  std::string last_pattern;
  int last_width = -1;
  for (const MetgResult& r : results) {
    if (r.pattern == last_pattern && r.width == last_width) continue;
    last_pattern = r.pattern;
    last_width = r.width;
    std::printf("%-12s %3d", r.pattern.c_str(), r.width);
    for (const std::string& s : systems) {
      const MetgResult* cell = nullptr;
      for (const MetgResult& c : results) {
        if (c.pattern == r.pattern && c.width == r.width && c.system == s) cell = &c;
      }
      if (cell == nullptr) {
        std::printf(" %*s", kColumn, "-");
      } else {
        char text[32];
        std::snprintf(text, sizeof text, "%s%.2f", cell->metg.crossed ? "" : "<", cell->metg.metg_ns / 1e3);
        std::printf(" %*s", kColumn, text);
      }
    }
    std::printf("\n");
  }
  if (!curves) return;
  for (const MetgResult& r : results) {
    std::printf("\n%s W=%d on %s\n%12s %12s %16s %12s\n", r.pattern.c_str(), r.width, r.system.c_str(), "iterations",
                "ns/task", "granularity_us", "efficiency");
    for (std::size_t k = 0; k < r.points.size(); ++k) {
      std::printf("%12lld %12.1f %16.3f %12.3f\n", static_cast<long long>(r.points[k].iterations),
                  r.points[k].ns_per_task, r.metg.granularity_ns[k] / 1e3, r.metg.efficiency[k]);
    }
  }
}

}  // namespace depengine::bench::peers
