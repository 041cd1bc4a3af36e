// InFlightReport: what the ops in flight wait for, in words, and a wait cycle among them if there is one
// (Engine::InFlightReport, and the stall watch that prints it when nothing completes for a while).
//
// An op appears through the variable queues it waits in (var_queue.h): for each variable with ops waiting, who holds
// it (a granted write, or reads running) and who waits, in push order; for each op seen, the wait fences it has not
// reached yet. From those it draws "A waits for B" edges — a waiter on a variable waits for the entry before it, an
// op on an unreached fence for the ops seen that signal that fence — and names the first cycle it finds: the
// deadlock that submit-before-wait makes easy to write (an op waits on a fence whose signaller queued behind it).
// Running ops and ops that wait on fences alone, in no variable's queue, are counted but not named.
//
// Exact when the engine has stalled (nothing moves); otherwise each variable is a snapshot of its own moment. Reads
// every variable under its lock, one at a time, copying what it needs of the ops there (which cannot retire while
// they wait in that queue), and never follows an op pointer after that lock is released.
// Thread safety: build() from any thread, concurrently with pushes and completions. Allocation: the slow path; it
// allocates freely.
#pragma once

#include <cstddef>
#include <string>

#include <depengine/engine/detail/var_table.h>

namespace depengine::detail {

// A report of `vars`, for an engine with `in_flight` ops in flight.
[[nodiscard]] std::string build_in_flight_report(VarTable& vars, std::size_t in_flight);

}  // namespace depengine::detail
