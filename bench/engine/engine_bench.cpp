// End-to-end cost of the engine per op: the four standard workloads (bench/common/workloads.h) pushed from one
// thread and waited for, on the inline executor and on the threadpool executor with 1 and with 2 workers; and the same
// workloads replayed (engine/graph.h): a step of the first 10^4 ops captured once, replayed until the workload's size
// (rows "<system>-replay", with the capture's ns per op and the ratio to the pushed row of the same run, `vs_push`);
// and the threadpool with work-first on (rows "depengine-work-first", 1 and 2 workers: ThreadPoolOptions::work_first,
// the pushing thread runs what it pushed while the workers are behind), pushed only; and the pool with helping pushes
// (rows "depengine-helping", 1 and 2 workers, pushed and replayed: EngineOptions::help_above = 1024, a push more than
// that many ops ahead of the workers runs some of their queued ops first); and, pushed only, the inline and
// pool rows again with an observer that does nothing (rows "<system>-observed", engine/observer.h) and with per-name
// statistics on (rows "<system>-statistics", engine/op_statistics.h), each with `vs_plain`, the ratio to the row
// without observers of the same run. And randsum with work in its bodies (rows "randsum-work": 2 * 10^4 ops of
// randsum's shape, each computing about 1 µs over its inputs' numbers into its output's, checked against a serial run;
// bench/common/op_body.h, the same bodies every system of bench/peers runs): the bodies alone ("serial"), inline, and
// the pool and the helping pool with 1 and 2 workers, their rows with `speedup_vs_1_worker`, that row's ns/op over the
// same system's 1-worker row of the same run. The empty rows measure the engine; these, what it leaves of two cores for
// work.
//
//   bench_engine [--runs N] [--json FILE] [--smoke]
//   bench_engine --count WORKLOAD K     (for bench/engine/count_instructions.sh: K ops pushed)
//   bench_engine --count-replay WORKLOAD STEP K   (the same: K replays of WORKLOAD's first STEP ops)
//   DEPENGINE_BENCH_MAX_IN_FLIGHT=N bench_engine ...   every engine's EngineOptions::max_in_flight (default: the
//                                                       engine's, 2^16): how far the pusher may run ahead; the
//                                                       replayed rows are left out when N < 10^4 (a replayed
//                                                       step of 10^4 ops would not fit)
//
// Each run creates fresh variables, then times from the first push to the return of WaitForAll. The median over the
// runs is reported. Two reference rows are measured in the same run, so that the figures can be read as ratios on a
// noisy or unfamiliar machine:
//   line-transfer / pingpong   one-way transfer of a cache line between two threads (the floor of any hand-off)
//   independent / tbb-task_group   oneTBB task_group::run of the same number of empty tasks, no dependencies
// Each threadpool and work-first row carries `line_transfers_per_op`: (its ns/op - the inline row's for the same
// workload) / the line-transfer row, what handing each op to a worker cost in cache-line transfers on this run's
// machine.
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/task_arena.h>
#include <oneapi/tbb/task_group.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <depengine/engine/engine.h>
#include <depengine/engine/observer.h>
#include <depengine/executors/inline_executor.h>
#include <depengine/executors/threadpool/threadpool_executor.h>

#include "bench/common/engine_run.h"
#include "bench/common/op_body.h"
#include "bench/common/report.h"
#include "bench/common/workloads.h"

