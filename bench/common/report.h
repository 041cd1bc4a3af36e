// The benchmark record and its reporting, shared by every benchmark executable in bench/.
//
// A benchmark measures one (workload, system, threads) cell several times and reports the median nanoseconds per
// operation. Records are printed as a table and, with `--json FILE`, written as a JSON array of
//   {"workload": ..., "system": ..., "threads": N, "ns_per_op": median, "runs": N}
// so that results from different executables (our engine, its peers, the frontier micro-benchmarks) can be merged.
// A record may carry further figures that are not times (a count per op, a fraction: Metric); they are printed after
// the row and written as extra keys of its object, which read_records.h skips, so readers of the five keys above are
// unaffected.
//
// Thread safety: none; benchmarks report from their main thread. Allocation: freely (never on a timed path).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace depengine::bench {

// A figure of a record other than its time, e.g. {"waits_issued_per_op", 0.98}: like ns_per_op, the median over the
// record's runs. `name` is a JSON key: lower-case letters, digits and underscores, and none of Record's five keys.
struct Metric {
  std::string name;
  double value = 0;
};

struct Record {
  std::string workload;
  std::string system;
  int threads = 1;
  double ns_per_op = 0;  // the median over `runs` measurements
  int runs = 0;
  std::vector<Metric> metrics;  // usually empty
};

// Command-line options every benchmark accepts:
//   --json FILE   also write the records to FILE
//   --runs N      measurements per cell (default 5; the median is reported)
//   --smoke       tiny sizes, one run: checks that the benchmark works, measures nothing
//   --help, -h    prints "usage: PROGRAM USAGE" and exits with status 0 (`usage`: the program's whole command line)
// Unknown arguments are an error (std::invalid_argument with the offending argument).
struct Options {
  std::string json_path;
  int runs = 5;
  bool smoke = false;
};
inline constexpr std::string_view kCommonUsage = "[--runs N] [--json FILE] [--smoke]";
Options parse_options(int argc, char** argv, std::string_view usage = kCommonUsage);

// The median of `samples` (the mean of the middle two for an even count). Throws std::invalid_argument if empty.
double median(std::vector<double> samples);

// Prints `records` as an aligned table on stdout, a record's metrics as `name=value` after its row.
void print_table(const std::vector<Record>& records);

// Writes `records` as a JSON array to `path`. Throws std::runtime_error if the file cannot be written, and
// std::invalid_argument for a metric that is not finite (JSON cannot hold it).
void write_json(const std::string& path, const std::vector<Record>& records);

// print_table, then write_json when options.json_path is set.
void report(const Options& options, const std::vector<Record>& records);

}  // namespace depengine::bench
