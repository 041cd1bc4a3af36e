// What the generic stream executor (executors/stream/stream_executor.h) costs per op, and how many device waits its
// placement and wait elision leave, on the host backend (executors/host_stream/host_stream_backend.h: one device,
// each stream a CPU thread running its queue in order), for four shapes of dependency between stream ops and one CPU
// reference, all in one engine and one process:
//
//   bench_stream [--runs N] [--json FILE] [--smoke]
//
// Rows: workload, then system (all stream rows are "depengine-host-stream", the CPU row "depengine-threadpool"), and
// threads = the streams the shape is built to use, or the pool's workers. N = 20,000 (--smoke: 200).
//   alternating-chain    N ops, each mutating x, pinned to compute streams 0, 1, 0, 1, ...: every op depends on the
//                        last op of the other stream, so each needs one device wait (unless that op has completed)
//   alternating-chain, system depengine-host-stream-replay: the same chain's first 1,000 ops captured once (untimed)
//                        as a graph of stream ops (engine/graph.h) and replayed N / 1,000 times: one stream op per
//                        replay, whose issue calls the 1,000 functions on its stream (no wait among them). Per op of
//                        the chain; its waits and notifications are per replayed op too (one replay counts 1,000)
//   fork-join-4          N / 6 rounds of: one op mutates x; 4 ops each read x and mutate y_i; one op reads
//                        y_0..y_3 and mutates x. Every op with stream -1: the executor chooses among 4 compute streams
//   fork-join-4-pinned   the same rounds with the placement written out: the writer and the join on stream 0, the
//                        reader of x that mutates y_i on stream i. What fork-join-4 costs when its fork does spread
//                        (the chooser may keep it on fewer streams: streams_used says how many it took)
//   fence-chain          the alternating chain ordered by a timeline instead of a variable: op i uses no variable,
//                        waits for t >= i and signals t = i + 1 (PushOptions fences). Each op is issued on the
//                        promise of its predecessor's signal, with one device wait, as alternating-chain
//   fence-chain-reversed the same N ops pushed last first: every op but the last pushed waits on the timeline (held
//                        by the engine, no thread blocked) until the first is pushed, which issues all of them. What
//                        submitting a whole pipeline before any of it can run costs
//   same-stream-chain    N ops mutating x with stream -1: the chooser keeps a chain on one stream, where FIFO order
//                        holds every dependency, so no wait should be issued
//   cpu-chain            the same N-op chain as CPU ops (executor 0, one worker): the peer that says what a stream op
//                        costs over a CPU op, measured in the same run (not named "chain": that is bench_engine's
//                        10^6-op, 2-worker row)
//
// A stream op's function enqueues an empty host launch on the stream it is issued on (the host backend's kernel), so
// what is measured is the executor's issue path (choosing a stream, waits, an event record, a notification) and the
// stream threads' turnaround, not device work. ns per op is the wall time from the first Push to the return of
// WaitForAll, divided by the ops pushed. Each row also carries these metrics (report.h); all but the first come from
// the growth of StreamExecutor::stats() over the run, and only stream rows have them:
//   push_ns_per_op           first Push to the return of the last Push, per op. For a stream op that is its issue
//                            (the pushing thread issues it inside Push: its predecessor was issued, not completed),
//                            so the rest of ns per op is the streams trailing behind
//   waits_issued_per_op      device waits enqueued, per op
//   waits_elided_fraction    elided / (elided + issued + complete): of the wait-frontier entries the executor looked
//                            at, the share the chosen stream already knew (same-stream entries included)
//   waits_complete_fraction  complete / (the same): the share found complete on the tracker, needing no wait. It
//                            depends on how far the streams trail the pushing thread, so on timing
//   notifications_per_op     completion notifications requested, per op (kNotify: one per op)
//   streams_used             streams that issued at least one op in the run
// The three fractions sum to 1 (all three are 0 for a run in which no op had a wait-frontier entry). Every value is
// the median over the runs on its own, so the figures of one row may come from different runs.
//
// Each row first makes one untimed warm-up run (it fills the record pool, the variable table and the host streams'
// queues), then --runs timed runs (default 5; --smoke: 1 run, which checks that the benchmark works and measures
// nothing). Every run makes fresh variables and deletes them afterwards, untimed. Rows run in the order above, on the
// same engine, so each starts with the streams as the previous row left them (every op completed).
//
// Threads: the main thread pushes, and issues stream ops itself. The engine also has 4 host stream threads (each
// sleeps while its queue is empty, and a device wait blocks it on a futex), the stream executor's io thread (it retires
// ops on notifications) and a 1-worker pool, on a machine of 2 cores. A cross-stream wait on this backend is therefore
// a wake-up of one thread by another, not a device-side wait as on a GPU: read the rows with waits against
// bench_engine's line-transfer row, measured at about the same time, and expect a GPU backend's to differ.
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <depengine/engine/engine.h>
#include <depengine/executors/host_stream/host_stream_backend.h>
#include <depengine/executors/host_stream/host_task.h>
#include <depengine/executors/stream/stream_executor.h>
#include <depengine/executors/threadpool/threadpool_executor.h>
#include <depengine/frontier/timeline.h>

