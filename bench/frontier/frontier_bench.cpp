// Nanoseconds per frontier operation (frontier/frontier.h) at 4, 16 and 64 entries, and a fixed-count mode for
// counting instructions per operation under callgrind.
//
//   bench_frontier [--runs N] [--json FILE] [--smoke]
//   bench_frontier --count OP ITERATIONS     runs exactly ITERATIONS of OP at 4 entries, reports nothing
//
// Workloads (records "<op>/<entries>", system "depengine-frontier"):
//   merge-same-axes     a copy of a knowledge frontier merged with one naming the same axes (the steady state: a
//                       stream learning the next signal of the streams it always talks to)
//   merge-same-in-place the same merge into a frontier kept from one iteration to the next, without the copy: after
//                       the first rounds nothing rises, so this is the cost of checking and comparing alone
//   merge-interleaved   a copy of a frontier merged with one whose axes all fall between its own (every entry moves;
//                       the result has twice the entries)
//   dominates           knowledge over a requirement on the same axes (the wait-elision test)
//   compare             two knowledge frontiers on the same axes
//   undominated         the requirement entries a knowledge frontier does not cover, same axes
//   insert_or_raise     raising one existing axis of a frontier in place (a stream advancing its own epoch)
//   copy                the copy that both merges start with, on its own, so that it can be subtracted
// Each merge starts from a fresh copy of its target, as IREE's frontier benchmark restores its target, so that every
// iteration does the same work; the copy row gives that copy's share.
//
// Keeping the optimizer honest: every operation reads its operands from a pool of pre-built frontiers with varied
// epochs (the index changes every iteration, so nothing is loop-invariant); the pools escape once (so their contents
// are unknown); frontiers an operation produces escape to memory (so they are really built); and every result is
// folded into a sink the compiler must assume is read and changed at every iteration (so no operation is dead). The
// loop's own cost (an index, an add) is included; for the instruction counts, count_instructions.sh subtracts it with
// the `loop` op.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <depengine/frontier/frontier.h>

#include "bench/common/report.h"

namespace depengine::bench {
namespace {

// Makes the compiler assume that `object` is read and written here, with any other memory: a result stored in it
// must be computed, and memory read before cannot be assumed unchanged after.
template <class T>
void escape(T& object) {
  asm volatile("" : : "g"(&object) : "memory");
}

// Makes the compiler assume that `value` is read and changed here, without sending it through memory: the sink's
// chain from one iteration to the next costs one add, where escape() would add a store and a reload (~5 cycles).
void launder(std::uint64_t& value) { asm volatile("" : "+r"(value)); }

constexpr std::size_t kPool = 16;  // pairs of operands per size: 2 x 16 x 64 entries of 16 bytes stay in L1/L2

Axis queue_axis(std::uint64_t ordinal) { return Axis::make(0, 0, AxisDomain::kQueue, ordinal); }

// The operands at N entries. Merge targets have room for 2N entries so that the interleaved merge never overflows.
template <std::size_t N>
struct Pools {
  KnowledgeFrontier<2 * N> same_target[kPool];  // axes 2, 4, ..., 2N
  KnowledgeFrontier<N> same_source[kPool];      // the same axes
  KnowledgeFrontier<2 * N> even[kPool];         // axes 2, 4, ..., 2N
  KnowledgeFrontier<N> odd[kPool];              // axes 1, 3, ..., 2N - 1: each falls before one of even's
  RequirementFrontier<N> required[kPool];       // axes 2, 4, ..., 2N
  KnowledgeFrontier<N> kept[kPool];             // axes 2, 4, ..., 2N: merged into in place
  KnowledgeFrontier<N> raised[kPool];           // raised in place by insert_or_raise...
  Axis raise_axis[kPool];                       // ...on this one of its axes