namespace depengine::bench {
namespace {

// One-way latency of handing a cache line to another thread and back, in ns per transfer.
double pingpong_once(std::size_t transfers) {
  alignas(64) std::atomic<std::size_t> turn{0};
  auto player = [&turn, transfers](std::size_t first) {
    for (std::size_t i = first; i < transfers; i += 2) {
      // acquire/release: each store hands the turn (and the line) to the other thread's acquire load.
      while (turn.load(std::memory_order_acquire) != i) {
      }
      turn.store(i + 1, std::memory_order_release);
    }
  };
  const auto start = std::chrono::steady_clock::now();
  std::thread other(player, 1);
  player(0);
  other.join();
  const auto stop = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::nano>(stop - start).count() / static_cast<double>(transfers);
}

double task_group_once(tbb::task_arena& arena, std::size_t tasks) {
  tbb::task_group group;
  const auto start = std::chrono::steady_clock::now();
  arena.execute([&] {
    for (std::size_t i = 0; i < tasks; ++i) group.run([] {});
    group.wait();
  });
  const auto stop = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::nano>(stop - start).count() / static_cast<double>(tasks);
}

template <class F>
Record measure(const std::string& workload, const std::string& system, int threads, int runs, F&& once) {
  std::vector<double> samples;
  once();  // warm-up
  for (int run = 0; run < runs; ++run) samples.push_back(once());
  return {workload, system, threads, median(samples), runs};
}

// The median of what a measure()'s runs recorded beside their time, leaving out the first entry (its warm-up run's).
double median_of_runs(std::vector<double> recorded) {
  recorded.erase(recorded.begin());
  return median(std::move(recorded));
}

// The run that count_instructions.sh has callgrind collect (--toggle-collect), so its name must stay unique.
[[gnu::noinline]] double counted_run(Engine& engine, const Workload& workload) {
  return run_workload(engine, workload);
}

// The workload of --count and --count-replay, with `ops` ops.
Workload counted_workload(std::string_view name, std::size_t ops) {
  std::vector<Workload> workloads;
  workloads.push_back(make_independent(ops));
  workloads.push_back(make_chain(ops));
  workloads.push_back(make_randsum(ops));
  workloads.push_back(make_fanout(ops));
  for (Workload& workload : workloads) {
    if (workload.name() == name) return std::move(workload);
  }
  throw std::invalid_argument("--count: unknown workload '" + std::string(name) +
                              "' (expected independent, chain, randsum or fanout)");
}

EngineOptions inline_options() {
  EngineOptions engine_options;
  engine_options.executors.push_back(std::make_unique<InlineExecutor>());
  return engine_options;
}

// --count WORKLOAD K: one warm-up run of WORKLOAD's first K ops on the inline executor, then counted_run() of the same.
int count_mode(std::string_view name, std::size_t ops) {
  const Workload workload = counted_workload(name, ops);
  Engine engine(inline_options());
  (void)run_workload(engine, workload);  // fills the record pool and the variable table
  std::printf("%s: %zu ops, %.1f ns/op under the counter\n", workload.name().c_str(), workload.size(),
              counted_run(engine, workload));
  return 0;
}

[[gnu::noinline]] void counted_replays(Engine& engine, const Graph& graph, std::size_t replays) {
  for (std::size_t k = 0; k < replays; ++k) engine.Replay(graph);
  engine.WaitForAll();
}

// --count-replay WORKLOAD STEP K: WORKLOAD's first STEP ops captured on the inline executor and replayed twice (taking
// the graph's instance), then counted_replays() of K replays.
int count_replay_mode(std::string_view name, std::size_t step, std::size_t replays) {
  const Workload workload = counted_workload(name, step);
  Engine engine(inline_options());
  const std::vector<Var> vars = make_vars(engine, workload);
  {
    const Graph graph = capture_step(engine, workload, vars, workload.size());
    counted_replays(engine, graph, 2);
    counted_replays(engine, graph, replays);
  }
  delete_vars(engine, vars);
  std::printf("%s: %zu replays of %zu ops\n", workload.name().c_str(), replays, workload.size());
  return 0;
}

// Adds line_transfers_per_op to each threadpool record (see the top of this file).
void add_transfers_per_op(std::vector<Record>& records) {
  const auto find = [&](const std::string& workload, const std::string& system) -> const Record& {
    for (const Record& r : records) {
      if (r.workload == workload && r.system == system) return r;
    }
    throw std::logic_error("bench_engine: no record for " + workload + " / " + system);
  };
  const double transfer_ns = find("line-transfer", "pingpong").ns_per_op;
  for (Record& r : records) {
    if (r.system != "depengine-threadpool" && r.system != "depengine-work-first" && r.system != "depengine-helping") {
      continue;
    }
    const double inline_ns = find(r.workload, "depengine-inline").ns_per_op;
    r.metrics.push_back({"line_transfers_per_op", (r.ns_per_op - inline_ns) / transfer_ns});
  }
}

// EngineOptions::max_in_flight from DEPENGINE_BENCH_MAX_IN_FLIGHT (see the top of this file), or 0 when it is unset.
std::size_t max_in_flight_from_environment() {
  const char* env = std::getenv("DEPENGINE_BENCH_MAX_IN_FLIGHT");
  if (env == nullptr) return 0;
  const std::string text(env);
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos || text.size() > 12 ||
      std::stoull(text) == 0) {
    throw std::invalid_argument("DEPENGINE_BENCH_MAX_IN_FLIGHT='" + text + "': expected a positive integer");
  }
  return static_cast<std::size_t>(std::stoull(text));
}

// What the engine of a row is told to observe.
enum class Observing { kNothing, kEmptyObserver, kStatistics };

struct System {
  std::string name;
  int threads;
  std::function<std::unique_ptr<Executor>()> make;
  bool replay = true;  // also measure the replayed form (-replay row)
  Observing observing = Observing::kNothing;
  bool computes = false;       // also run randsum with work in its bodies (rows "randsum-work")
  std::size_t help_above = 0;  // EngineOptions::help_above (0: the default, off)
};

// An observer that does nothing and reads no times: what the events themselves cost (the ids, the record's observed
// line, the virtual calls). The statistics rows add the clock (Timed) and their own work.
class EmptyObserver final : public Observer {
 public:
  [[nodiscard]] bool Timed() const noexcept override { return false; }
  void OnReady(const OpEvent& /*op*/) noexcept override {}
  void OnStart(const OpEvent& /*op*/) noexcept override {}
  void OnEnd(const OpEvent& /*op*/) noexcept override {}
  void OnThreadStart(const ThreadEvent& /*thread*/) noexcept override {}
  void OnThreadStop(const ThreadEvent& /*thread*/) noexcept override {}
};

// Adds speedup_vs_1_worker to each pool row of randsum-work (see the top of this file): over the same system's row
// with 1 worker.
void add_speedup(std::vector<Record>& records) {
  for (const char* system : {"depengine-threadpool", "depengine-helping"}) {
    const Record* one = nullptr;
    for (const Record& r : records) {
      if (r.workload == "randsum-work" && r.system == system && r.threads == 1) one = &r;
    }
    if (one == nullptr) throw std::logic_error(std::string("bench_engine: no randsum-work row of ") + system);
    const double one_worker_ns = one->ns_per_op;
    for (Record& r : records) {
      if (r.workload == "randsum-work" && r.system == system) {
        r.metrics.push_back({"speedup_vs_1_worker", one_worker_ns / r.ns_per_op});
      }
    }
  }
}

// Adds vs_plain to each observed row: its ns/op over the same system's row without observers.
void add_vs_plain(std::vector<Record>& records) {
  const std::vector<Record> plain = records;
  for (Record& r : records) {
    for (const char* suffix : {"-observed", "-statistics"}) {
      const std::string tail(suffix);
      if (r.system.size() <= tail.size() || r.system.compare(r.system.size() - tail.size(), tail.size(), tail) != 0) {
        continue;
      }
      const std::string base = r.system.substr(0, r.system.size() - tail.size());
      for (const Record& p : plain) {
        if (p.workload == r.workload && p.system == base && p.threads == r.threads) {
          r.metrics.push_back({"vs_plain", r.ns_per_op / p.ns_per_op});
        }
      }
    }
  }
}

// The helping rows' EngineOptions::help_above: randsum with work in its bodies ran no faster at 256 and slower at 4,096
// (docs/performance.md, "Helping pushes").
constexpr std::size_t kHelpAbove = 1024;

std::unique_ptr<Executor> work_first_pool(int workers) {
  return std::make_unique<ThreadPoolExecutor>(ThreadPoolOptions{.workers = workers, .work_first = true});
}

}  // namespace
}  // namespace depengine::bench

