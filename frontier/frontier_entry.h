// The element of a frontier, and the four answers of a frontier comparison. Split from frontier.h so that the
// detail kernels (detail/frontier_kernels.h) and the frontier classes can share them without a cycle.
//
// Thread safety: plain values. Cost: FrontierEntry is 16 bytes, trivially copyable.
#pragma once

#include <cstdint>

#include <depengine/frontier/axis.h>

namespace depengine {

// One (axis, epoch) pair: "everything on `axis` up to and including `epoch`". Epochs count from 1: an epoch of 0
// would say nothing, so frontiers never store one. Default-initialised like an integer; aggregate-initialise it.
struct FrontierEntry {
  // The axis, and the epoch on it up to which everything happened (at least 1).
  Axis axis;
  std::uint64_t epoch;

  friend constexpr bool operator==(const FrontierEntry& a, const FrontierEntry& b) noexcept {
    return a.axis == b.axis && a.epoch == b.epoch;
  }
};
static_assert(sizeof(FrontierEntry) == 16, "frontier entries are two words: the kernels copy them as 16-byte units");

// How two frontiers a and b relate (compare(a, b)). Defined by dominance, so it always agrees with dominates():
//   kEqual:      a dominates b and b dominates a
//   kBefore:     b dominates a, a does not dominate b (a happened before b)
//   kAfter:      a dominates b, b does not dominate a
//   kConcurrent: neither dominates the other
enum class FrontierOrder : std::uint8_t { kEqual, kBefore, kAfter, kConcurrent };

// "equal", "before", "after" or "concurrent".
[[nodiscard]] constexpr const char* order_name(FrontierOrder order) noexcept {
  switch (order) {
    case FrontierOrder::kEqual:
      return "equal";
    case FrontierOrder::kBefore:
      return "before";
    case FrontierOrder::kAfter:
      return "after";
    case FrontierOrder::kConcurrent:
      return "concurrent";
  }
  return "order?";
}

}  // namespace depengine
