#include "bench/peers/tbb_flow/edge_shim.h"

#include <algorithm>

namespace depengine::bench::peers {

std::span<const std::uint32_t> EdgeShim::add(std::uint32_t op, std::span<const std::uint32_t> reads,
                                             std::span<const std::uint32_t> mutates) {
  preds_.clear();
  auto is_mutated = [&](std::uint32_t v) { return std::find(mutates.begin(), mutates.end(), v) != mutates.end(); };
  for (const std::uint32_t v : mutates) {
    if (!readers_[v].empty()) {
      preds_.insert(preds_.end(), readers_[v].begin(), readers_[v].end());
    } else if (last_writer_[v] != kNone) {
      preds_.push_back(last_writer_[v]);
    }
  }
  for (const std::uint32_t v : reads) {
    if (last_writer_[v] != kNone && !is_mutated(v)) preds_.push_back(last_writer_[v]);
  }
  std::sort(preds_.begin(), preds_.end());
  preds_.erase(std::unique(preds_.begin(), preds_.end()), preds_.end());

  for (const std::uint32_t v : reads) {
    // A variable read twice by one op is one reader; ops arrive in order, so a repeat is always the last entry.
    if (!is_mutated(v) && (readers_[v].empty() || readers_[v].back() != op)) readers_[v].push_back(op);
  }
  for (const std::uint32_t v : mutates) {
    last_writer_[v] = op;
    readers_[v].clear();
  }
  return preds_;
}

}  // namespace depengine::bench::peers
