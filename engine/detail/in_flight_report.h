// InFlightReport: what the ops in flight wait for, in words, and a wait cycle among them if there is one
// (Engine::InFlightReport, and the stall watch that prints it when nothing completes for a while).
//
// An op appears through the variable queues it waits in (var_queue.h): for each variable with ops waiting, who holds
// it (a granted write, or reads running) and who waits, in push order; for each op seen, the wait fences it has not
// reached yet. From those it draws "A waits for B" edges — a waiter on a variable waits for the entry before it, an
// op on an unreached fence for the ops seen that signal that fence — and names the first cycle it finds: the
// deadlock that submit-before-wait makes easy to write (an op waits on a fence whose signaller queued behind it).
// An op that runs (its function started and has not returned: OpNode::run_stamp) is marked as running, with how long
// by the engine's run clock (run_clock.h): busy, not stuck. Running ops that only read or use no variable, ops that
// wait on fences alone, in no variable's queue, and replayed ops are counted but not named. Pushes waiting at
// EngineOptions::max_in_flight are added by the engine (add_blocked).
//
// Exact when the engine has stalled (nothing moves); otherwise each variable is a snapshot of its own moment. Reads
// every variable under its lock, one at a time, copying what it needs of the ops there (which cannot retire while
// they wait in that queue), and never follows an op pointer after that lock is released.
// Thread safety: build() from any thread, concurrently with pushes and completions. Allocation: the slow path; it
// allocates freely.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include <depengine/engine/detail/in_flight.h>
#include <depengine/engine/detail/run_clock.h>
#include <depengine/engine/detail/var_table.h>

namespace depengine::detail {

// What a report found: its text, and each op it names with what the op was doing, for a trace written at a stall.
struct InFlightSnapshot {
  struct Op {
    std::string name;   // "op #3 'forward'", "Push of op 'load'"
    std::string state;  // "running for 2.0 s", "holds v3 (write); waits for fence (...)"
  };
  std::string text;
  std::vector<Op> ops;
  std::size_t running = 0;  // ops named as running
  // Some op named waits for what has not happened and may never: a fence not reached, a Completion not called, or
  // another op of a wait cycle. Not an op that waits behind running ops: those will move.
  bool stuck = false;
};

// A report of `vars`, for an engine with `in_flight` ops in flight, whose ops are stamped by `clock`.
[[nodiscard]] InFlightSnapshot build_in_flight_report(VarTable& vars, std::size_t in_flight, const RunClock& clock);

// The same wait-for graph as DOT, for Graphviz (Engine::InFlightReportDot): the ops named, an edge from each op to
// each op it waits for (labelled with the variable or fence), and the first wait cycle, if any, in red.
[[nodiscard]] std::string build_in_flight_dot(VarTable& vars, std::size_t in_flight, const RunClock& clock);

// Adds to `snapshot` a push or replay waiting at EngineOptions::max_in_flight (`max`), with `in_flight` ops in flight.
void add_blocked(InFlightSnapshot& snapshot, const InFlight::Blocked& blocked, std::size_t in_flight, std::size_t max);

// A duration in words, to the precision a report needs: "25 ms", "2.5 s", "63 s", "12 min".
[[nodiscard]] std::string duration_text(std::chrono::nanoseconds duration);

}  // namespace depengine::detail
