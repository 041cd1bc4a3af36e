// Nanoseconds per operation of the timeline and the completion tracker (frontier/timeline.h, tracker.h), one
// thread, uncontended: the costs every signal, wait and completion pays on top of its contention.
//
//   bench_timeline [--runs N] [--json FILE] [--smoke]
//
// Workloads (system "depengine"):
//   timeline/signal                 signal(v, f) with a 4-entry frontier and no waiter (records the history entry)
//   timeline/query                  the lock-free query()
//   timeline/wait-satisfied         wait(v) for a value already reached: the import of a retained signal's frontier
//   timeline/wait-unsatisfied       wait_async(w, v + 1), then signal(v + 1, f), which fires w: arm, fire, callback
//   tracker/advance-0-waiters       advance(handle, e + 1), nothing parked on the axis
//   tracker/advance-by-axis         the same through the Axis overload (one index probe more)
//   tracker/advance-1-waiter-idle   advance with one waiter parked for a far epoch (bounded out by min_needed)
//   tracker/advance-1-waiter-fires  wait_async(w, {axis: e + 1}), then advance(axis, e + 1), which fires w
//   tracker/satisfied-4             satisfied() of a 4-entry requirement, all complete
// Each cell is timed over a fixed number of iterations; the median of --runs cells is reported.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include <depengine/frontier/timeline.h>
#include <depengine/frontier/tracker.h>

#include "bench/common/report.h"

namespace depengine::bench {
namespace {

// Makes `value` look read and written to the compiler, so computing it cannot be skipped or hoisted.
template <class T>
void escape(T& value) {
  asm volatile("" : : "g"(&value) : "memory");
}

Axis queue_axis(std::uint64_t ordinal) { return Axis::make(0, 0, AxisDomain::kQueue, ordinal); }

// A 4-entry knowledge frontier whose own-axis epoch is `value`.
TimelineFrontier frontier_at(std::uint64_t value) {
  return TimelineFrontier{{queue_axis(1), value}, {queue_axis(2), 7}, {queue_axis(3), 9}, {queue_axis(4), 11}};
}

template <class Body>
double time_ns_per_op(std::uint64_t iterations, Body&& body) {
  const auto start = std::chrono::steady_clock::now();
  for (std::uint64_t i = 0; i < iterations; ++i) body(i);
  const auto stop = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::nano>(stop - start).count() / static_cast<double>(iterations);
}

struct Bench {
  Options options;
  std::uint64_t iterations;
  std::vector<Record> records;