int main(int argc, char** argv) try {
  using namespace depengine;
  using namespace depengine::bench;
  if (argc == 4 && std::string_view(argv[1]) == "--count") return count_mode(argv[2], std::stoul(argv[3]));
  if (argc == 5 && std::string_view(argv[1]) == "--count-replay") {
    return count_replay_mode(argv[2], std::stoul(argv[3]), std::stoul(argv[4]));
  }
  const Options options = parse_options(argc, argv,
                                        "[--runs N] [--json FILE] [--smoke] | --count WORKLOAD K | "
                                        "--count-replay WORKLOAD STEP K");
  const std::vector<Workload> workloads = standard_workloads(options.smoke);
  const std::vector<System> systems = {
      {"depengine-inline", 1, [] { return std::make_unique<InlineExecutor>(); }, true, Observing::kNothing, true},
      {"depengine-threadpool", 1, [] { return std::make_unique<ThreadPoolExecutor>(ThreadPoolOptions{.workers = 1}); },
       true, Observing::kNothing, true},
      {"depengine-threadpool", 2, [] { return std::make_unique<ThreadPoolExecutor>(ThreadPoolOptions{.workers = 2}); },
       true, Observing::kNothing, true},
      // Work-first (ThreadPoolOptions::work_first): the pushing thread runs what it pushed while the workers are
      // behind. A replay does not push its ops one by one, so these rows have no replayed form.
      {"depengine-work-first", 1, [] { return work_first_pool(1); }, false},
      {"depengine-work-first", 2, [] { return work_first_pool(2); }, false},
      // Helping pushes (EngineOptions::help_above): a push more than 1024 ops ahead of the workers runs some of their
      // queued ops first.
      {"depengine-helping", 1, [] { return std::make_unique<ThreadPoolExecutor>(ThreadPoolOptions{.workers = 1}); },
       true, Observing::kNothing, true, kHelpAbove},
      {"depengine-helping", 2, [] { return std::make_unique<ThreadPoolExecutor>(ThreadPoolOptions{.workers = 2}); },
       true, Observing::kNothing, true, kHelpAbove},
      // Observers (engine/observer.h): a do-nothing one, and the statistics (engine/op_statistics.h); pushed only.
      {"depengine-inline-observed", 1, [] { return std::make_unique<InlineExecutor>(); }, false,
       Observing::kEmptyObserver},
      {"depengine-threadpool-observed", 2,
       [] { return std::make_unique<ThreadPoolExecutor>(ThreadPoolOptions{.workers = 2}); }, false,
       Observing::kEmptyObserver},
      {"depengine-inline-statistics", 1, [] { return std::make_unique<InlineExecutor>(); }, false,
       Observing::kStatistics},
      {"depengine-threadpool-statistics", 2,
       [] { return std::make_unique<ThreadPoolExecutor>(ThreadPoolOptions{.workers = 2}); }, false,
       Observing::kStatistics},
  };
  const std::size_t max_in_flight = max_in_flight_from_environment();
  if (max_in_flight != 0)
    std::printf("every engine: max_in_flight %zu (DEPENGINE_BENCH_MAX_IN_FLIGHT)\n", max_in_flight);
  const Workload randsum_work = make_randsum_work(options.smoke);
  EmptyObserver empty_observer;
  std::vector<Record> records;
  records.push_back(measure("line-transfer", "pingpong", 2, options.runs,
                            [&] { return pingpong_once(options.smoke ? 10'000 : 1'000'000); }));
  {
    const tbb::global_control limit(tbb::global_control::max_allowed_parallelism, 2);
    tbb::task_arena arena(2);
    const std::size_t tasks = workloads.front().size();
    records.push_back(
        measure("independent", "tbb-task_group", 2, options.runs, [&] { return task_group_once(arena, tasks); }));
  }
  records.push_back(measure(randsum_work.name(), "serial", 1, options.runs, [&] { return run_serial(randsum_work); }));
  for (const System& system : systems) {
    EngineOptions engine_options;
    engine_options.executors.push_back(system.make());
    if (system.observing == Observing::kEmptyObserver) engine_options.observers.push_back(&empty_observer);
    engine_options.statistics = system.observing == Observing::kStatistics;
    if (max_in_flight != 0) engine_options.max_in_flight = max_in_flight;
    if (system.help_above != 0) {
      // Under the bound, which DEPENGINE_BENCH_MAX_IN_FLIGHT may have lowered: else the engine refuses it.
      engine_options.help_above = std::min(system.help_above, engine_options.max_in_flight - 1);
    }
    Engine engine(std::move(engine_options));
    for (const Workload& workload : workloads) {
      // The warm-up run fills the record pool and the variable table.
      std::vector<double> push, peak;
      Record pushed = measure(workload.name(), system.name, system.threads, options.runs, [&] {
        const PushTiming timing = run_workload_timed(engine, workload);
        push.push_back(timing.push_ns_per_op);
        peak.push_back(static_cast<double>(timing.peak_in_flight));
        return timing.ns_per_op;
      });
      // Which side set the pace (bench/README.md): only a pool has two.
      if (system.name.find("inline") == std::string::npos) {
        pushed.metrics.push_back({"push_ns_per_op", median_of_runs(push)});
        pushed.metrics.push_back({"peak_in_flight", median_of_runs(peak)});
      }
      records.push_back(std::move(pushed));
      // A replay admits its whole step at once (Engine::Capture refuses a graph larger than max_in_flight).
      if (!system.replay || (max_in_flight != 0 && max_in_flight < kReplayStep)) continue;
      const double push_ns = records.back().ns_per_op;
      std::vector<double> capture;
      Record replay = measure(workload.name(), system.name + "-replay", system.threads, options.runs, [&] {
        const ReplayTiming timing = replay_workload(engine, workload);
        capture.push_back(timing.capture_ns);
        return timing.run_ns;
      });
      replay.metrics.push_back({"capture_ns_per_op", median_of_runs(capture)});
      replay.metrics.push_back({"vs_push", replay.ns_per_op / push_ns});
      records.push_back(std::move(replay));
    }
    if (system.computes) {
      std::vector<double> peak;
      Record computed = measure(randsum_work.name(), system.name, system.threads, options.runs, [&] {
        const PushTiming timing = run_workload_timed(engine, randsum_work, system.name);
        peak.push_back(static_cast<double>(timing.peak_in_flight));
        return timing.ns_per_op;
      });
      if (system.name.find("inline") == std::string::npos) {
        computed.metrics.push_back({"peak_in_flight", median_of_runs(peak)});
      }
      records.push_back(std::move(computed));
    }
  }
  add_transfers_per_op(records);
  add_speedup(records);
  add_vs_plain(records);
  report(options, records);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_engine: %s\n", e.what());
  return 1;
}
