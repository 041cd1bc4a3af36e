// The engine's vocabulary: the few types that the var queue, the executors, the memory pools and the engine all speak,
// in one header below them all (docs/architecture.md, "Layers").
//
//   - kMaxEngineAxes and WaitFrontier: an op's wait frontier, the (axis, epoch) signals of the ops it depends on that
//     may not have completed yet. Its capacity bounds the stream axes of one engine (the engine checks at
//     construction), so merging signals never overflows. A variable's signals (VarSignal), a block's death frontier
//     and a stream's knowledge have this capacity too.
//   - StreamKind: what a stream is for; an op's placement names one.
//
// Header-only; includes only frontier/.
#pragma once

#include <cstddef>
#include <cstdint>

#include <depengine/frontier/frontier.h>

namespace depengine {

// 32: eight devices with two compute streams and a copy stream each, and two collective channels (26 axes), fit one
// engine. Only engines with a stream executor pay for the capacity: a CPU-only engine never touches a wait frontier
// (op_record.h, var_queue.h), and frontiers copy and compare by their entries, not their capacity.
inline constexpr std::size_t kMaxEngineAxes = 32;
using WaitFrontier = RequirementFrontier<kMaxEngineAxes>;

// What a stream is for. Stream executors keep streams of the first two kinds per device, and collective channels per
// executor; an op names the kind it needs.
enum class StreamKind : std::uint8_t {
  kCompute = 0,     // kernels and host work
  kCopy = 1,        // transfers, so that they overlap compute
  kCollective = 2,  // a collective channel: work that spans the executor's devices, signalled on one collective axis
};

}  // namespace depengine
