#include "bench/common/engine_run.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace depengine::bench {

namespace {

double ns_between(std::chrono::steady_clock::time_point start, std::chrono::steady_clock::time_point stop,
                  std::size_t ops) {
  return std::chrono::duration<double, std::nano>(stop - start).count() / static_cast<double>(ops);
}

// A variable's number, when the ops compute (run_workload_timed): a line of its own, so that two workers writing two
// variables do not share one.
struct alignas(64) Cell {
  std::uint64_t value = 0;
};

// What op `op` of `workload` computes: arithmetic_body over the sum of its reads' numbers, stored into its mutates'.
void compute(const Workload& workload, std::size_t op, std::vector<Cell>& cells, std::uint32_t iterations) noexcept {
  std::uint64_t seed = op;
  for (const std::uint32_t v : workload.reads(op)) seed += cells[v].value;
  const std::uint64_t value = arithmetic_body(iterations, seed);
  for (const std::uint32_t v : workload.mutates(op)) cells[v].value = value;
}

void compute_all(const Workload& workload, std::vector<Cell>& cells, std::uint32_t iterations) noexcept {
  for (std::size_t op = 0; op < workload.size(); ++op) compute(workload, op, cells, iterations);
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

std::vector<Var> make_vars(Engine& engine, const Workload& workload) {
  std::vector<Var> vars(workload.num_vars());
  for (Var& var : vars) var = engine.NewVariable();
  return vars;
}

void delete_vars(Engine& engine, const std::vector<Var>& vars) {
  for (const Var& var : vars) engine.DeleteVariable(var);
  engine.WaitForAll();
}

// run_workload, and with kSample run_workload_timed.
template <bool kSample>
PushTiming timed_run(Engine& engine, const Workload& workload, std::uint32_t body_iterations = 0) {
  const std::vector<Var> vars = make_vars(engine, workload);
  std::vector<Cell> cells(body_iterations > 0 ? workload.num_vars() : 0);
  PushTiming timing;
  const auto start = std::chrono::steady_clock::now();
  if (body_iterations == 0) {
    push_ops<kSample>(engine, workload, vars, workload.size(), kEmpty, &timing.peak_in_flight);
  } else {
    const auto computing = [&workload, &cells, body_iterations](std::size_t op) {
      return [&workload, &cells, body_iterations, op] { compute(workload, op, cells, body_iterations); };
    };
    push_ops<kSample>(engine, workload, vars, workload.size(), computing, &timing.peak_in_flight);
  }
  const auto pushed = std::chrono::steady_clock::now();
  engine.WaitForAll();
  const auto stop = std::chrono::steady_clock::now();
  delete_vars(engine, vars);
  if (body_iterations > 0) {
    std::vector<Cell> serial(workload.num_vars());
    compute_all(workload, serial, body_iterations);
    for (std::size_t v = 0; v < serial.size(); ++v) {
      if (cells[v].value != serial[v].value) {
        throw std::logic_error("run_workload_timed: " + workload.name() + " computed variable " + std::to_string(v) +
                               " differently from a serial run: an op ran out of order");
      }
    }
  }
  timing.ns_per_op = ns_between(start, stop, workload.size());
  timing.push_ns_per_op = ns_between(start, pushed, workload.size());
  return timing;
}

}  // namespace

std::uint64_t arithmetic_body(std::uint32_t iterations, std::uint64_t seed) noexcept {
  // Knuth's MMIX linear congruential step: each depends on the one before, so the loop cannot be vectorised or folded.
  std::uint64_t x = seed;
  for (std::uint32_t i = 0; i < iterations; ++i) x = x * 6364136223846793005ULL + 1442695040888963407ULL;
  return x;
}

double run_workload(Engine& engine, const Workload& workload) { return timed_run<false>(engine, workload).ns_per_op; }

PushTiming run_workload_timed(Engine& engine, const Workload& workload, std::uint32_t body_iterations) {
  return timed_run<true>(engine, workload, body_iterations);
}

double run_serial(const Workload& workload, std::uint32_t body_iterations) {
  std::vector<Cell> cells(workload.num_vars());
  const auto start = std::chrono::steady_clock::now();
  compute_all(workload, cells, body_iterations);
  // The numbers escape before the clock stops (Google Benchmark's DoNotOptimize): the compiler may neither drop the
  // loop that nothing reads nor finish it after the clock.
  asm volatile("" : : "r"(cells.data()) : "memory");
  const auto stop = std::chrono::steady_clock::now();
  return ns_between(start, stop, workload.size());
}

ReplayTiming replay_workload(Engine& engine, const Workload& workload) {
  const std::vector<Var> vars = make_vars(engine, workload);
  const std::size_t step = std::min(kReplayStep, workload.size());
  const std::size_t replays = workload.size() / step;
  ReplayTiming timing;
  {
    const auto start = std::chrono::steady_clock::now();
    const Graph graph = engine.Capture([&] { push_ops(engine, workload, vars, step, kEmpty); });
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
