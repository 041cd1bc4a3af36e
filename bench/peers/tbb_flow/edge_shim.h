// Turns read/mutate lists into the edges of a static task graph, so that a graph library (oneTBB flow graph) runs a
// workload in the order depengine's contract gives it: consecutive reads of a variable run together, a mutation waits
// for every earlier use and holds back every later one.
//
// Per variable it keeps the last writer and the readers since that write. An op that reads V waits for V's last
// writer; an op that mutates V waits for the readers since the last write, or for the last writer when there are
// none. (The writer is left out when readers exist: each of them already waits for it, so the edge would be
// redundant; that is the transitive reduction, which only helps the graph.) Lists follow depengine's rules: a
// variable named twice counts once, one both read and mutated counts as mutated.
//
// Thread safety: none (one builder thread). Cost: O(|reads| + |mutates| + readers released) per op, plus a sort of the
// op's predecessors; allocates as the per-variable reader lists grow (their capacity is kept).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace depengine::bench::peers {

class EdgeShim {
 public:
  explicit EdgeShim(std::uint32_t num_vars) : last_writer_(num_vars, kNone), readers_(num_vars) {}

  // Adds op `op` (ops must be added in push order, numbered upwards) and returns the earlier ops it must wait for:
  // ascending, without duplicates. The span is valid until the next call.
  std::span<const std::uint32_t> add(std::uint32_t op, std::span<const std::uint32_t> reads,
                                     std::span<const std::uint32_t> mutates);

 private:
  static constexpr std::uint32_t kNone = UINT32_MAX;
  std::vector<std::uint32_t> last_writer_;           // per variable: the op that last mutated it, or kNone
  std::vector<std::vector<std::uint32_t>> readers_;  // per variable: the ops that read it since that mutation
  std::vector<std::uint32_t> preds_;                 // the answer of the last add()
};

}  // namespace depengine::bench::peers