#include "bench/common/report.h"

namespace depengine::bench {
namespace {

constexpr std::uint32_t kCpu = 0;     // Context::executor of the pool
constexpr std::uint32_t kStream = 1;  // Context::executor of the stream executor
// Compute streams of the one device: what fork-join needs. The chains use two of them (pinned) or one (chosen), and
// the chooser looks at all four either way, as it would in an engine set up for the fork.
constexpr std::uint32_t kComputeStreams = 4;
constexpr std::size_t kForkWidth = 4;              // the y_i of a fork-join round
constexpr std::size_t kRoundOps = kForkWidth + 2;  // fork-join: the writer, the readers, the join
constexpr std::uint64_t kGraphOps = 1'000;         // the replayed chain: ops per captured graph
static_assert(kForkWidth <= kComputeStreams, "the pinned fork-join puts branch i on compute stream i");

// One engine for every row: executor 0 a ThreadPoolExecutor with one worker (the machine has two cores, and the
// pushing thread and the stream threads need them), executor 1 a StreamExecutor over a one-device HostStreamBackend
// with kComputeStreams compute streams and no copy stream. No launch delay: device work takes no time.
// The engine keeps the typed id of its stream executor, so the rows reach its counters without a cast.
class BenchEngine : public Engine {
 public:
  BenchEngine() : BenchEngine(ExecutorId<StreamExecutor>{}) {}

  [[nodiscard]] const StreamExecutor& streams() const { return executor(streams_); }

 private:
  // options() sets `streams` while the base is built; streams_ copies it after.
  explicit BenchEngine(ExecutorId<StreamExecutor> streams) : Engine(options(streams)), streams_(streams) {}

  static EngineOptions options(ExecutorId<StreamExecutor>& streams) {
    EngineOptions options;
    options.emplace<ThreadPoolExecutor>(ThreadPoolOptions{.workers = 1});
    streams = options.emplace<StreamExecutor>(
        std::make_unique<HostStreamBackend>(HostStreamOptions{.devices = 1}),
        StreamExecutorOptions{.devices = 1, .compute_streams = kComputeStreams, .copy_streams = 0});
    return options;
  }

  ExecutorId<StreamExecutor> streams_;
};

std::unique_ptr<BenchEngine> make_engine() { return std::make_unique<BenchEngine>(); }

// The context of a stream op on device 0's compute streams: stream `index`, or -1 to let the executor choose.
PushOptions on_stream(std::int32_t index) {
  return PushOptions{
      .context = Context{.executor = kStream, .device = 0, .stream_kind = StreamKind::kCompute, .stream = index}};
}

// A stream op's function: an empty host launch on the stream it is being issued on. The empty lambda fits HostTask
// inline, so a launch allocates nothing; the function itself (no captures) fits the op record inline.
void empty_launch(const RunContext& ctx) {
  launch_host(*ctx.stream, HostTask([] {}));
}

// The executor's counters, summed and per compute stream, at one moment (read after WaitForAll they are exact: every
// counter is bumped before the op it counts completes).
struct Counters {
  StreamStats total;
  std::array<std::uint64_t, kComputeStreams> ops_per_stream{};

