// Graphs (engine/graph.h; Engine::Capture and Engine::Replay in engine.h), randomized: a step of pushes captured once
// and replayed many times must behave exactly as if its ops were pushed again, in captured order, at the replay.
//
// - The oracle. Random graphs over 12 variables (ops reading 0 to 4 variables and mutating 1 or 2; and chain-heavy
// ones,
//   whose ops mutate one and mostly read none; with bodies that fold their id, RunContext::replay and what they read
//   into what they write) are captured once, while other ops are
//   in flight, and replayed 20 times, interleaved with ordinary pushes from the capturing thread and, in a second mode,
//   with ordinary pushes from a second thread on the same variables. Every op instance records what it observed
//   (order_oracle.h); a total order must explain the run, and a serial execution in that order (and, with one pusher,
//   in program order) must reproduce every value bit for bit. A replay misordered against its neighbours, a dependency
//   inside the graph lost, a wrong RunContext::replay, a captured op run at capture, or an op run twice or never, all
//   change the values. On the CPU executors and on host streams.
// - Back-pressure: a replay is admitted whole (never more than max_in_flight ops in flight), replays of one graph from
//   two threads at once, 100 in a row without waits, checked by the same oracle.
//
// Seeds: DEPENGINE_TEST_SEED reruns one; DEPENGINE_TEST_REPEAT sets how many fresh ones (default 3).
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <depengine/engine/engine.h>

#include "test/engine/graph_test_support.h"

namespace depengine::test {
namespace {

// Atomics: the counters here are bumped by ops and read by the test thread after a wait (WaitForAll, WaitForVar,
// WaitForScope) or a join, which orders every op's writes before the read, so they are relaxed.

constexpr std::uint32_t kOracleVars = 12;

// Pusher 0 pushes `prefix`, captures `graph` (with `prefix` possibly still in flight, and pusher 1 pushing), then
// runs `steps`: a replay of the graph, or a push. Pusher 1 (with two pushers) pushes `other` meanwhile, on the same
// variables. The oracle sees every op instance: pusher 0's program is the prefix, then each step (a replay as the
// graph's ops, in captured order), and pusher 1's program is `other`.
struct GraphWorkload {
  std::vector<OpSpec> graph;
  std::vector<OpSpec> prefix;
  struct Step {
    bool replay = false;
    OpSpec op;  // a push's op
  };
  std::vector<Step> steps;
  std::vector<OpSpec> other;

