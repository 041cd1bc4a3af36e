// A randomized oracle for accumulation (Engine::PushAccumulate; docs/accumulate.md): 1 to 4 threads push programs of
// ops that read, mutate and accumulate into variables, some of them asynchronous (completed from other threads), on
// the inline executor, on pools, and on an engine with a pool and host streams, where half of the ops are stream ops
// whose bodies run on the device (launched on a host stream), in a group beside CPU members. Accumulations are integer
// additions, exact whatever their order; mutations fold their inputs in an order-sensitive way. Every op checks, as it
// runs, that nothing else uses what it writes (a flag per variable it sets with an atomic exchange and clears, failing
// if it was set) and that nothing writes what it reads; an asynchronous op clears its flags only on the thread that
// calls its Completion, just before the call, so a group's mutual exclusion is checked to last until the Completion.
// The final values, and the versions, must equal a serial run of the programs. In the captured configurations each
// pusher captures its program into a graph and replays it twice: the serial run is then each program twice over.
//
// Each pusher reads and mutates only variables of its own; it accumulates into its own and into shared ones, which
// every pusher accumulates into and none reads until the end. So the values are the same whatever order the engine
// picks across pushers: each pusher's own variables follow its program order, and a shared variable is the sum of
// every contribution, each computed from the contributor's own variables.
//
// Seeds: DEPENGINE_TEST_SEED reruns one; DEPENGINE_TEST_REPEAT sets how many fresh ones (default 3).
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <depengine/engine/engine.h>
#include <depengine/executors/host_stream/host_stream_backend.h>

#include "test/engine/test_support.h"
#include "test/executors/executor_factories.h"

namespace depengine::test {
namespace {

constexpr std::uint32_t kShared = 3;
constexpr std::uint32_t kOwn = 6;  // per pusher

struct OpSpec {
  std::vector<std::uint32_t> reads, mutates, accumulates;  // disjoint
  bool async = false;
  std::int32_t stream = -1;  // a compute stream of the engine's stream executor (executor 1), or -1: its CPU executor
};

// Variable i's state. Flags: see the file comment. relaxed, every access: a flag detects overlap by its exchange
// alone (an exchange that finds another op's mark is the failure); the values are ordered by the engine, which the
// test checks, not by these.
struct Cell {
  std::uint64_t value = 0;
  std::atomic<int> busy{0};
};

struct Workload {
  std::uint32_t num_vars = 0;
  std::vector<std::vector<OpSpec>> programs;  // per pusher
};

std::uint32_t own(int pusher, std::uint32_t i) { return kShared + kOwn * static_cast<std::uint32_t>(pusher) + i; }

// kStreams: the compute streams of host_stream_factory()'s executor, on which ops are placed when `streams` is set.
constexpr std::uint32_t kStreams = 4;

Workload generate(std::uint64_t seed, int pushers, std::size_t ops_per_pusher, bool streams) {
  std::mt19937_64 rng(seed);
  Workload workload;
  workload.num_vars = kShared + kOwn * static_cast<std::uint32_t>(pushers);
  for (int p = 0; p < pushers; ++p) {
    auto& program = workload.programs.emplace_back();
    for (std::size_t i = 0; i < ops_per_pusher; ++i) {
      OpSpec op;
      std::vector<bool> taken(kOwn, false);
      auto pick_own = [&]() -> std::int64_t {  // an own variable not yet in the op, or -1
        const auto start = static_cast<std::uint32_t>(rng() % kOwn);
        for (std::uint32_t k = 0; k < kOwn; ++k) {
          const std::uint32_t v = (start + k) % kOwn;
          if (!taken[v]) {
            taken[v] = true;
            return own(p, v);
          }
        }
        return -1;
      };
      const auto kind = rng() % 4;  // 0: a plain mutation; else an op that accumulates (mostly)
      const std::size_t reads = rng() % 3, mutates = kind == 0 ? 1 + rng() % 2 : rng() % 4 == 0;
      for (std::size_t r = 0; r < reads; ++r) {
        if (const std::int64_t v = pick_own(); v >= 0) op.reads.push_back(static_cast<std::uint32_t>(v));
      }
      for (std::size_t m = 0; m < mutates; ++m) {
        if (const std::int64_t v = pick_own(); v >= 0) op.mutates.push_back(static_cast<std::uint32_t>(v));
      }
      if (kind != 0) {
        // 1 to 3 accumulations, into shared variables (distinct) or own ones.
        const std::size_t count = 1 + rng() % 3;
        std::vector<bool> shared_taken(kShared, false);
        for (std::size_t a = 0; a < count; ++a) {
          if (rng() % 2 == 0) {
            const auto s = static_cast<std::uint32_t>(rng() % kShared);
            if (!shared_taken[s]) {
              shared_taken[s] = true;
              op.accumulates.push_back(s);
            }
          } else if (const std::int64_t v = pick_own(); v >= 0) {
            op.accumulates.push_back(static_cast<std::uint32_t>(v));
          }
        }
      }
      op.async = rng() % 8 == 0;
      if (streams && !op.async && rng() % 2 == 0) op.stream = static_cast<std::int32_t>(rng() % kStreams);
      program.push_back(std::move(op));
    }
  }
  return workload;
}

// What op `id` adds or folds, from the values it read.
std::uint64_t input_of(const OpSpec& op, std::uint64_t id, const std::vector<std::uint64_t>& values) {
  std::uint64_t in = id;
  for (const std::uint32_t r : op.reads) in = mix(in, values[r]);
  return in;
}

// The serial run: each program in order (own variables), `times` times over, shared ones summed.
std::vector<std::uint64_t> serial(const Workload& workload, int times) {
  std::vector<std::uint64_t> values(workload.num_vars, 0);
  for (std::size_t p = 0; p < workload.programs.size(); ++p) {
    const auto& program = workload.programs[p];
    for (std::size_t i = 0; i < program.size() * static_cast<std::size_t>(times); ++i) {
      const std::size_t k = i % program.size();
      const OpSpec& op = program[k];
      const std::uint64_t in = input_of(op, p << 32 | k, values);
      for (const std::uint32_t m : op.mutates) values[m] = mix(values[m], in);
      for (const std::uint32_t a : op.accumulates) values[a] += mix(in, a);
    }
  }
  return values;
}

struct Run {
  std::vector<Cell> cells;
  std::atomic<int> violations{0};  // relaxed: read after WaitForAll (and the Completer's stop), which order it
  explicit Run(std::uint32_t vars) : cells(vars) {}