  static Counters of(const BenchEngine& engine) {
    const StreamExecutor& streams = engine.streams();
    Counters c{streams.stats(), {}};
    for (std::uint32_t s = 0; s < kComputeStreams; ++s) {
      c.ops_per_stream[s] = streams.stats(0, StreamKind::kCompute, s).ops_issued;
    }
    return c;
  }
};

// One timed run: its times and what the counters grew by.
struct Sample {
  double ns_per_op = 0;       // first Push to the return of WaitForAll
  double push_ns_per_op = 0;  // first Push to the return of the last Push
  std::uint64_t ops = 0;
  std::uint64_t issued = 0;  // stream ops the executor issues: `ops`, but one per replay of a graph
  StreamStats grew;
  std::uint32_t streams_used = 0;
};

// Times `push_all` (which pushes `ops` ops on `vars`) from its start to the return of WaitForAll, and takes the
// counters around it. The variables are made before and deleted after, untimed, and `prepare(vars)` runs untimed
// before the pushes.
template <std::size_t kVars, class Prepare, class PushAll>
Sample timed_run(BenchEngine& engine, std::uint64_t ops, Prepare&& prepare, PushAll&& push_all) {
  std::array<Var, kVars> vars;
  for (Var& var : vars) var = engine.NewVariable();
  prepare(vars);
  const Counters before = Counters::of(engine);
  const auto start = std::chrono::steady_clock::now();
  push_all(vars);
  const auto pushed = std::chrono::steady_clock::now();
  engine.WaitForAll();
  const auto stop = std::chrono::steady_clock::now();
  const Counters after = Counters::of(engine);
  for (const Var& var : vars) engine.DeleteVariable(var);
  engine.WaitForAll();

  Sample sample;
  const auto per_op = [ops](auto duration) {
    return std::chrono::duration<double, std::nano>(duration).count() / static_cast<double>(ops);
  };
  sample.ns_per_op = per_op(stop - start);
  sample.push_ns_per_op = per_op(pushed - start);
  sample.ops = ops;
  sample.issued = ops;
  const StreamStats& a = after.total;
  const StreamStats& b = before.total;
  sample.grew = StreamStats{a.ops_issued - b.ops_issued,       a.waits_issued - b.waits_issued,
                            a.waits_elided - b.waits_elided,   a.waits_complete - b.waits_complete,
                            a.notifications - b.notifications, a.host_synchronizations - b.host_synchronizations};
  for (std::uint32_t s = 0; s < kComputeStreams; ++s) {
    sample.streams_used += after.ops_per_stream[s] > before.ops_per_stream[s] ? 1 : 0;
  }
  return sample;
}

template <std::size_t kVars, class PushAll>
Sample timed_run(BenchEngine& engine, std::uint64_t ops, PushAll&& push_all) {
  return timed_run<kVars>(
      engine, ops, [](const std::array<Var, kVars>&) {}, std::forward<PushAll>(push_all));
}

// The workloads. Each returns one timed run of `n` ops (fork-join: of the whole rounds that fit in n, at least one).

Sample alternating_chain(BenchEngine& engine, std::uint64_t n) {
  return timed_run<1>(engine, n, [&engine, n](const std::array<Var, 1>& v) {
    for (std::uint64_t i = 0; i < n; ++i) engine.Push(empty_launch, {}, {v[0]}, on_stream(static_cast<int>(i % 2)));
  });
}

// The alternating chain captured once (untimed) as a graph of kGraphOps stream ops, then replayed: each replay is one
// stream op, issued on one stream, whose issue calls the captured functions there (engine/graph.h).
Sample replayed_alternating_chain(BenchEngine& engine, std::uint64_t n) {
  const std::uint64_t replays = n / kGraphOps > 0 ? n / kGraphOps : 1;
  Graph graph;
  Sample sample = timed_run<1>(
      engine, replays * kGraphOps,
      [&engine, &graph](const std::array<Var, 1>& v) {
        graph = engine.Capture([&engine, &v] {
          for (std::uint64_t i = 0; i < kGraphOps; ++i) {
            engine.Push(empty_launch, {}, {v[0]}, on_stream(static_cast<int>(i % 2)));
          }
        });
      },
      [&engine, &graph, replays](const std::array<Var, 1>&) {
        for (std::uint64_t r = 0; r < replays; ++r) engine.Replay(graph);
      });
  sample.issued = replays;
  return sample;
}

// `pinned`: the writer and the join on stream 0 and branch i on stream i, instead of stream -1 for every op.
Sample fork_join(BenchEngine& engine, std::uint64_t n, bool pinned) {
  const std::uint64_t rounds = n / kRoundOps > 0 ? n / kRoundOps : 1;
  const auto where = [pinned](std::size_t stream) { return on_stream(pinned ? static_cast<int>(stream) : -1); };
  // vars[0] is x, vars[1 + i] is y_i.
  return timed_run<1 + kForkWidth>(engine, rounds * kRoundOps, [&engine, rounds, &where](const auto& v) {
    const Var x = v[0];
    const std::span<const Var> ys(v.data() + 1, kForkWidth);
    for (std::uint64_t r = 0; r < rounds; ++r) {
      engine.Push(empty_launch, {}, {x}, where(0));
      for (std::size_t i = 0; i < kForkWidth; ++i) engine.Push(empty_launch, {x}, {ys[i]}, where(i));
      engine.Push(empty_launch, ys, {x}, where(0));
    }
  });
}

// Op i of the chain: stream i % 2, waits for t >= i, signals t = i + 1.
PushOptions fence_link(Timeline& t, std::uint64_t i) {
  PushOptions options = on_stream(static_cast<int>(i % 2));
  options.wait_fences = {Fence{&t, i}};
  options.signal_fences = {Fence{&t, i + 1}};
  return options;
}

Sample fence_chain(BenchEngine& engine, std::uint64_t n, bool reversed) {
  Timeline t;  // a fresh timeline per run: values start at 0
  return timed_run<0>(engine, n, [&engine, &t, n, reversed](const std::array<Var, 0>&) {
    for (std::uint64_t k = 0; k < n; ++k) {
      const std::uint64_t i = reversed ? n - 1 - k : k;
      engine.Push(empty_launch, {}, {}, fence_link(t, i));
    }
  });
}

Sample same_stream_chain(BenchEngine& engine, std::uint64_t n) {
  return timed_run<1>(engine, n, [&engine, n](const std::array<Var, 1>& v) {
    for (std::uint64_t i = 0; i < n; ++i) engine.Push(empty_launch, {}, {v[0]}, on_stream(-1));
  });
}

Sample cpu_chain(BenchEngine& engine, std::uint64_t n) {
  return timed_run<1>(engine, n, [&engine, n](const std::array<Var, 1>& v) {
    for (std::uint64_t i = 0; i < n; ++i) engine.Push([] {}, {}, {v[0]}, PushOptions{.context = {.executor = kCpu}});
  });
}

// x / total, or 0 when no entry was looked at (a fraction of nothing; JSON cannot hold NaN).
double fraction(std::uint64_t x, std::uint64_t total) {
  return total == 0 ? 0.0 : static_cast<double>(x) / static_cast<double>(total);
}

// The row of one workload: a warm-up run, then `runs` timed runs; ns per op and (for stream rows) each metric are
// medians over the runs, each on its own. Throws std::logic_error when the counters say the run was not what it
// claims (a stream op not issued by the stream executor, or a CPU op that was).
template <class Once>
Record measure(const std::string& workload, const std::string& system, int threads, int runs, bool on_streams,
               std::uint64_t& host_synchronizations, Once&& once) {
  once();  // warm-up
  std::vector<double> ns, push_ns, issued, elided, complete, notifications, used;
  for (int run = 0; run < runs; ++run) {
    const Sample s = once();
    if (s.grew.ops_issued != (on_streams ? s.issued : 0)) {
      throw std::logic_error(workload + ": the stream executor issued " + std::to_string(s.grew.ops_issued) + " of " +
                             std::to_string(s.issued) + " ops");
    }
    host_synchronizations += s.grew.host_synchronizations;
    const std::uint64_t entries = s.grew.waits_issued + s.grew.waits_elided + s.grew.waits_complete;
    const auto ops = static_cast<double>(s.ops);
    ns.push_back(s.ns_per_op);
    push_ns.push_back(s.push_ns_per_op);
    issued.push_back(static_cast<double>(s.grew.waits_issued) / ops);
    elided.push_back(fraction(s.grew.waits_elided, entries));
    complete.push_back(fraction(s.grew.waits_complete, entries));
    notifications.push_back(static_cast<double>(s.grew.notifications) / ops);
    used.push_back(s.streams_used);
  }
  Record record{workload, system, threads, median(ns), runs, {{"push_ns_per_op", median(push_ns)}}};
  if (on_streams) {
    record.metrics.insert(record.metrics.end(), {{"waits_issued_per_op", median(issued)},
                                                 {"waits_elided_fraction", median(elided)},
                                                 {"waits_complete_fraction", median(complete)},
                                                 {"notifications_per_op", median(notifications)},
                                                 {"streams_used", median(used)}});
  }
  return record;
}

}  // namespace
}  // namespace depengine::bench

