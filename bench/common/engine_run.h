// How every depengine benchmark drives the engine through a workload (bench/common/workloads.h), so that
// bench_engine and the depengine peer of bench/peers measure exactly the same thing.
//
// Thread safety: call from one thread per engine. Allocation: the variable handles and two list buffers per call,
// before the timed part.
#pragma once

#include <cstdint>

#include <depengine/engine/engine.h>

#include "bench/common/workloads.h"

namespace depengine::bench {

// Makes fresh variables, pushes every op of `workload` from the calling thread with an empty body and its read and
// mutate lists, and returns the ns per op from the first Push to the return of WaitForAll. Deletes the variables
// afterwards (untimed).
double run_workload(Engine& engine, const Workload& workload);

// The work of an op's body when a benchmark gives it some: `iterations` steps of a dependent integer recurrence (a
// multiply and an add each, about 4 cycles a step, touching no memory), started from `seed`. kMicrosecondBody steps
// take about 1 µs on this project's machines; bench_engine times the bodies alone in each run (run_serial).
[[nodiscard]] std::uint64_t arithmetic_body(std::uint32_t iterations, std::uint64_t seed) noexcept;
inline constexpr std::uint32_t kMicrosecondBody = 768;

// run_workload, also telling which side bounds the run: the pushing thread, or the threads that run the ops.
struct PushTiming {
  double ns_per_op = 0;       // as run_workload's
  double push_ns_per_op = 0;  // from the first Push to the return of the last
  // The most ops in flight (Engine::InFlight) seen at one push in every kSampleEvery, a cost of one read of the
  // engine's counters per kSampleEvery ops. Near EngineOptions::max_in_flight, the pusher ran ahead until the bound
  // held it back: the run is bound by the threads that run the ops. Small, with push_ns_per_op close to ns_per_op:
  // they kept up, and the run is bound by the pusher.
  std::size_t peak_in_flight = 0;
  static constexpr std::size_t kSampleEvery = 1024;
};
// With `body_iterations` > 0, the ops compute: each variable holds a number (on a cache line of its own), and op i
// stores arithmetic_body(body_iterations, the sum of its reads' numbers) into the variables it mutates, as MXNet's
// RandSum does with real arrays. Its body then reads what its inputs' writers stored, so a run is a check of the order
// as well as a measurement: timed_run throws std::logic_error if the final numbers differ from a serial run's.
PushTiming run_workload_timed(Engine& engine, const Workload& workload, std::uint32_t body_iterations = 0);

// The same computing bodies run in push order on the calling thread, without an engine: ns per op, the floor of a run
// of run_workload_timed with `body_iterations`.
double run_serial(const Workload& workload, std::uint32_t body_iterations);

// A step of kReplayStep ops replayed, as a training loop replays its step (engine/graph.h).
inline constexpr std::size_t kReplayStep = 10'000;
struct ReplayTiming {
  double capture_ns = 0;  // per op of the step: Capture of the step
  double run_ns = 0;      // per op run: from the first Replay to the return of WaitForAll
};

// Makes fresh variables, captures the first min(kReplayStep, size) ops of `workload` (as run_workload pushes them) into
// a graph, then replays it size / step times from the calling thread and waits for all. Deletes the variables
// afterwards (untimed).
ReplayTiming replay_workload(Engine& engine, const Workload& workload);

}  // namespace depengine::bench