  void claim(std::uint32_t v) {
    if (cells[v].busy.exchange(1, std::memory_order_relaxed) != 0) violations.fetch_add(1, std::memory_order_relaxed);
  }
  void release(std::uint32_t v) {
    if (cells[v].busy.exchange(0, std::memory_order_relaxed) != 1) violations.fetch_add(1, std::memory_order_relaxed);
  }
  // The body of op `id`: checks and takes its flags, reads, writes. The flags are released by finish().
  void body(const OpSpec& op, std::uint64_t id) {
    for (const std::uint32_t r : op.reads) {
      if (cells[r].busy.load(std::memory_order_relaxed) != 0) violations.fetch_add(1, std::memory_order_relaxed);
    }
    for (const std::uint32_t m : op.mutates) claim(m);
    for (const std::uint32_t a : op.accumulates) claim(a);
    std::uint64_t in = id;
    for (const std::uint32_t r : op.reads) in = mix(in, cells[r].value);
    for (const std::uint32_t m : op.mutates) cells[m].value = mix(cells[m].value, in);
    for (const std::uint32_t a : op.accumulates) cells[a].value += mix(in, a);
  }
  void finish(const OpSpec& op) {
    for (const std::uint32_t m : op.mutates) release(m);
    for (const std::uint32_t a : op.accumulates) release(a);
  }
};

std::vector<Var> vars_of(const std::vector<std::uint32_t>& ids, const std::vector<Var>& vars) {
  std::vector<Var> out;
  for (const std::uint32_t i : ids) out.push_back(vars[i]);
  return out;
}

void push_program(Engine& engine, Run& run, Completer& completer, const std::vector<Var>& vars,
                  const std::vector<OpSpec>& program, std::uint64_t pusher) {
  for (std::size_t i = 0; i < program.size(); ++i) {
    const OpSpec* op = &program[i];
    const std::uint64_t id = pusher << 32 | i;
    const std::vector<Var> reads = vars_of(op->reads, vars), mutates = vars_of(op->mutates, vars),
                           accumulates = vars_of(op->accumulates, vars);
    if (op->stream >= 0) {  // its body runs on the device, after what the stream waited for on its behalf
      engine.PushAccumulate(
          [&run, op, id](const RunContext& ctx) {
            launch_host(*ctx.stream, HostTask([&run, op, id] {
              run.body(*op, id);
              run.finish(*op);
            }));
          },
          reads, mutates, accumulates, {.context = {.executor = 1, .stream = op->stream}});
    } else if (op->async) {
      engine.PushAccumulateAsync(
          [&run, &completer, op, id](Completion done) {
            run.body(*op, id);
            completer.post([&run, op, done] {
              run.finish(*op);
              done();
            });
          },
          reads, mutates, accumulates);
    } else {
      engine.PushAccumulate(
          [&run, op, id] {
            run.body(*op, id);
            run.finish(*op);
          },
          reads, mutates, accumulates);
    }
  }
}

struct Config {
  std::string name;
  std::function<EngineOptions()> options;
  bool streams = false;  // executor 1 is a stream executor, where half of the sync ops go
  std::size_t op_cost = 1;
  int replays = 0;  // 0: pushed; else each pusher captures its program once and replays it this many times
};

std::vector<Config> accumulate_configs() {
  std::vector<Config> configs;
  for (const ExecutorFactory& factory : {inline_factory(), threadpool_factory(1), threadpool_factory(2),
                                         work_first_factory(2), waiters_work_factory(2), helping_factory(2)}) {
    configs.push_back({factory.name, [factory] { return factory.options(); }});
  }
  const ExecutorFactory streams = host_stream_factory();
  // Captured: the graph's plan orders each group's members with a token of the replay's (graph_plan.h, Groups).
  for (const ExecutorFactory& factory : {inline_factory(), threadpool_factory(2)}) {
    configs.push_back(
        {factory.name + ", captured and replayed twice", [factory] { return factory.options(); }, false, 2, 2});
  }
  configs.push_back({"threadpool-2 + " + streams.name,
                     [streams] {
                       return mixed_options({threadpool_factory(2), streams});
                     },
                     true, streams.op_cost});
  return configs;
}

void check(const Config& config, int pushers, std::uint64_t seed, std::size_t ops_per_pusher) {
  Watchdog watchdog("accumulate oracle on " + config.name);
  watchdog.note("seed " + std::to_string(seed));
  const Workload workload = generate(seed, pushers, ops_per_pusher, config.streams);
  const std::uint64_t times = config.replays == 0 ? 1 : static_cast<std::uint64_t>(config.replays);
  Run run(workload.num_vars);
  Completer completer(2);
  {
    Engine engine(config.options());
    std::vector<Var> vars;
    for (std::uint32_t v = 0; v < workload.num_vars; ++v) vars.push_back(engine.NewVariable());
    std::vector<std::thread> threads;
    for (int p = 0; p < pushers; ++p) {
      threads.emplace_back([&, p] {
        const std::vector<OpSpec>& program = workload.programs[static_cast<std::size_t>(p)];
        if (config.replays == 0) {
          push_program(engine, run, completer, vars, program, static_cast<std::uint64_t>(p));
          return;
        }
        const Graph graph =
            engine.Capture([&] { push_program(engine, run, completer, vars, program, static_cast<std::uint64_t>(p)); });
        for (int r = 0; r < config.replays; ++r) engine.Replay(graph);
      });
    }
    for (auto& thread : threads) thread.join();
    engine.WaitForAll();
    std::vector<std::uint64_t> versions(workload.num_vars, 0);
    for (const auto& program : workload.programs) {
      for (const OpSpec& op : program) {
        for (const std::uint32_t m : op.mutates) versions[m] += times;
        for (const std::uint32_t a : op.accumulates) versions[a] += times;
      }
    }
    for (std::uint32_t v = 0; v < workload.num_vars; ++v) CHECK(engine.Version(vars[v]) == versions[v]);
  }
  completer.stop();
  CHECK(run.violations.load(std::memory_order_relaxed) == 0);
  const std::vector<std::uint64_t> expected = serial(workload, static_cast<int>(times));
  for (std::uint32_t v = 0; v < workload.num_vars; ++v) {
    CAPTURE(v);
    CHECK(run.cells[v].value == expected[v]);
  }
}

TEST_CASE("accumulations from 1 to 4 pushers equal a serial run, each alone on its variable", "[engine][accumulate]") {
  const std::size_t ops_per_pusher = sized(3000, 400, 600);
  // Drawn once: Catch runs the test case again for each section, and a section is known by its name, seed included.
  static const std::vector<std::uint64_t> seeds = test_seeds();
  for (const Config& config : accumulate_configs()) {
    for (const int pushers : {1, 2, 4}) {
      for (const std::uint64_t seed : seeds) {
        DYNAMIC_SECTION(config.name << ", " << pushers << " pushers, seed " << seed) {
          check(config, pushers, seed, ops_per_pusher / config.op_cost);
        }
      }
    }
  }
}

}  // namespace
}  // namespace depengine::test
