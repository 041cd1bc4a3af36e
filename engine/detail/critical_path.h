// CriticalPath: the chain of ops and waits that set the length of a traced window (TraceRecorder::critical_path;
// docs/pictures.md, "The critical path"; scripts/critical_path.py computes the same from a trace file).
//
// Start at the op whose slice ends last, and go back from each op to what held it last:
//   - its lane (the thread or stream it ran on), if the op that ran there before it ended after the op could run (its
//     last grant, or its holder's end, below): it queued behind that op, and the path goes on from that op;
//   - else the op that gave its last grant, if that is an op of the window (a variable's holder, a fence's raiser, a
//     stream op whose device work it waited for): it queued from the later of its grant and that op's end, and waited
//     from that end to its grant if the grant came later; the path goes on from that op. (A stream op releases its
//     successors at its issue, before its device work, but none of them can run before that work is done: a stream
//     successor runs behind it on the device, a CPU one is parked until it completes. So its end is what counts.)
//   - else (ready at its push, a push held at the in-flight bound, an op outside the window) it queued from its grant
//     and waited from its push: the path begins at that push, which is the program's doing, not the engine's.
// Each op is taken once, so a malformed input still ends.
//
// Thread safety: pure functions. Allocation: freely (a trace's slow path).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace depengine::detail {

// An op of the window as the path needs it. Times are ns on one clock; -1: not known.
struct PathOp {
  std::uint64_t op = 0;
  std::string label;          // "'forward' (op 12)"
  std::uint32_t lane_id = 0;  // where it ran (two lanes may have the same name: two pools' worker 0)
  std::string lane;           // its name: "threadpool worker 0"
  std::int64_t start = 0, end = 0;
  std::int64_t pushed = -1, ready = -1;
  std::uint64_t from = 0;  // the op that gave its last grant; 0: none in the window
  std::string reason;      // what it waited on, in words ("v3 held by 'load' (op 3)")
};

struct PathStep {
  enum class Kind : std::uint8_t { kPush, kWait, kQueued, kRun };
  Kind kind;
  std::int64_t start, end;
  std::uint64_t op;
  std::string text;
};

// The critical path of `ops`, first step first; empty when `ops` is.
[[nodiscard]] std::vector<PathStep> critical_path(std::span<const PathOp> ops);

// The path in words: a headline with its length and what it is made of, then a line per step ("  12.345  0.500
// 'forward' (op 12) ran on threadpool worker 0"), times in ms. `traced`: the ops of the window, for the headline.
[[nodiscard]] std::string critical_path_text(std::span<const PathStep> path, std::size_t traced);

}  // namespace depengine::detail
