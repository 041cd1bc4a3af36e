#include "bench/common/engine_run.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace depengine::bench {

namespace {

double ns_between(std::chrono::steady_clock::time_point start, std::chrono::steady_clock::time_point stop,
                  std::size_t ops) {
  return std::chrono::duration<double, std::nano>(stop - start).count() / static_cast<double>(ops);
}

// Pushes ops [0, count) of `workload` over `vars`, op i's body body_of(i). With kSample, also samples
// Engine::InFlight() every PushTiming::kSampleEvery pushes and keeps the largest value in `peak`; without, the loop is
// the push alone (count_instructions.sh counts it, with the empty bodies of kEmpty).
template <bool kSample = false, class BodyOf>
void push_ops(Engine& engine, const Workload& workload, const std::vector<Var>& vars, std::size_t count, BodyOf body_of,
              std::size_t* peak = nullptr) {
  std::vector<Var> reads(workload.max_list()), mutates(workload.max_list());
  for (std::size_t op = 0; op < count; ++op) {
    std::size_t r = 0, m = 0;
    for (const std::uint32_t v : workload.reads(op)) reads[r++] = vars[v];
    for (const std::uint32_t v : workload.mutates(op)) mutates[m++] = vars[v];
    engine.Push(body_of(op), std::span<const Var>(reads.data(), r), std::span<const Var>(mutates.data(), m));
    if constexpr (kSample) {
      if (op % PushTiming::kSampleEvery == 0) *peak = std::max(*peak, engine.InFlight());
    }
  }
}

constexpr auto kEmpty = [](std::size_t /*op*/) { return [] {}; };

// run_workload, and with kSample run_workload_timed.
template <bool kSample>
PushTiming timed_run(Engine& engine, const Workload& workload, std::string_view system) {
  const bool computes = workload.body_iterations() > 0;
  const std::vector<Var> vars = make_vars(engine, workload);
  std::vector<Cell> cells(computes ? workload.num_vars() : 0);
  PushTiming timing;
  const auto start = std::chrono::steady_clock::now();
  if (!computes) {
    push_ops<kSample>(engine, workload, vars, workload.size(), kEmpty, &timing.peak_in_flight);
  } else {
    const auto computing = [&workload, &cells](std::size_t op) {
      return [&workload, &cells, op] { compute(workload, op, cells); };
    };
    push_ops<kSample>(engine, workload, vars, workload.size(), computing, &timing.peak_in_flight);
  }
  const auto pushed = std::chrono::steady_clock::now();
  engine.WaitForAll();
  const auto stop = std::chrono::steady_clock::now();
  delete_vars(engine, vars);
  if (computes) check_against_serial(system, workload, cells);
  timing.ns_per_op = ns_between(start, stop, workload.size());
  timing.push_ns_per_op = ns_between(start, pushed, workload.size());
  return timing;
}

}  // namespace

std::vector<Var> make_vars(Engine& engine, const Workload& workload) {
  std::vector<Var> vars(workload.num_vars());
  for (Var& var : vars) var = engine.NewVariable();
  return vars;
}

void delete_vars(Engine& engine, const std::vector<Var>& vars) {
  for (const Var& var : vars) engine.DeleteVariable(var);
  engine.WaitForAll();
}

Graph capture_step(Engine& engine, const Workload& workload, const std::vector<Var>& vars, std::size_t step) {
  return engine.Capture([&] { push_ops(engine, workload, vars, step, kEmpty); });
}

double run_workload(Engine& engine, const Workload& workload, std::string_view system) {
  return timed_run<false>(engine, workload, system).ns_per_op;
}

PushTiming run_workload_timed(Engine& engine, const Workload& workload, std::string_view system) {
  return timed_run<true>(engine, workload, system);
}

ReplayTiming replay_workload(Engine& engine, const Workload& workload) {
  if (workload.body_iterations() > 0) {
    throw std::invalid_argument("replay_workload: " + workload.name() + " computes; only empty bodies are replayed");
  }
  const std::vector<Var> vars = make_vars(engine, workload);
  const std::size_t step = std::min(kReplayStep, workload.size());
  const std::size_t replays = workload.size() / step;
  ReplayTiming timing;
  {
    const auto start = std::chrono::steady_clock::now();
    const Graph graph = capture_step(engine, workload, vars, step);
    const auto captured = std::chrono::steady_clock::now();
    for (std::size_t k = 0; k < replays; ++k) engine.Replay(graph);
    engine.WaitForAll();
    const auto stop = std::chrono::steady_clock::now();
    timing.capture_ns = ns_between(start, captured, step);
    timing.run_ns = ns_between(captured, stop, replays * step);
  }
  delete_vars(engine, vars);
  return timing;
}

}  // namespace depengine::bench
