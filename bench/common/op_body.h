// The work in an op's body, for the workloads that have some (Workload::body_iterations() > 0, "randsum-work"),
// defined once so that bench_engine and every system of bench/peers run the same bodies: each variable holds a number
// in a Cell (a cache line of its own), and op i stores arithmetic_body(body_iterations, i + the sum of its reads'
// numbers) into the cells of the variables it mutates, as MXNet's RandSum does with real arrays. An op's body thus
// reads what its inputs' last writers stored, so the final numbers of a run equal those of a serial run only if every
// op ran after the ops it depends on: check_against_serial() turns a run into a check of the order.
//
// Thread safety: compute() may run on any thread, concurrently with other ops' compute() as long as no two of them
// touch one variable with one of them mutating it (what every system's dependence tracking guarantees). The other
// functions: one thread. Allocation: check_against_serial() and run_serial() allocate num_vars cells; compute() none.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "bench/common/workloads.h"

namespace depengine::bench {

// `iterations` steps of a dependent integer recurrence (a multiply and an add each, about 4 cycles a step, touching no
// memory), started from `seed`. kMicrosecondBody steps take about 1 µs on this project's machines (0.85 µs measured).
[[nodiscard]] std::uint64_t arithmetic_body(std::uint32_t iterations, std::uint64_t seed) noexcept;
inline constexpr std::uint32_t kMicrosecondBody = 768;

// A variable's number: a line of its own, so that two threads writing two variables do not share one.
struct alignas(64) Cell {
  std::uint64_t value = 0;
};
static_assert(sizeof(Cell) == 64, "one cell per cache line");

// Op `op` of `workload`: arithmetic_body(workload.body_iterations(), op + the sum of its reads' cells), stored into
// its mutates' cells. `cells` has workload.num_vars() entries, zero before the first op.
void compute(const Workload& workload, std::size_t op, std::span<Cell> cells) noexcept;

// Runs every op of `workload` in push order on the calling thread, into `cells` (zeroed by the caller).
void compute_all(const Workload& workload, std::span<Cell> cells) noexcept;

// Throws std::logic_error naming `system`, the workload and the first variable whose number in `cells` (after a run
// of `system`) differs from a serial run's: an op ran before one it depends on, or not at all. Throws
// std::invalid_argument if `cells` does not have workload.num_vars() entries.
void check_against_serial(std::string_view system, const Workload& workload, std::span<const Cell> cells);

// compute_all into fresh cells, timed: ns per op, the floor of any run of `workload`'s bodies on one thread.
double run_serial(const Workload& workload);

}  // namespace depengine::bench
