// Fence and FenceList: points on user timelines that a push waits for or signals (PushOptions::wait_fences and
// signal_fences; docs/architecture.md §2, IREE's design of timelines and fences).
//
// A fence is a timeline and a value: "this timeline has reached at least this value". With fences a user can submit a
// whole pipeline, including work ordered by nothing but fences, before any of it runs: an op waiting on a fence is
// held by the engine (no thread blocks) until the value is reached, or, for a stream op, until the op that will
// signal it has been issued to a device of the same engine (the stream then waits on the device for exactly that
// op's work). An op signals its fences when it completes: for a stream op, when its device work has finished.
//
// A Fence is a value (16 bytes) that borrows its timeline: the timeline must outlive every op that names it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

#include <depengine/engine/errors.h>
#include <depengine/frontier/timeline.h>

namespace depengine {

// A point on a user timeline: reached when `timeline` has reached `value` (>=). A push borrows the timeline,
// which must outlive the op.
struct Fence {
  Timeline* timeline = nullptr;  // the timeline; null is refused at the push
  std::uint64_t value = 0;       // the value it must reach
};

// Up to kCapacity fences, stored inline (so PushOptions can be built once and reused, and a push copies no heap).
// Building a list of more throws Error.
class FenceList {
 public:
  // The most fences one list holds.
  static constexpr std::size_t kCapacity = 4;

  FenceList() = default;
  // The fences given; more than kCapacity throws Error.
  FenceList(std::initializer_list<Fence> fences) : FenceList(std::span<const Fence>(fences.begin(), fences.size())) {}
  FenceList(std::span<const Fence> fences) {  // NOLINT: implicit, like VarList
    if (fences.size() > kCapacity) {
      throw Error("FenceList: " + std::to_string(fences.size()) + " fences; a push waits for or signals at most " +
                  std::to_string(kCapacity));
    }
    for (const Fence& fence : fences) fences_[size_++] = fence;
  }

  // The fences held, as a read-only range; clear() empties the list.
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  [[nodiscard]] const Fence& operator[](std::size_t i) const noexcept { return fences_[i]; }
  [[nodiscard]] const Fence* begin() const noexcept { return fences_.data(); }
  [[nodiscard]] const Fence* end() const noexcept { return fences_.data() + size_; }
  void clear() noexcept { size_ = 0; }

 private:
  std::array<Fence, kCapacity> fences_{};
  std::uint8_t size_ = 0;
};

}  // namespace depengine
