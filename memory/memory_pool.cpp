#include "memory/memory_pool.h"

#include <algorithm>
#include <bit>
#include <stdexcept>
#include <utility>

namespace depengine {
namespace {

const StreamKnowledge kKnowsNothing;

std::string quoted(const std::string& name) { return name.empty() ? "memory pool" : "memory pool '" + name + "'"; }

// A death frontier whose users are known complete: empty, or shown complete by the tracker.
bool complete(const DeathFrontier& death, const Tracker* tracker) noexcept {
  if (death.tainted()) return false;
  return death.empty() || (tracker != nullptr && tracker->satisfied(death));
}

}  // namespace

MemoryPool::MemoryPool(std::unique_ptr<BlockSource> source, MemoryPoolOptions options)
    : source_(std::move(source)),
      limit_(options.limit),
      max_fence_waits_(options.max_fence_waits),
      name_(std::move(options.name)) {
  if (source_ == nullptr) throw std::invalid_argument(quoted(name_) + ": null BlockSource");
}

MemoryPool::~MemoryPool() {
  for (unsigned c = 0; c < kClasses; ++c) {
    for (const FreeBlock& block : free_[c])
      source_->deallocate(block.data, std::size_t{1} << (c + kMinClassShift), alignment_of(c));
  }
  for (const PoolBlock& block : tainted_) {
    const auto c = static_cast<unsigned>(std::countr_zero(block.bytes)) - kMinClassShift;
    source_->deallocate(block.data, block.bytes, alignment_of(c));
  }
}

std::size_t MemoryPool::alignment_of(unsigned size_class) const noexcept {
  return std::min(std::size_t{1} << (size_class + kMinClassShift), source_->max_alignment());
}

std::optional<PoolBlock> MemoryPool::acquire(std::size_t bytes, std::size_t alignment, const AcquireView& view) {
  if (bytes == 0) throw std::invalid_argument(quoted(name_) + ": acquire of 0 bytes");
  if (!std::has_single_bit(alignment) || alignment > source_->max_alignment()) {
    throw std::invalid_argument(quoted(name_) + ": alignment " + std::to_string(alignment) +
                                " is not a power of two of at most " + std::to_string(source_->max_alignment()));
  }
  const std::size_t need = std::max({bytes, alignment, std::size_t{1} << kMinClassShift});
  const unsigned shift = static_cast<unsigned>(std::bit_width(need - 1));
  if (shift >= 64 || (std::size_t{1} << shift) > limit_) {
    throw std::length_error(quoted(name_) + ": a request of " + std::to_string(bytes) +
                            " bytes is larger than the pool's limit of " + std::to_string(limit_) + " bytes");
  }
  const unsigned size_class = shift - kMinClassShift;
  const std::size_t block_bytes = std::size_t{1} << shift;

  DeathFrontier waits;
  std::optional<FreeBlock> reused;
  std::vector<PoolBlock> trim;
  bool grow = false;
  {
    std::lock_guard lock(mutex_);
    reused = take_reusable_locked(size_class, view, waits);
    if (reused) {
      note_in_use_locked(block_bytes);
    } else if (make_room_locked(block_bytes, view, trim)) {
      grow = true;
      stats_.bytes_held += block_bytes;  // reserved now, so concurrent growers respect the limit
      stats_.peak_bytes_held = std::max(stats_.peak_bytes_held, stats_.bytes_held);
      ++stats_.fresh_allocations;
      note_in_use_locked(block_bytes);
    } else {
      ++stats_.refused;
    }
  }
  for (const PoolBlock& block : trim) {
    const auto c = static_cast<unsigned>(std::countr_zero(block.bytes)) - kMinClassShift;
    source_->deallocate(block.data, block.bytes, alignment_of(c));
  }
  if (reused) {
    const PoolBlock block{reused->data, block_bytes};
    if (!waits.empty()) {
      try {
        view.wait(view.wait_context, waits);
      } catch (...) {
        release(block, reused->death);
        throw;
      }
    }
    return block;
  }
  if (!grow) return std::nullopt;
  try {
    return PoolBlock{source_->allocate(block_bytes, alignment_of(size_class)), block_bytes};
  } catch (...) {
    std::lock_guard lock(mutex_);
    stats_.bytes_held -= block_bytes;
    stats_.bytes_in_use -= block_bytes;
    --stats_.fresh_allocations;
    throw;
  }
}

// Steps 1 to 3 of the file comment, on the free blocks of one class. `waits` receives step 3's entries.
std::optional<MemoryPool::FreeBlock> MemoryPool::take_reusable_locked(unsigned size_class, const AcquireView& view,
                                                                      DeathFrontier& waits) {
  std::vector<FreeBlock>& list = free_[size_class];
  const StreamKnowledge& knows = view.knowledge != nullptr ? *view.knowledge : kKnowsNothing;
  auto take = [&list](std::size_t i) {
    FreeBlock block = std::move(list[i]);
    list.erase(list.begin() + static_cast<std::ptrdiff_t>(i));
    return block;
  };
  for (std::size_t i = list.size(); i-- > 0;) {  // newest first
    if (dominates(knows, list[i].death)) {
      ++stats_.reuse_dominated;
      return take(i);
    }
  }
  for (std::size_t i = list.size(); i-- > 0;) {
    if (complete(list[i].death, view.tracker)) {
      ++stats_.reuse_complete;
      return take(i);
    }
  }
  if (view.wait == nullptr) return std::nullopt;
  std::size_t best = list.size();
  DeathFrontier best_waits;
  for (std::size_t i = list.size(); i-- > 0;) {
    DeathFrontier needed;
    for (const FrontierEntry& entry : undominated(knows, list[i].death)) {
      if (view.tracker == nullptr || view.tracker->completed(entry.axis) < entry.epoch) {
        needed.insert_or_raise(entry.axis, entry.epoch);
      }
    }
    if (needed.size() <= max_fence_waits_ && (best == list.size() || needed.size() < best_waits.size())) {
      best = i;
      best_waits = needed;
    }
  }
  if (best == list.size()) return std::nullopt;
  ++stats_.reuse_with_waits;
  stats_.waits_added += best_waits.size();
  waits = best_waits;
  return take(best);
}

// Whether `bytes` more fit under the limit, after trimming (into `trim`, oldest first) free blocks of any class whose
// users are complete. Trims nothing when even that would not make room.
bool MemoryPool::make_room_locked(std::size_t bytes, const AcquireView& view, std::vector<PoolBlock>& trim) {
  if (stats_.bytes_held + bytes <= limit_) return true;
  std::size_t trimmable = 0;
  for (unsigned c = 0; c < kClasses; ++c) {
    for (const FreeBlock& block : free_[c]) {
      if (complete(block.death, view.tracker)) trimmable += std::size_t{1} << (c + kMinClassShift);
    }
  }
  if (stats_.bytes_held - trimmable + bytes > limit_) return false;
  for (unsigned c = 0; c < kClasses && stats_.bytes_held + bytes > limit_; ++c) {
    std::vector<FreeBlock>& list = free_[c];
    const std::size_t size = std::size_t{1} << (c + kMinClassShift);
    for (std::size_t i = 0; i < list.size() && stats_.bytes_held + bytes > limit_;) {
      if (!complete(list[i].death, view.tracker)) {
        ++i;
        continue;
      }
      trim.push_back(PoolBlock{list[i].data, size});
      list.erase(list.begin() + static_cast<std::ptrdiff_t>(i));
      stats_.bytes_held -= size;
      ++stats_.trimmed;
    }
  }
  return true;
}

void MemoryPool::note_in_use_locked(std::size_t bytes) noexcept {
  stats_.bytes_in_use += bytes;
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
}

void MemoryPool::release(const PoolBlock& block, const DeathFrontier& death) {
  if (block.data == nullptr || !std::has_single_bit(block.bytes) || block.bytes < (std::size_t{1} << kMinClassShift)) {
    throw std::invalid_argument(quoted(name_) + ": release of a block this pool did not hand out (" +
                                std::to_string(block.bytes) + " bytes)");
  }
  const auto size_class = static_cast<unsigned>(std::countr_zero(block.bytes)) - kMinClassShift;
  std::lock_guard lock(mutex_);
  if (block.bytes > stats_.bytes_in_use) {
    throw std::invalid_argument(quoted(name_) + ": release of more bytes than are handed out");
  }
  stats_.bytes_in_use -= block.bytes;
  if (death.tainted()) {
    tainted_.push_back(block);
    ++stats_.tainted_blocks;
    return;
  }
  free_[size_class].push_back(FreeBlock{block.data, death});
}

void MemoryPool::reclaim_tainted() {
  std::lock_guard lock(mutex_);
  for (const PoolBlock& block : tainted_) {
    const auto size_class = static_cast<unsigned>(std::countr_zero(block.bytes)) - kMinClassShift;
    free_[size_class].push_back(FreeBlock{block.data, DeathFrontier{}});
  }
  tainted_.clear();
  stats_.tainted_blocks = 0;
}

MemoryPoolStats MemoryPool::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace depengine
