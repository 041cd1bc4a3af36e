#include "bench/common/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace depengine::bench {

Options parse_options(int argc, char** argv, std::string_view usage) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      const std::string_view program = argv[0];
      std::printf("usage: %s %.*s\n", std::string(program.substr(program.find_last_of('/') + 1)).c_str(),
                  static_cast<int>(usage.size()), usage.data());
      std::exit(0);
    }
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument("benchmark option " + std::string(arg) + " needs a value");
      return argv[++i];
    };
    if (arg == "--json") {
      options.json_path = value();
    } else if (arg == "--runs") {
      options.runs = std::stoi(value());
      if (options.runs < 1) throw std::invalid_argument("--runs must be at least 1");
    } else if (arg == "--smoke") {
      options.smoke = true;
      options.runs = 1;
    } else {
      throw std::invalid_argument("unknown benchmark option '" + std::string(arg) +
                                  "' (expected --json FILE, --runs N, --smoke)");
    }
  }
  return options;
}

double median(std::vector<double> samples) {
  if (samples.empty()) throw std::invalid_argument("median of no samples");
  const size_t mid = samples.size() / 2;
  std::nth_element(samples.begin(), samples.begin() + static_cast<std::ptrdiff_t>(mid), samples.end());
  if (samples.size() % 2 == 1) return samples[mid];
  const double upper = samples[mid];
  const double lower = *std::max_element(samples.begin(), samples.begin() + static_cast<std::ptrdiff_t>(mid));
  return (lower + upper) / 2;
}

void print_table(const std::vector<Record>& records) {
  std::printf("%-28s %-28s %7s %12s %5s\n", "workload", "system", "threads", "ns/op", "runs");
  for (const Record& r : records) {
    std::printf("%-28s %-28s %7d %12.2f %5d", r.workload.c_str(), r.system.c_str(), r.threads, r.ns_per_op, r.runs);
    for (const Metric& m : r.metrics) std::printf("  %s=%.4g", m.name.c_str(), m.value);
    std::printf("\n");
  }
  std::fflush(stdout);
}

namespace {
std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}
}  // namespace

void write_json(const std::string& path, const std::vector<Record>& records) {
  std::ofstream out(path);
  if (!out) throw std::runtime_error("cannot write benchmark records to '" + path + "'");
  out << "[\n";
  for (size_t i = 0; i < records.size(); ++i) {
    const Record& r = records[i];
    char ns[64];
    std::snprintf(ns, sizeof ns, "%.3f", r.ns_per_op);
    out << "  {\"workload\": " << json_string(r.workload) << ", \"system\": " << json_string(r.system)
        << ", \"threads\": " << r.threads << ", \"ns_per_op\": " << ns << ", \"runs\": " << r.runs;
    for (const Metric& m : r.metrics) {
      // JSON has no NaN or infinity: a metric that came out so is a bug in its benchmark, not a figure.
      if (!std::isfinite(m.value)) {
        throw std::invalid_argument("benchmark metric '" + m.name + "' of " + r.workload + " / " + r.system +
                                    " is not finite");
      }
      char value[64];
      std::snprintf(value, sizeof value, "%.6g", m.value);
      out << ", " << json_string(m.name) << ": " << value;
    }
    out << "}" << (i + 1 < records.size() ? ",\n" : "\n");
  }
  out << "]\n";
  if (!out) throw std::runtime_error("error while writing benchmark records to '" + path + "'");
}

void report(const Options& options, const std::vector<Record>& records) {
  print_table(records);
  if (!options.json_path.empty()) write_json(options.json_path, records);
}

}  // namespace depengine::bench
