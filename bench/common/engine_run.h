// How every depengine benchmark drives the engine through a workload (bench/common/workloads.h), so that
// bench_engine and the depengine peer of bench/peers measure exactly the same thing.
//
// Thread safety: call from one thread per engine. Allocation: the variable handles and two list buffers per call,
// before the timed part.
#pragma once

#include "bench/common/workloads.h"
#include "engine/engine.h"

namespace depengine::bench {

// Makes fresh variables, pushes every op of `workload` from the calling thread with an empty body and its read and
// mutate lists, and returns the ns per op from the first Push to the return of WaitForAll. Deletes the variables
// afterwards (untimed).
double run_workload(Engine& engine, const Workload& workload);

}  // namespace depengine::bench
