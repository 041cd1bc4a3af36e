// A randomized oracle in the spirit of MXNet's RandSumExpr test: N variables, M ops that each read a random set of
// variables and mutate one or more, with bodies that fold what they read into what they write (so any misordering
// changes the answer). Run with 1, 2 and 4 threads pushing at once, some ops asynchronous with their work and
// completion on other threads (on executors that take async ops), random priorities, on every executor and on mixes
// of two executors in one engine.
//
// One pusher: the values must equal serial execution in push order, bit for bit. Several pushers share variables,
// so the engine chooses the order: the ops record what they observed, order_oracle.h rebuilds the total order that
// implies (failing if none exists), and a serial replay in that order must reproduce every value bit for bit.
//
// Seeds: DEPENGINE_TEST_SEED reruns one; DEPENGINE_TEST_REPEAT sets how many fresh ones (default 3).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <depengine/engine/engine.h>

#include "test/engine/order_oracle.h"
#include "test/engine/test_support.h"
#include "test/executors/executor_factories.h"

namespace depengine::test {
namespace {

constexpr std::uint32_t kSharedVars = 8;
constexpr std::uint32_t kPrivateVars = 12;  // per pusher

struct Workload {
  std::uint32_t num_vars = 0;
  std::vector<std::vector<OpSpec>> programs;  // per pusher
};

// Pusher p's ops use the shared variables and its own private ones, so that some ops of different pushers are
// independent and others contend. takes_async[i]: whether executor i takes async ops (executor_factories.h); an op
// drawn async for one that does not is pushed with Push, the draws staying the same.
Workload generate(std::uint64_t seed, int pushers, std::size_t ops_per_pusher, const std::vector<bool>& takes_async) {
  const auto executors = static_cast<std::uint32_t>(takes_async.size());
  std::mt19937_64 rng(seed);
  Workload workload;
  workload.num_vars = kSharedVars + kPrivateVars * static_cast<std::uint32_t>(pushers);
  auto pick = [&](int pusher) -> std::uint32_t {
    if (rng() % 2 == 0) return static_cast<std::uint32_t>(rng() % kSharedVars);
    return kSharedVars + kPrivateVars * static_cast<std::uint32_t>(pusher) +
           static_cast<std::uint32_t>(rng() % kPrivateVars);
  };
  for (int p = 0; p < pushers; ++p) {
    auto& program = workload.programs.emplace_back();
    for (std::size_t i = 0; i < ops_per_pusher; ++i) {
      OpSpec op;
      // Mostly small lists; now and then more variables than a record holds inline.
      const std::size_t reads = rng() % 16 == 0 ? 6 + rng() % 8 : rng() % 5;
      const std::size_t mutates = 1 + rng() % 3;
      for (std::size_t r = 0; r < reads; ++r) op.reads.push_back(pick(p));
      for (std::size_t m = 0; m < mutates; ++m) op.mutates.push_back(pick(p));
      if (rng() % 8 == 0 && !op.reads.empty()) op.reads.push_back(op.reads.front());   // named twice
      if (rng() % 8 == 0 && !op.reads.empty()) op.mutates.push_back(op.reads.back());  // read and mutated
      op.async = rng() % 4 == 0;
      op.priority = rng() % 4 == 0 ? static_cast<std::int32_t>(rng() % 5) - 2 : 0;
      op.executor = static_cast<std::uint32_t>(rng() % executors);
      op.async = op.async && takes_async[op.executor];
      program.push_back(std::move(op));
    }
  }
  return workload;
}

// The body of op `id`: folds what it reads, in list order, into every variable it mutates. Returns the fold, which
// the test keeps per op.
std::uint64_t run_body(const OpSpec& op, std::uint64_t id, std::vector<std::uint64_t>& values) {
  std::uint64_t h = mix(id, 0x5eed);
  for (std::uint32_t var : op.reads) h = mix(h, values[var]);
  for (std::uint32_t var : op.mutates) h = mix(h, values[var]);
  for (std::size_t j = 0; j < op.mutates.size(); ++j) values[op.mutates[j]] = mix(h, values[op.mutates[j]] + j);
  return h;
}

std::vector<std::uint64_t> initial_values(std::uint64_t seed, std::uint32_t num_vars) {
  std::vector<std::uint64_t> values(num_vars);
  for (std::uint32_t v = 0; v < num_vars; ++v) values[v] = mix(seed, v);
  return values;
}

struct Outcome {
  std::vector<std::uint64_t> values;  // final value of every variable
  std::vector<std::uint64_t> folds;   // per op id
  std::string order_failure;          // from the oracle; empty if a total order explains the run
  std::vector<std::size_t> order;
};

// Pushes the workload from one thread per program, all at once, and waits for everything.
Outcome run_on_engine(const std::function<EngineOptions()>& make_options, const Workload& workload,
                      std::uint64_t seed) {
  Outcome outcome;
  outcome.values = initial_values(seed, workload.num_vars);
  OrderOracle oracle(workload.num_vars, workload.programs);
  outcome.folds.assign(oracle.size(), 0);
  Completer completer(2);  // outlives the engine
  {
    Engine engine(make_options());
    std::vector<Var> vars;
    for (std::uint32_t v = 0; v < workload.num_vars; ++v) vars.push_back(engine.NewVariable());
    auto work = [&outcome, &oracle](const OpSpec* op, std::size_t id) {
      oracle.observe(id);
      outcome.folds[id] = run_body(*op, id, outcome.values);
    };
    Rendezvous start(static_cast<int>(workload.programs.size()));
    auto pusher = [&](std::size_t p) {
      (void)start.arrive_and_wait();
      std::vector<Var> reads, mutates;
      for (std::size_t k = 0; k < workload.programs[p].size(); ++k) {
        const OpSpec* op = &workload.programs[p][k];
        const std::size_t id = oracle.id(p, k);
        reads.clear();
        mutates.clear();
        for (std::uint32_t var : op->reads) reads.push_back(vars[var]);
        for (std::uint32_t var : op->mutates) mutates.push_back(vars[var]);
        PushOptions options;
        options.priority = op->priority;
        options.context.executor = op->executor;
        if (op->async) {
          engine.PushAsync(
              [&completer, &work, op, id](Completion done) {
                completer.post([&work, op, id, done] {
                  work(op, id);
                  done();
                });
              },
              reads, mutates, options);
        } else {
          engine.Push([&work, op, id] { work(op, id); }, reads, mutates, options);
        }
      }
    };
    std::vector<std::thread> others;
    for (std::size_t p = 1; p < workload.programs.size(); ++p) others.emplace_back(pusher, p);
    pusher(0);
    for (auto& thread : others) thread.join();
    engine.WaitForAll();
  }
  completer.stop();
  OrderOracle::Result order = oracle.total_order();
  outcome.order_failure = std::move(order.failure);
  outcome.order = std::move(order.order);
  return outcome;
}

void check_workload(const std::string& config, const std::function<EngineOptions()>& make_options,
                    const std::vector<bool>& takes_async, int pushers, std::uint64_t seed, std::size_t ops_per_pusher) {
  std::ostringstream where;
  where << config << ", " << pushers << " pushers, DEPENGINE_TEST_SEED=" << seed;
  INFO(where.str());
  Watchdog watchdog("RandSum", hang_limit());
  watchdog.note(where.str());
  const Workload workload = generate(seed, pushers, ops_per_pusher, takes_async);
  const Outcome outcome = run_on_engine(make_options, workload, seed);
  REQUIRE(outcome.order_failure.empty());

  // Serial replay in the order the engine chose.
  std::vector<std::uint64_t> values = initial_values(seed, workload.num_vars);
  std::vector<std::uint64_t> folds(outcome.folds.size(), 0);
  std::vector<const OpSpec*> by_id;
  for (const auto& program : workload.programs) {
    for (const OpSpec& op : program) by_id.push_back(&op);
  }
  for (std::size_t id : outcome.order) folds[id] = run_body(*by_id[id], id, values);
  CHECK(outcome.values == values);
  CHECK(outcome.folds == folds);

  if (pushers == 1) {  // and, independently of the oracle, serial execution in push order
    std::vector<std::uint64_t> serial = initial_values(seed, workload.num_vars);
    std::vector<std::uint64_t> serial_folds;
    for (std::size_t id = 0; id < by_id.size(); ++id) serial_folds.push_back(run_body(*by_id[id], id, serial));
    CHECK(outcome.values == serial);
    CHECK(outcome.folds == serial_folds);
  }
}

TEST_CASE("RandSum: results equal a serial execution, with 1, 2 and 4 pushers", "[engine][randsum]") {
  const std::size_t total_ops = sized(8000, 500, 2000);
  const auto seeds = test_seeds();
  for (const auto& factory : oracle_factories()) {
    DYNAMIC_SECTION(factory.name) {
      for (int pushers : {1, 2, 4}) {
        for (std::uint64_t seed : seeds) {
          check_workload(
              factory.name, [&factory] { return factory.options(); }, {factory.takes_async}, pushers, seed,
              total_ops / static_cast<std::size_t>(pushers));
        }
      }
    }
  }
}

TEST_CASE("RandSum on a mix of executors in one engine", "[engine][randsum][mixed]") {
  const std::size_t total_ops = sized(8000, 500, 2000);
  const auto seeds = test_seeds();
  // The last mix makes stream ops and CPU ops depend on each other both ways (two-level readiness).
  const std::vector<std::vector<ExecutorFactory>> mixes{{threadpool_factory(2), inline_factory()},
                                                        {inline_factory(), threadpool_factory(1)},
                                                        {threadpool_factory(2), host_stream_factory()}};
  for (const auto& mix_of : mixes) {
    const std::string name = mix_of[0].name + "+" + mix_of[1].name;
    // Fewer ops where they cost more (executor_factories.h, op_cost): CPU ops there wait for stream ops' completions.
    const std::size_t mix_ops = total_ops / std::max(mix_of[0].op_cost, mix_of[1].op_cost);
    DYNAMIC_SECTION(name) {
      for (int pushers : {1, 2, 4}) {
        for (std::uint64_t seed : seeds) {
          check_workload(
              name, [&mix_of] { return mixed_options(mix_of); }, {mix_of[0].takes_async, mix_of[1].takes_async},
              pushers, seed, mix_ops / static_cast<std::size_t>(pushers));
        }
      }
    }
  }
}

}  // namespace
}  // namespace depengine::test