int main(int argc, char** argv) try {
  using namespace depengine;
  using namespace depengine::bench;
  const Options options = parse_options(argc, argv);
  const std::uint64_t n = options.smoke ? 200 : 20'000;
  const std::unique_ptr<BenchEngine> engine = make_engine();
  std::uint64_t host_synchronizations = 0;  // the executor should never need one: said below the table if it did
  std::vector<Record> records;
  const std::string streams = "depengine-host-stream";
  records.push_back(measure("alternating-chain", streams, 2, options.runs, true, host_synchronizations,
                            [&] { return alternating_chain(*engine, n); }));
  records.push_back(measure("alternating-chain", streams + "-replay", 2, options.runs, true, host_synchronizations,
                            [&] { return replayed_alternating_chain(*engine, n); }));
  records.push_back(measure("fork-join-4", streams, static_cast<int>(kForkWidth), options.runs, true,
                            host_synchronizations, [&] { return fork_join(*engine, n, false); }));
  records.push_back(measure("fork-join-4-pinned", streams, static_cast<int>(kForkWidth), options.runs, true,
                            host_synchronizations, [&] { return fork_join(*engine, n, true); }));
  records.push_back(measure("fence-chain", streams, 2, options.runs, true, host_synchronizations,
                            [&] { return fence_chain(*engine, n, false); }));
  records.push_back(measure("fence-chain-reversed", streams, 2, options.runs, true, host_synchronizations,
                            [&] { return fence_chain(*engine, n, true); }));
  records.push_back(measure("same-stream-chain", streams, 1, options.runs, true, host_synchronizations,
                            [&] { return same_stream_chain(*engine, n); }));
  records.push_back(measure("cpu-chain", "depengine-threadpool", 1, options.runs, false, host_synchronizations,
                            [&] { return cpu_chain(*engine, n); }));
  report(options, records);
  if (host_synchronizations != 0) {
    std::printf("# the stream executor made %llu host synchronisations during the timed runs\n",
                static_cast<unsigned long long>(host_synchronizations));
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_stream: %s\n", e.what());
  return 1;
}