  template <class Cell>
  void run(const std::string& workload, Cell&& cell) {
    std::vector<double> samples;
    for (int r = 0; r < options.runs; ++r) samples.push_back(cell(iterations));
    records.push_back(Record{workload, "depengine", 1, median(samples), options.runs});
  }
};

void bench_timeline(Bench& bench) {
  bench.run("timeline/signal", [](std::uint64_t n) {
    Timeline timeline;
    const TimelineFrontier f = frontier_at(1);
    return time_ns_per_op(n, [&](std::uint64_t i) { timeline.signal(i + 1, f); });
  });
  bench.run("timeline/query", [](std::uint64_t n) {
    Timeline timeline;
    timeline.signal(1, frontier_at(1));
    std::uint64_t sum = 0;
    const double ns = time_ns_per_op(n, [&](std::uint64_t) {
      sum += timeline.query();
      escape(sum);
    });
    return ns;
  });
  bench.run("timeline/wait-satisfied", [](std::uint64_t n) {
    Timeline timeline;
    for (std::uint64_t v = 1; v <= 8; ++v) timeline.signal(v, frontier_at(v));
    std::uint64_t sum = 0;
    const double ns = time_ns_per_op(n, [&](std::uint64_t i) {
      const TimelineWaitResult r = timeline.wait(i % 8 + 1);
      sum += r.knowledge().size();
      escape(sum);
    });
    if (sum != 4 * n) throw std::logic_error("timeline/wait-satisfied: a wait was not satisfied");
    return ns;
  });
  bench.run("timeline/wait-unsatisfied", [](std::uint64_t n) {
    Timeline timeline;
    std::uint64_t fired = 0;
    TimelineCallbackWaiter waiter([&fired](const TimelineWaitResult& r) noexcept { fired += r.knowledge().size(); });
    const TimelineFrontier f = frontier_at(1);
    const double ns = time_ns_per_op(n, [&](std::uint64_t i) {
      timeline.wait_async(waiter, i + 1);
      timeline.signal(i + 1, f);
    });
    if (fired != 4 * n) throw std::logic_error("timeline/wait-unsatisfied: a waiter did not fire");
    return ns;
  });
}

void bench_tracker(Bench& bench) {
  bench.run("tracker/advance-0-waiters", [](std::uint64_t n) {
    Tracker tracker;
    const TrackedAxis axis = tracker.register_axis(queue_axis(1));
    return time_ns_per_op(n, [&](std::uint64_t i) { tracker.advance(axis, i + 1); });
  });
  bench.run("tracker/advance-by-axis", [](std::uint64_t n) {
    Tracker tracker;
    for (std::uint64_t a = 1; a <= 8; ++a) tracker.register_axis(queue_axis(a));
    const Axis axis = queue_axis(5);
    return time_ns_per_op(n, [&](std::uint64_t i) { tracker.advance(axis, i + 1); });
  });
  bench.run("tracker/advance-1-waiter-idle", [](std::uint64_t n) {
    Tracker tracker;
    const TrackedAxis axis = tracker.register_axis(queue_axis(1));
    bool fired = false;
    TrackerCallbackWaiter waiter([&fired](std::exception_ptr) noexcept { fired = true; });
    const RequirementFrontier<1> far{{queue_axis(1), n + 1}};
    tracker.wait_async(waiter, far);
    const double ns = time_ns_per_op(n, [&](std::uint64_t i) { tracker.advance(axis, i + 1); });
    tracker.advance(axis, n + 1);
    if (!fired) throw std::logic_error("tracker/advance-1-waiter-idle: the waiter did not fire");
    return ns;
  });
  bench.run("tracker/advance-1-waiter-fires", [](std::uint64_t n) {
    Tracker tracker;
    const TrackedAxis axis = tracker.register_axis(queue_axis(1));
    std::uint64_t fired = 0;
    TrackerCallbackWaiter waiter([&fired](std::exception_ptr) noexcept { ++fired; });
    RequirementFrontier<1> next;
    const double ns = time_ns_per_op(n, [&](std::uint64_t i) {
      next.insert_or_raise(queue_axis(1), i + 1);
      tracker.wait_async(waiter, next);
      tracker.advance(axis, i + 1);
    });
    if (fired != n) throw std::logic_error("tracker/advance-1-waiter-fires: a waiter did not fire");
    return ns;
  });
  bench.run("tracker/satisfied-4", [](std::uint64_t n) {
    Tracker tracker;
    RequirementFrontier<4> requirement;
    for (std::uint64_t a = 1; a <= 4; ++a) {
      tracker.advance(tracker.register_axis(queue_axis(a)), 100);
      requirement.insert_or_raise(queue_axis(a), 90 + a);
    }
    std::uint64_t yes = 0;
    const double ns = time_ns_per_op(n, [&](std::uint64_t) {
      yes += tracker.satisfied(requirement) ? 1 : 0;
      escape(yes);
    });
    if (yes != n) throw std::logic_error("tracker/satisfied-4: not satisfied");
    return ns;
  });
}

}  // namespace
}  // namespace depengine::bench

int main(int argc, char** argv) {
  using namespace depengine::bench;
  try {
    Bench bench{parse_options(argc, argv), 0, {}};
    if (bench.options.smoke) bench.options.runs = 1;
    bench.iterations = bench.options.smoke ? 1000 : 200'000;
    bench_timeline(bench);
    bench_tracker(bench);
    report(bench.options, bench.records);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "bench_timeline: %s\n", error.what());
    return 1;
  }
  return 0;
}