  explicit Pools(std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    // Epochs near each other and random, so that merges raise about half the entries and compare returns every
    // order: branches on epochs are not predictable, as they are not in a running program.
    std::uniform_int_distribution<std::uint64_t> epoch(1000, 1003);
    for (std::size_t p = 0; p < kPool; ++p) {
      for (std::uint64_t i = 1; i <= N; ++i) {
        same_target[p].insert_or_raise(queue_axis(2 * i), epoch(rng));
        same_source[p].insert_or_raise(queue_axis(2 * i), epoch(rng));
        even[p].insert_or_raise(queue_axis(2 * i), epoch(rng));
        odd[p].insert_or_raise(queue_axis(2 * i - 1), epoch(rng));
        required[p].insert_or_raise(queue_axis(2 * i), epoch(rng) - 2);  // mostly covered: scans to the end
        kept[p].insert_or_raise(queue_axis(2 * i), epoch(rng));
        raised[p].insert_or_raise(queue_axis(2 * i), epoch(rng));
      }
      raise_axis[p] = queue_axis(2 * (p % N + 1));
    }
  }
};

// Runs `op(p)` for `iterations` iterations, p cycling through the pool, and returns the sink. noinline and named so
// that callgrind's --toggle-collect can count exactly this loop.
template <class Op>
[[gnu::noinline]] std::uint64_t run_iterations(Op op, std::uint64_t iterations) {
  std::uint64_t sink = 0;
  for (std::uint64_t i = 0; i < iterations; ++i) {
    sink += op(static_cast<std::size_t>(i % kPool));
    launder(sink);
  }
  return sink;
}

// Calls f(name, op) for every workload at N entries.
template <std::size_t N, class F>
void for_each_op(Pools<N>& pools, F&& f) {
  std::uint64_t next_epoch = 2000;  // strictly increasing, so that every insert_or_raise stores
  f("loop", [](std::size_t p) -> std::uint64_t { return p; });
  f("copy", [&](std::size_t p) -> std::uint64_t {
    KnowledgeFrontier<2 * N> target = pools.even[p];
    escape(target);
    return target.size();
  });
  f("merge-same-axes", [&](std::size_t p) -> std::uint64_t {
    KnowledgeFrontier<2 * N> target = pools.same_target[p];
    target.merge(pools.same_source[p]);
    escape(target);
    return target.size();
  });
  f("merge-same-in-place", [&](std::size_t p) -> std::uint64_t {
    pools.kept[p].merge(pools.same_source[p]);
    return pools.kept[p].size();
  });
  f("merge-interleaved", [&](std::size_t p) -> std::uint64_t {
    KnowledgeFrontier<2 * N> target = pools.even[p];
    target.merge(pools.odd[p]);
    escape(target);
    return target.size();
  });
  f("dominates",
    [&](std::size_t p) -> std::uint64_t { return dominates(pools.same_source[p], pools.required[p]) ? 1 : 0; });
  f("compare", [&](std::size_t p) -> std::uint64_t {
    return static_cast<std::uint64_t>(compare(pools.same_target[p], pools.same_source[p]));
  });
  f("undominated", [&](std::size_t p) -> std::uint64_t {
    RequirementFrontier<N> missing = undominated(pools.same_source[p], pools.required[p]);
    escape(missing);
    return missing.size();
  });
  f("insert_or_raise", [&](std::size_t p) -> std::uint64_t {
    KnowledgeFrontier<N>& frontier = pools.raised[p];
    frontier.insert_or_raise(pools.raise_axis[p], ++next_epoch);
    return frontier.size();
  });
}

// The ns/op records at N entries. Iterations scale down with N so that each measurement takes about the same time.
template <std::size_t N>
void measure_size(const Options& options, std::vector<Record>& records) {
  Pools<N> pools(N);
  escape(pools);
  const std::uint64_t iterations = options.smoke ? 1000 : (std::uint64_t{1} << 24) / N;
  for_each_op(pools, [&](const char* name, auto op) {
    if (std::string_view(name) == "loop") return;  // only for instruction counts
    run_iterations(op, iterations / 8);            // warm-up: caches, branch predictors, CPU frequency
    std::vector<double> samples;
    for (int run = 0; run < options.runs; ++run) {
      const auto start = std::chrono::steady_clock::now();
      run_iterations(op, iterations);
      const auto stop = std::chrono::steady_clock::now();
      samples.push_back(std::chrono::duration<double, std::nano>(stop - start).count() /
                        static_cast<double>(iterations));
    }
    records.push_back(
        {std::string(name) + "/" + std::to_string(N), "depengine-frontier", 1, median(samples), options.runs});
  });
}

// --count OP ITERATIONS: exactly ITERATIONS runs of OP at 4 entries (for callgrind). Returns the process status.
int count_mode(std::string_view op_name, std::uint64_t iterations) {
  Pools<4> pools(4);
  escape(pools);
  bool found = false;
  for_each_op(pools, [&](const char* name, auto op) {
    if (op_name != name) return;
    found = true;
    std::uint64_t sink = run_iterations(op, iterations);
    escape(sink);
  });
  if (!found) {
    std::fprintf(stderr, "bench_frontier: unknown op '%.*s' for --count\n", static_cast<int>(op_name.size()),
                 op_name.data());
    return 2;
  }
  return 0;
}

}  // namespace
}  // namespace depengine::bench

int main(int argc, char** argv) try {
  using namespace depengine::bench;
  if (argc == 4 && std::string_view(argv[1]) == "--count") {
    return count_mode(argv[2], std::stoull(argv[3]));
  }
  const Options options = parse_options(argc, argv);
  std::vector<Record> records;
  measure_size<4>(options, records);
  measure_size<16>(options, records);
  measure_size<64>(options, records);
  report(options, records);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_frontier: %s\n", e.what());
  return 1;
}
