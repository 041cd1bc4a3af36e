// How every depengine benchmark drives the engine through a workload (bench/common/workloads.h), so that
// bench_engine and the depengine peer of bench/peers measure exactly the same thing.
//
// Thread safety: call from one thread per engine. Allocation: the variable handles and two list buffers per call,
// before the timed part.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include <depengine/engine/engine.h>

#include "bench/common/op_body.h"
#include "bench/common/workloads.h"

namespace depengine::bench {

// Makes fresh variables, pushes every op of `workload` from the calling thread with its read and mutate lists, and
// returns the ns per op from the first Push to the return of WaitForAll. Deletes the variables afterwards (untimed).
// The bodies are empty, or, when workload.body_iterations() > 0, compute (common/op_body.h: each variable's number in
// a Cell, op i's body compute(workload, i, cells)); the run is then also a check of the order: the final numbers are
// compared with a serial run's (check_against_serial, untimed), which throws std::logic_error naming `system` and the
// variable.
double run_workload(Engine& engine, const Workload& workload, std::string_view system = "depengine");

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
PushTiming run_workload_timed(Engine& engine, const Workload& workload, std::string_view system = "depengine");

// A step of kReplayStep ops replayed, as a training loop replays its step (engine/graph.h).
inline constexpr std::size_t kReplayStep = 10'000;
struct ReplayTiming {
  double capture_ns = 0;  // per op of the step: Capture of the step
  double run_ns = 0;      // per op run: from the first Replay to the return of WaitForAll
};

// Fresh variables for `workload`, and their deletion (waiting for all).
std::vector<Var> make_vars(Engine& engine, const Workload& workload);
void delete_vars(Engine& engine, const std::vector<Var>& vars);

// The graph of `workload`'s first `step` ops, with empty bodies, captured over `vars` (made by make_vars): the step
// replay_workload replays.
Graph capture_step(Engine& engine, const Workload& workload, const std::vector<Var>& vars, std::size_t step);

// Makes fresh variables, captures the first min(kReplayStep, size) ops of `workload` (as run_workload pushes them, with
// empty bodies) into a graph, then replays it size / step times from the calling thread and waits for all. Deletes the
// variables afterwards (untimed). Throws std::invalid_argument for a workload whose bodies compute: a replay reruns a
// step, which a serial run of the workload's ops would not check.
ReplayTiming replay_workload(Engine& engine, const Workload& workload);

}  // namespace depengine::bench
