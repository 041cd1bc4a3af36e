// The one-way latency of handing a cache line from one thread to another: the floor under any hand-off between
// threads, and the figure that multi-threaded results on an unfamiliar or shared machine should be read against (on a
// VM it varies with the host's placement of the virtual CPUs, by several times within minutes).
//
// Thread safety: starts one thread of its own and joins it; call from one thread at a time. Allocation: none but the
// thread. Cost: at most about `budget` (when the two threads share a CPU, each transfer waits for a time slice, so the
// measurement stops at the budget rather than run for minutes).
#pragma once

#include <chrono>
#include <cstddef>

namespace depengine::bench {

// Two threads pass a counter back and forth up to `transfers` times, or until `budget` has passed; returns ns per
// one-way transfer made.
double line_transfer_ns(std::size_t transfers, std::chrono::nanoseconds budget = std::chrono::milliseconds(100));

}  // namespace depengine::bench