  // Derived: the oracle's programs, and per op id what ran it.
  std::vector<std::vector<OpSpec>> programs;
  std::vector<std::size_t> replay_base;  // per replay k: the id of its first op (ids of one replay are consecutive)
  std::vector<std::int64_t> replay_of;   // per id: the replay that runs it; -1 for a push
  std::vector<const OpSpec*> spec_of;    // per id
};

// The graph's ops: random_op()'s, or random_chain_op()'s.
using MakeOp = OpSpec (*)(std::mt19937_64&, std::uint32_t);

GraphWorkload generate_graph_workload(std::uint64_t seed, int pushers, std::size_t graph_ops, std::size_t replays,
                                      std::size_t other_ops, MakeOp make_op) {
  std::mt19937_64 rng(seed);
  GraphWorkload w;
  for (std::size_t i = 0; i < graph_ops; ++i) w.graph.push_back(make_op(rng, kOracleVars));
  for (std::size_t i = 0; i < 8; ++i) w.prefix.push_back(random_op(rng, kOracleVars));
  for (std::size_t k = 0; k < replays; ++k) {
    const std::size_t pushes = rng() % 6;
    for (std::size_t i = 0; i < pushes; ++i) w.steps.push_back({false, random_op(rng, kOracleVars)});
    w.steps.push_back({true, {}});
  }
  for (std::size_t i = 0; i < 3; ++i) w.steps.push_back({false, random_op(rng, kOracleVars)});
  if (pushers > 1) {
    for (std::size_t i = 0; i < other_ops; ++i) w.other.push_back(random_op(rng, kOracleVars));
  }

  std::vector<OpSpec>& first = w.programs.emplace_back();
  std::vector<std::int64_t> replay_of_first;
  for (const OpSpec& op : w.prefix) {
    first.push_back(op);
    replay_of_first.push_back(-1);
  }
  std::int64_t k = 0;
  for (const GraphWorkload::Step& step : w.steps) {
    if (!step.replay) {
      first.push_back(step.op);
      replay_of_first.push_back(-1);
      continue;
    }
    w.replay_base.push_back(first.size());  // pusher 0's ids come first (order_oracle.h)
    for (const OpSpec& op : w.graph) {
      first.push_back(op);
      replay_of_first.push_back(k);
    }
    ++k;
  }
  w.replay_of = replay_of_first;
  if (pushers > 1) {
    w.programs.push_back(w.other);
    w.replay_of.insert(w.replay_of.end(), w.other.size(), -1);
  }
  for (const auto& program : w.programs) {
    for (const OpSpec& op : program) w.spec_of.push_back(&op);
  }
  return w;
}

struct GraphOutcome {
  std::vector<std::uint64_t> values;  // every variable's final value
  std::vector<std::uint64_t> folds;   // per op id
  std::vector<std::uint32_t> runs;    // per op id: how many times it ran
  std::size_t graph_size = 0;
  std::size_t ran_at_capture = 0;  // captured ops that ran as pushed ops (RunContext::replay == -1)
  std::size_t bad_replay = 0;      // captured ops that ran with a RunContext::replay beyond the replays made
  std::string order_failure;
  std::vector<std::size_t> order;
};

GraphOutcome run_graph_workload(const ExecutorFactory& factory, const GraphWorkload& w, std::uint64_t seed) {
  GraphOutcome out;
  out.values = initial_values(seed, kOracleVars);
  OrderOracle oracle(kOracleVars, w.programs);
  out.folds.assign(oracle.size(), 0);
  out.runs.assign(oracle.size(), 0);
  std::atomic<std::size_t> ran_at_capture{0}, bad_replay{0};
  {
    Engine engine(factory.options());
    std::vector<Var> vars;
    for (std::uint32_t v = 0; v < kOracleVars; ++v) vars.push_back(engine.NewVariable());
    auto work = [&out, &oracle](const OpSpec& op, std::size_t id, std::int64_t replay) {
      oracle.observe(id);
      ++out.runs[id];
      out.folds[id] = run_op(op, id, replay, out.values);
    };
    auto push = [&](const OpSpec& op, std::size_t id) {
      engine.Push([&work, &op, id](const RunContext& ctx) { work(op, id, ctx.replay); }, vars_of(op.reads, vars),
                  vars_of(op.mutates, vars));
    };
    Rendezvous start(static_cast<int>(w.programs.size()));
    std::thread other;
    if (w.programs.size() > 1) {
      other = std::thread([&] {
        (void)start.arrive_and_wait();
        for (std::size_t i = 0; i < w.other.size(); ++i) push(w.other[i], oracle.id(1, i));
      });
    }
    (void)start.arrive_and_wait();
    // An exception here (an engine bug) is rethrown once pusher 1 has been joined.
    std::exception_ptr failure;
    try {
      std::size_t next = 0;  // pusher 0's next op index
      for (const OpSpec& op : w.prefix) push(op, oracle.id(0, next++));
      // Captured while the prefix may still run, and while pusher 1 pushes: neither is captured.
      // Every third op of the graph is asynchronous (its Completion called by its function) where the executor takes
      // asynchronous ops; on host streams the graph is one of stream ops, replayed as one stream op (graph.h).
      Graph graph = engine.Capture([&] {
        for (std::size_t i = 0; i < w.graph.size(); ++i) {
          auto body = [&work, &w, &ran_at_capture, &bad_replay, i](const RunContext& ctx) {
            if (ctx.replay < 0) {
              ran_at_capture.fetch_add(1, std::memory_order_relaxed);
              return;
            }
            const auto k = static_cast<std::size_t>(ctx.replay);
            if (k >= w.replay_base.size()) {
              bad_replay.fetch_add(1, std::memory_order_relaxed);
              return;
            }
            work(w.graph[i], w.replay_base[k] + i, ctx.replay);
          };
          if (i % 3 == 1 && factory.takes_async) {
            engine.PushAsync(
                [body](const RunContext& ctx, Completion done) {
                  body(ctx);
                  done();
                },
                vars_of(w.graph[i].reads, vars), vars_of(w.graph[i].mutates, vars));
          } else {
            engine.Push(body, vars_of(w.graph[i].reads, vars), vars_of(w.graph[i].mutates, vars));
          }
        }
      });
      out.graph_size = graph.size();
      for (const GraphWorkload::Step& step : w.steps) {
        if (step.replay) {
          engine.Replay(graph);
          next += w.graph.size();
        } else {
          push(step.op, oracle.id(0, next++));
        }
      }
    } catch (...) {
      failure = std::current_exception();
    }
    if (other.joinable()) other.join();
    if (failure != nullptr) std::rethrow_exception(failure);
    engine.WaitForAll();
  }
  out.ran_at_capture = ran_at_capture.load(std::memory_order_relaxed);
  out.bad_replay = bad_replay.load(std::memory_order_relaxed);
  OrderOracle::Result order = oracle.total_order();
  out.order_failure = std::move(order.failure);
  out.order = std::move(order.order);
  return out;
}

TEST_CASE("replays equal serial execution of the captured ops, among pushes from one and two threads",
          "[graph][randomized]") {
  const std::size_t other_ops = sized(600, 200, 300);
  const auto seeds = test_seeds();
  std::vector<ExecutorFactory> factories = cpu_factories();
  factories.push_back(host_stream_factory());
  for (const auto& factory : factories) {
    DYNAMIC_SECTION(factory.name) {
      for (int mode = 0; mode < 4; ++mode) {  // 1 and 2 pushers; random graphs, then chain-heavy ones
        const int pushers = 1 + mode % 2;
        const bool chains = mode >= 2;
        for (std::uint64_t seed : seeds) {
          std::ostringstream where;
          where << factory.name << ", " << pushers << " pushers, " << (chains ? "chain-heavy" : "random")
                << " graph, DEPENGINE_TEST_SEED=" << seed;
          INFO(where.str());
          Watchdog watchdog("graph oracle");
          watchdog.note(where.str());
          const GraphWorkload w =
              generate_graph_workload(seed, pushers, 32, 20, other_ops, chains ? random_chain_op : random_op);
          const GraphOutcome outcome = run_graph_workload(factory, w, seed);
          CHECK(outcome.graph_size == w.graph.size());
          CHECK(outcome.ran_at_capture == 0);
          CHECK(outcome.bad_replay == 0);
          CHECK(std::count(outcome.runs.begin(), outcome.runs.end(), 1U) ==
                static_cast<std::ptrdiff_t>(outcome.runs.size()));
          REQUIRE(outcome.order_failure.empty());

          // Serial execution in the order the engine chose.
          std::vector<std::uint64_t> values = initial_values(seed, kOracleVars);
          std::vector<std::uint64_t> folds(outcome.folds.size(), 0);
          for (std::size_t id : outcome.order) folds[id] = run_op(*w.spec_of[id], id, w.replay_of[id], values);
          CHECK(outcome.values == values);
          CHECK(outcome.folds == folds);

          if (pushers == 1) {  // and, independently of the oracle, serial execution in program order
            std::vector<std::uint64_t> serial = initial_values(seed, kOracleVars);
            std::vector<std::uint64_t> serial_folds;
            for (std::size_t id = 0; id < w.spec_of.size(); ++id) {
              serial_folds.push_back(run_op(*w.spec_of[id], id, w.replay_of[id], serial));
            }
            CHECK(outcome.values == serial);
            CHECK(outcome.folds == serial_folds);
          }
        }
      }
    }
  }
}

// `threads` threads each replay a random graph of 40 ops (made by `make_op`) over 8 variables `replays` times in a row,
// without waits, under max_in_flight 64: a replay is admitted whole and counts as in flight until its last op
// completes, so two never fit at once and no more than 40 ops are ever in flight (admitted op by op, a second replay
// would fill the bound). Every op instance records what it observed; the replays are the oracle's pushers (each runs
// the graph's ops in captured order), a total order must explain the run and a serial execution in it must reproduce
// every value. With one thread, replay k is the k-th call, so serial execution in call order must match as well.
void check_replays(const ExecutorFactory& factory, int threads, std::size_t replays, std::uint64_t seed,
                   MakeOp make_op) {
  constexpr std::uint32_t kVars = 8;
  constexpr std::size_t kGraphOps = 40;
  constexpr std::size_t kBound = 64;
  static_assert(2 * kGraphOps > kBound && kGraphOps <= kBound);
  std::mt19937_64 rng(seed);
  std::vector<OpSpec> ops;
  for (std::size_t i = 0; i < kGraphOps; ++i) ops.push_back(make_op(rng, kVars));
  const std::size_t total = replays * static_cast<std::size_t>(threads);
  const std::vector<std::vector<OpSpec>> programs(total, ops);  // one per replay
  OrderOracle oracle(kVars, programs);
  std::vector<std::uint64_t> values = initial_values(seed, kVars);
  std::vector<std::uint64_t> folds(oracle.size(), 0);
  std::vector<std::uint32_t> runs(oracle.size(), 0);
  std::atomic<std::size_t> peak{0}, bad_replay{0};
  {
    Engine engine(factory.options(kBound));
    std::vector<Var> vars;
    for (std::uint32_t v = 0; v < kVars; ++v) vars.push_back(engine.NewVariable());
    Graph graph = engine.Capture([&] {
      for (std::size_t i = 0; i < ops.size(); ++i) {
        engine.Push(
            [&, i](const RunContext& ctx) {
              raise(peak, engine.InFlight());
              if (ctx.replay < 0 || static_cast<std::size_t>(ctx.replay) >= total) {
                bad_replay.fetch_add(1, std::memory_order_relaxed);
                return;
              }
              const std::size_t id = oracle.id(static_cast<std::size_t>(ctx.replay), i);
              oracle.observe(id);
              ++runs[id];
              folds[id] = run_op(ops[i], id, ctx.replay, values);
            },
            vars_of(ops[i].reads, vars), vars_of(ops[i].mutates, vars));
      }
    });
    Rendezvous start(threads);
    auto replayer = [&] {
      (void)start.arrive_and_wait();
      for (std::size_t k = 0; k < replays; ++k) {
        engine.Replay(graph);
        raise(peak, engine.InFlight());
      }
    };
    std::vector<std::thread> others;
    for (int t = 1; t < threads; ++t) others.emplace_back(replayer);
    replayer();
    for (auto& thread : others) thread.join();
    engine.WaitForAll();
    CHECK(engine.InFlight() == 0);
  }
  CHECK(peak.load(std::memory_order_relaxed) <= kGraphOps);
  CHECK(bad_replay.load(std::memory_order_relaxed) == 0);
  CHECK(std::count(runs.begin(), runs.end(), 1U) == static_cast<std::ptrdiff_t>(runs.size()));
  const OrderOracle::Result order = oracle.total_order();
  INFO(order.failure);
  REQUIRE(order.failure.empty());
  std::vector<std::uint64_t> serial = initial_values(seed, kVars);
  std::vector<std::uint64_t> serial_folds(oracle.size(), 0);
  for (std::size_t id : order.order) {
    const std::size_t k = id / kGraphOps;
    serial_folds[id] = run_op(ops[id % kGraphOps], id, static_cast<std::int64_t>(k), serial);
  }
  CHECK(values == serial);
  CHECK(folds == serial_folds);
  if (threads == 1) {
    std::vector<std::uint64_t> in_order = initial_values(seed, kVars);
    std::vector<std::uint64_t> in_order_folds(oracle.size(), 0);
    for (std::size_t id = 0; id < oracle.size(); ++id) {
      in_order_folds[id] = run_op(ops[id % kGraphOps], id, static_cast<std::int64_t>(id / kGraphOps), in_order);
    }
    CHECK(values == in_order);
    CHECK(folds == in_order_folds);
  }
}

TEST_CASE("100 replays in a row under a small bound, from one thread and from two at once, complete exactly",
          "[graph][back_pressure]") {
  const std::size_t replays = sized(100, 40, 100);
  for (const auto& factory : cpu_factories()) {
    DYNAMIC_SECTION(factory.name) {
      for (int mode = 0; mode < 4; ++mode) {  // 1 and 2 replaying threads; random graphs, then chain-heavy ones
        const int threads = 1 + mode % 2;
        const bool chains = mode >= 2;
        for (std::uint64_t seed : test_seeds()) {
          std::ostringstream where;
          where << factory.name << ", " << threads << " replaying threads, " << (chains ? "chain-heavy" : "random")
                << " graph, DEPENGINE_TEST_SEED=" << seed;
          INFO(where.str());
          Watchdog watchdog("graph back-pressure");
          watchdog.note(where.str());
          check_replays(factory, threads, replays, seed, chains ? random_chain_op : random_op);
        }
      }
    }
  }
}

}  // namespace
}  // namespace depengine::test
