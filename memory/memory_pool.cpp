#include <algorithm>
#include <bit>
#include <stdexcept>
#include <string>
#include <utility>

#include <depengine/memory/memory_pool.h>

namespace depengine {
namespace {

const StreamKnowledge kKnowsNothing;

std::string quoted(const std::string& name) { return name.empty() ? "memory pool" : "memory pool '" + name + "'"; }

// The bytes of a block of `size_class`, and the size class of a block of `bytes` (a power of two, 256 or more).
constexpr std::size_t class_bytes(unsigned size_class) noexcept {
  return std::size_t{1} << (size_class + MemoryPool::kMinClassShift);
}
unsigned class_of(std::size_t bytes) noexcept {
  return static_cast<unsigned>(std::countr_zero(bytes)) - MemoryPool::kMinClassShift;
}

// A death frontier whose users are known complete: empty, or shown complete by the tracker.
bool complete(const DeathFrontier& death, const Tracker* tracker) noexcept {
  if (death.tainted()) return false;
  return death.empty() || (tracker != nullptr && tracker->satisfied(death));
}

// Whether the users of `death` may yet complete: each entry not complete is on an axis still open. One on a failed or
// retired axis never completes, and waiting for it would only fail at once.
bool can_complete(const DeathFrontier& death, const Tracker& tracker) {
  for (const FrontierEntry& entry : death.entries()) {
    if (tracker.completed(entry.axis) < entry.epoch && tracker.error(entry.axis) != nullptr) return false;
  }
  return true;
}

}  // namespace

MemoryPool::StuckWaiter::StuckWaiter(MemoryPool* owner) noexcept
    : TrackerWaiter(&MemoryPool::on_stuck_complete), pool(owner) {}

MemoryPool::MemoryPool(std::unique_ptr<BlockSource> source, MemoryPoolOptions options)
    : source_(std::move(source)),
      limit_(options.limit),
      max_fence_waits_(options.max_fence_waits),
      name_(std::move(options.name)),
      tracker_(options.tracker) {
  if (source_ == nullptr) throw std::invalid_argument(quoted(name_) + ": null BlockSource");
}

MemoryPool::~MemoryPool() {
  if (tracker_ != nullptr) (void)tracker_->cancel(stuck_waiter_);  // returns once a running callback has finished
  for (unsigned c = 0; c < kClasses; ++c) {
    for (const FreeBlock& block : free_[c]) give_back(PoolBlock{block.data, class_bytes(c)});
  }
  for (const PoolBlock& block : tainted_) give_back(block);
}

void MemoryPool::give_back(const PoolBlock& block) noexcept {
  source_->deallocate(block.data, block.bytes, alignment_of(class_of(block.bytes)));
}

// Counts a fresh block of `bytes` as held and in use (reserved before the source is called, so that concurrent
// growers respect the limit).
void MemoryPool::note_fresh_locked(std::size_t bytes) noexcept {
  stats_.bytes_held += bytes;
  stats_.peak_bytes_held = std::max(stats_.peak_bytes_held, stats_.bytes_held);
  ++stats_.fresh_allocations;
  note_in_use_locked(bytes);
}

// Takes the fresh block note_fresh_locked() counted from the source; if the source throws, uncounts it and rethrows.
void* MemoryPool::allocate_fresh(unsigned size_class) {
  try {
    return source_->allocate(class_bytes(size_class), alignment_of(size_class));
  } catch (...) {
    std::lock_guard lock(mutex_);
    stats_.bytes_held -= class_bytes(size_class);
    stats_.bytes_in_use -= class_bytes(size_class);
    --stats_.fresh_allocations;
    throw;
  }
}

std::size_t MemoryPool::alignment_of(unsigned size_class) const noexcept {
  return std::min(class_bytes(size_class), source_->max_alignment());
}

unsigned MemoryPool::size_class_of(std::size_t bytes, std::size_t alignment) const {
  if (bytes == 0) throw std::invalid_argument(quoted(name_) + ": a request of 0 bytes");
  if (!std::has_single_bit(alignment) || alignment > source_->max_alignment()) {
    throw std::invalid_argument(quoted(name_) + ": alignment " + std::to_string(alignment) +
                                " is not a power of two of at most " + std::to_string(source_->max_alignment()));
  }
  const std::size_t need = std::max({bytes, alignment, class_bytes(0)});
  const auto shift = static_cast<unsigned>(std::bit_width(need - 1));
  if (shift >= 64 || (std::size_t{1} << shift) > limit_) {
    throw std::length_error(quoted(name_) + ": a request of " + std::to_string(bytes) +
                            " bytes is larger than the pool's limit of " + std::to_string(limit_) + " bytes");
  }
  return shift - kMinClassShift;
}

std::size_t MemoryPool::block_bytes(std::size_t bytes, std::size_t alignment) const {
  return class_bytes(size_class_of(bytes, alignment));
}

std::optional<PoolBlock> MemoryPool::acquire(std::size_t bytes, std::size_t alignment, const AcquireView& view) {
  const unsigned size_class = size_class_of(bytes, alignment);
  const std::size_t block_bytes = class_bytes(size_class);
  DeathFrontier waits;
  std::optional<FreeBlock> reused;
  std::vector<PoolBlock> trim;
  bool grow = false;
  {
    std::lock_guard lock(mutex_);
    reused = take_reusable_locked(size_class, view, waits);
    if (reused) {
      note_in_use_locked(block_bytes);
    } else if (make_room_locked(block_bytes, view, trim, nullptr) == Room::kMade) {
      grow = true;
      note_fresh_locked(block_bytes);
    } else {
      ++stats_.refused;
    }
  }
  for (const PoolBlock& block : trim) give_back(block);
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
  return PoolBlock{allocate_fresh(size_class), block_bytes};
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

// Whether `bytes` more fit under the limit (kMade), after trimming (into `trim`, oldest first) free blocks of any class
// whose users are complete. Trims nothing when even that would not make room. A refusal is kOnceComplete when it is
// for want of completions alone: the free blocks whose users still run (on axes still open) would make room once
// complete; `running`, if not null, then receives the death frontier of one of them, taken in the same scan of the
// tracker that refused, so the caller can wait for exactly what refused it (see serve_locked). Otherwise kNone: room
// needs a release (or reclaim_tainted()) as well.
MemoryPool::Room MemoryPool::make_room_locked(std::size_t bytes, const AcquireView& view, std::vector<PoolBlock>& trim,
                                              DeathFrontier* running) {
  if (stats_.bytes_held + bytes <= limit_) return Room::kMade;
  std::size_t trimmable = 0;
  std::size_t free_bytes = 0;
  const FreeBlock* blocker = nullptr;
  for (unsigned c = 0; c < kClasses; ++c) {
    for (const FreeBlock& block : free_[c]) {
      free_bytes += class_bytes(c);
      if (complete(block.death, view.tracker)) {
        trimmable += class_bytes(c);
      } else if (blocker == nullptr && view.tracker != nullptr && can_complete(block.death, *view.tracker)) {
        blocker = &block;
      }
    }
  }
  if (stats_.bytes_held - trimmable + bytes > limit_) {
    // Held bytes that no completion frees: in use and tainted.
    if (blocker == nullptr || stats_.bytes_held - free_bytes + bytes > limit_) return Room::kNone;
    if (running != nullptr) *running = blocker->death;
    return Room::kOnceComplete;
  }
  for (unsigned c = 0; c < kClasses && stats_.bytes_held + bytes > limit_; ++c) {
    std::vector<FreeBlock>& list = free_[c];
    const std::size_t size = class_bytes(c);
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
  return Room::kMade;
}

void MemoryPool::note_in_use_locked(std::size_t bytes) noexcept {
  stats_.bytes_in_use += bytes;
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
}

void MemoryPool::release(const PoolBlock& block, const DeathFrontier& death) {
  if (block.data == nullptr || !std::has_single_bit(block.bytes) || block.bytes < class_bytes(0)) {
    throw std::invalid_argument(quoted(name_) + ": release of a block this pool did not hand out (" +
                                std::to_string(block.bytes) + " bytes)");
  }
  const unsigned size_class = class_of(block.bytes);
  std::vector<Grant> grants;
  std::vector<PoolBlock> trim;
  bool arm = false;
  {
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
    if (queue_head_ != nullptr) arm = serve_locked(grants, trim);
  }
  finish_serving(grants, trim, arm);
}

std::string MemoryPool::describe_queue() const {
  std::lock_guard lock(mutex_);
  if (queue_head_ == nullptr) return {};
  std::size_t queued = 0;
  for (const ReserveWaiter* w = queue_head_; w != nullptr; w = w->next_) ++queued;
  std::size_t free_bytes = 0;
  for (unsigned c = 0; c < kClasses; ++c) free_bytes += free_[c].size() * class_bytes(c);
  // Appended piece by piece (GCC 12 warns falsely on long chains of std::string + literal).
  std::string text = "  ";
  text += quoted(name_);
  text += ": " + std::to_string(queued);
  text += " reservations queued, the first for a block of " + std::to_string(class_bytes(queue_head_->size_class_));
  text += " B; holds " + std::to_string(stats_.bytes_held);
  text += " of " + std::to_string(limit_);
  text += " B (" + std::to_string(stats_.bytes_in_use);
  text += " in use, " + std::to_string(free_bytes);
  text += " free, " + std::to_string(stats_.bytes_held - stats_.bytes_in_use - free_bytes);
  text += " tainted); ";
  if (stuck_armed_) {
    text += "waits for the users of a free block to complete, on";
    for (const FrontierEntry& entry : stuck_requirement_.entries()) {
      text += " ";
      text += to_string(entry.axis);
      text += " epoch " + std::to_string(entry.epoch);
    }
  } else {
    text += "waits for a release (a Buffers::deallocate of a block in use)";
  }
  return text + "\n";
}

void MemoryPool::reclaim_tainted() {
  std::vector<Grant> grants;
  std::vector<PoolBlock> trim;
  bool arm = false;
  {
    std::lock_guard lock(mutex_);
    for (const PoolBlock& block : tainted_) free_[class_of(block.bytes)].push_back(FreeBlock{block.data, {}});
    tainted_.clear();
    stats_.tainted_blocks = 0;
    if (queue_head_ != nullptr) arm = serve_locked(grants, trim);
  }
  finish_serving(grants, trim, arm);
}

PoolBlock MemoryPool::settle(const PoolBlock& block, DeathFrontier& death, const AcquireView& view) {
  const StreamKnowledge& knows = view.knowledge != nullptr ? *view.knowledge : kKnowsNothing;
  std::lock_guard lock(mutex_);
  if (dominates(knows, death)) {
    ++stats_.settled_dominated;
    return block;
  }
  if (complete(death, view.tracker)) return block;  // no wait either (the tracker says so)
  std::vector<FreeBlock>& list = free_[class_of(block.bytes)];
  for (const bool followed : {true, false}) {      // one the stream follows, else one complete: acquire()'s steps 1, 2
    for (std::size_t i = list.size(); i-- > 0;) {  // newest first
      if (followed ? !dominates(knows, list[i].death) : !complete(list[i].death, view.tracker)) continue;
      // The reserved block was never touched (its holder's op is the first to use it): its death frontier stays true.
      const PoolBlock taken{list[i].data, block.bytes};
      list[i] = FreeBlock{block.data, death};
      death = DeathFrontier{};  // nothing to wait for
      ++stats_.settled_swapped;
      if (followed) ++stats_.settled_dominated;
      return taken;
    }
  }
  return block;
}

// --- Reservations ----------------------------------------------------------------------------------------------

void MemoryPool::reserve(std::size_t bytes, std::size_t alignment, ReserveWaiter& waiter) {
  waiter.size_class_ = size_class_of(bytes, alignment);
  waiter.next_ = nullptr;
  std::vector<Grant> grants;
  std::vector<PoolBlock> trim;
  bool arm = false;
  {
    std::lock_guard lock(mutex_);
    if (queue_tail_ != nullptr) {
      queue_tail_->next_ = &waiter;
    } else {
      queue_head_ = &waiter;
    }
    queue_tail_ = &waiter;
    arm = serve_locked(grants, trim);
    bool queued = false;
    for (const ReserveWaiter* w = queue_head_; w != nullptr && !queued; w = w->next_) queued = w == &waiter;
    if (queued) ++stats_.reservations_queued;
  }
  finish_serving(grants, trim, arm);
}

// A block of `size_class` for a reservation: a free one of the class whatever its death frontier (the holder waits for
// it), preferring one already complete; else room for a fresh one (out.data null). kMade when granted; otherwise why
// not, as make_room_locked() says (`running` as there).
MemoryPool::Room MemoryPool::try_reserve_locked(unsigned size_class, FreeBlock& out, std::vector<PoolBlock>& trim,
                                                DeathFrontier* running) {
  std::vector<FreeBlock>& list = free_[size_class];
  const std::size_t bytes = class_bytes(size_class);
  if (!list.empty()) {
    std::size_t pick = list.size() - 1;  // the newest, unless an older one has completed
    bool done = false;
    for (std::size_t i = list.size(); i-- > 0;) {
      if (complete(list[i].death, tracker_)) {
        pick = i;
        done = true;
        break;
      }
    }
    out = std::move(list[pick]);
    list.erase(list.begin() + static_cast<std::ptrdiff_t>(pick));
    ++(done ? stats_.reuse_complete : stats_.reuse_reserved);
    note_in_use_locked(bytes);
    return Room::kMade;
  }
  const Room room = make_room_locked(bytes, AcquireView{nullptr, tracker_}, trim, running);
  if (room != Room::kMade) return room;
  note_fresh_locked(bytes);
  out.data = nullptr;
  out.death = DeathFrontier{};
  return Room::kMade;
}

// Grants every queued reservation that can be served now, first-fit in arrival order. Returns whether the caller must
// arm the stuck waiter (after the lock) on stuck_requirement_.
//
// The wake-up of what stays queued. A request refused for want of a release is served by that release (release()
// and reclaim_tainted() serve the queue under the lock that counts the bytes). One refused only because free blocks'
// users still run (kOnceComplete) needs their completion, which the tracker reports without the pool's lock; the
// stuck waiter is armed for it. Its requirement is the death frontier of a block the refusing scan itself saw running,
// never one found by a second look at the tracker: between two looks the last running block may complete, and the
// second would find nothing to wait for while the first had refused (no release is coming when every block is free:
// the hang this closes). If the frontier completes before the arming, Tracker::wait_async() sees it satisfied and
// fires at once, on the arming thread: the serve is re-run, so no completion falls between the check and the wait.
// One waiter at a time: while it is armed, its firing re-runs this pass, which arms it again if still needed.
bool MemoryPool::serve_locked(std::vector<Grant>& grants, std::vector<PoolBlock>& trim) {
  DeathFrontier* const running = tracker_ != nullptr && !stuck_armed_ ? &stuck_requirement_ : nullptr;
  bool arm = false;
  ReserveWaiter* prev = nullptr;
  for (ReserveWaiter* w = queue_head_; w != nullptr;) {
    ReserveWaiter* next = w->next_;
    FreeBlock block{};
    // The first kOnceComplete refusal writes the requirement; later ones leave it (it is the one to arm).
    const Room room = try_reserve_locked(w->size_class_, block, trim, arm ? nullptr : running);
    if (room == Room::kMade) {
      (prev != nullptr ? prev->next_ : queue_head_) = next;
      if (queue_tail_ == w) queue_tail_ = prev;
      grants.push_back(Grant{w, std::move(block)});
    } else {
      arm = arm || (room == Room::kOnceComplete && running != nullptr);
      prev = w;
    }
    w = next;
  }
  if (arm) stuck_armed_ = true;
  return arm;
}

// After the lock: returns trimmed blocks, allocates fresh ones, runs the granted callbacks, arms the stuck waiter.
void MemoryPool::finish_serving(std::vector<Grant>& grants, std::vector<PoolBlock>& trim, bool arm_stuck) {
  for (const PoolBlock& block : trim) give_back(block);
  for (Grant& grant : grants) {
    const unsigned c = grant.waiter->size_class_;
    if (grant.block.data != nullptr) {
      grant.waiter->callback_(*grant.waiter, PoolBlock{grant.block.data, class_bytes(c)}, grant.block.death, nullptr);
      continue;
    }
    void* data = nullptr;
    try {
      data = allocate_fresh(c);
    } catch (...) {
      grant.waiter->callback_(*grant.waiter, PoolBlock{}, DeathFrontier{}, std::current_exception());
      continue;
    }
    grant.waiter->callback_(*grant.waiter, PoolBlock{data, class_bytes(c)}, DeathFrontier{}, nullptr);
  }
  if (!arm_stuck) return;
  try {
    tracker_->wait_async(stuck_waiter_, stuck_requirement_);  // may fire here, taking the lock: none is held
  } catch (...) {  // an axis the tracker does not know: releases alone will serve the queue
    std::lock_guard lock(mutex_);
    stuck_armed_ = false;
  }
}

// The users of the free block the queue was stuck behind have completed (or their axis closed since the scan that
// chose it; the next scan passes it over): serve the queue again, which re-arms the waiter if a request is still
// refused only for running users.
void MemoryPool::on_stuck_complete(TrackerWaiter& waiter, std::exception_ptr /*error*/) noexcept {
  MemoryPool* pool = static_cast<StuckWaiter&>(waiter).pool;
  std::vector<Grant> grants;
  std::vector<PoolBlock> trim;
  bool arm = false;
  try {
    {
      std::lock_guard lock(pool->mutex_);
      pool->stuck_armed_ = false;
      arm = pool->serve_locked(grants, trim);
    }
    pool->finish_serving(grants, trim, arm);
  } catch (...) {  // vector growth failed: the queue waits for the next release
  }
}

MemoryPoolStats MemoryPool::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace depengine
