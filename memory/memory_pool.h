// MemoryPool: blocks of host or device memory reused by frontier dominance, without fences (docs/architecture.md §6;
// the seeds' "Buffer Reuse" and "Stream-ordered Allocations").
//
// A block is released with its death frontier: what must complete before anyone else may touch it (the signals of its
// last users, known when their work is issued, not when it finishes). acquire(bytes, alignment, view) then hands out,
// in this order of preference:
//   1. a free block whose death frontier the acquirer's knowledge dominates: its stream has already waited for every
//      last user (or runs after them in FIFO order), so the block is reused with no synchronisation at all;
//   2. a free block whose death frontier the tracker shows complete;
//   3. "try before you fence": the free block with the fewest entries neither known to the acquirer nor complete, if
//      there are at most MemoryPoolOptions::max_fence_waits of them and the acquirer can wait on a device: the
//      view's wait callback is handed exactly those entries (the acquirer's stream waits for them), and the block is
//      reused;
//   4. a fresh block from the BlockSource, if the limit allows (trimming free blocks already complete to make room);
//   5. nothing (std::nullopt): the pool is at its limit and no block can be reused yet. The caller waits for
//      releases or completions and tries again (the engine does this as a pending op, not a blocked thread).
// A request larger than the limit throws std::length_error at once.
//
// Reservations (bounded pools under an engine, buffers/buffer.h). reserve(bytes, alignment, waiter) is the
// host-side, asynchronous form for a holder whose stream is not known yet: it takes a free block of the size class
// whatever its death frontier (handing that frontier to the waiter, whose stream must wait for it before touching the
// block), preferring one the tracker shows complete; else a fresh block within the limit, trimming free blocks of other
// classes whose users the tracker shows complete (never one whose users may still run). When neither is possible the
// waiter is queued. Every release (of an untainted block), reclaim_tainted() and reserve() serves the queue under the
// pool's lock. A request that only the completion of free blocks' users would let in (they are trimmable then) is also
// served when they complete: the pool arms its one tracker waiter on the death frontier of a block that the refusing
// pass saw running (not on a second look at the tracker, which a completion in between could leave empty-handed), and
// the tracker fires it at once if that frontier completed before the arming; its callback serves the queue again, and
// re-arms if still needed. So a queued request waits only while bytes are in use or tainted, or free blocks' users run
// on open axes (users on a failed or retired axis never complete: such a block is never trimmed). Queued requests are
// served first-fit in arrival order, not strictly FIFO: a request that fits is never held behind one that does not
// (forward progress while any request fits; a large request may wait while smaller ones pass).
//
// A reservation's holder learns its stream only when its own op is issued; settle() then swaps the reserved block for
// a free block of the class whose users that stream already follows (or whose users have completed), when the reserved
// one is not such a block: so a bounded pool reuses blocks with no synchronisation as an unbounded one does, and the
// holder waits only when no free block of its class would spare it. The swap leaves each class's free count as it was,
// so it changes nothing for queued reservations.
//
// Size classes. Blocks come in powers of two from 256 bytes; a request takes the smallest class that holds it (and its
// alignment), and a block serves only its class. Internal fragmentation is below 50% of a block (a request of 2^k + 1
// bytes takes 2^(k+1)); blocks are never split or coalesced, so memory freed in one class serves only that class until
// it is trimmed (returned to the source) to make room under the limit. Within a class the most recently released
// block is preferred (warm in caches, and the most likely to be dominated by a stream that just used it).
//
// Taint. A death frontier that did not fit its capacity (kMaxEngineAxes entries) is tainted: it lost entries, so no
// dominance or tracker query can prove its users complete. Such a block is held apart and never handed out until
// reclaim_tainted(), which the owner calls when it knows every earlier user has completed (the engine after a full
// wait); then it is reused like a block with an empty death frontier.
//
// Thread safety: every member may be called from any thread, concurrently; one mutex guards the pool, and neither the
// source nor the wait callback is called while it is held (the tracker is queried under it: lock-free, bar a per-axis
// spinlock to tell a closed axis when a queued reservation is refused). Cost: acquire scans the free blocks of one
// class (three passes at most, each a frontier comparison of a few entries per block); release appends one record; both
// allocate only when a free list grows past its capacity so far. Growth and trimming call the source.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <depengine/frontier/frontier.h>
#include <depengine/frontier/tracker.h>
#include <depengine/frontier/vocabulary.h>
#include <depengine/memory/block_source.h>

namespace depengine {

// What must complete before a released block may be touched again: the signals of its last users.
using DeathFrontier = RequirementFrontier<kMaxEngineAxes>;
// What an acquiring stream knows has happened before the work it enqueues from now on.
using StreamKnowledge = KnowledgeFrontier<kMaxEngineAxes>;

struct MemoryPoolOptions {
  std::string name{};                   // for error messages; may be empty
  std::size_t limit = ~std::size_t{0};  // bytes held from the source at most (in use + free)
  std::uint32_t max_fence_waits = 2;    // step 3: waits an acquirer may take on to reuse a block
  // Where the users of released blocks complete: lets queued reservations wait for the completion of a free block's
  // users (to trim it), not only for releases. Must outlive the pool. Null: releases only.
  Tracker* tracker = nullptr;
};

// A block handed out by acquire(): give it back with release(). `bytes` is its size class, at least what was asked.
struct PoolBlock {
  // The block, and its size in bytes.
  void* data = nullptr;
  std::size_t bytes = 0;
};

// The acquiring side: what it knows, where completion is tracked, and whether it can wait on a device.
struct AcquireView {
  const StreamKnowledge* knowledge = nullptr;  // the acquiring stream's knowledge; null: knows nothing (a host thread)
  const Tracker* tracker = nullptr;            // completed epochs of the axes in death frontiers; null: none known
  // Makes the acquirer wait for every entry of `entries` before it touches the block (a stream's device waits on the
  // events of those epochs). Null: the acquirer cannot wait (step 3 is skipped). Called without the pool's lock; if
  // it throws, the block goes back to the pool and acquire() rethrows.
  void (*wait)(void* context, const DeathFrontier& entries) = nullptr;
  void* wait_context = nullptr;
};

// A reservation (MemoryPool::reserve): an intrusive node the caller owns, which must outlive its callback's start.
// The callback runs exactly once: with the block and the death frontier its holder must wait for, or with the error
// the source threw. It runs on the reserving thread, or later on a releasing or completing thread, never under the
// pool's lock, and must not throw.
class ReserveWaiter {
 public:
  // What the pool calls once the reservation is served: (the waiter, the block, what its holder must wait for,
  // or the error the source threw).
  using Callback = void (*)(ReserveWaiter& self, const PoolBlock& block, const DeathFrontier& death,
                            std::exception_ptr error) noexcept;
  // A reservation that calls `callback`.
  explicit ReserveWaiter(Callback callback) noexcept : callback_(callback) {}
  ReserveWaiter(const ReserveWaiter&) = delete;
  ReserveWaiter& operator=(const ReserveWaiter&) = delete;

 private:
  friend class MemoryPool;
  Callback callback_;
  ReserveWaiter* next_ = nullptr;  // the pool's queue; guarded by its mutex
  unsigned size_class_ = 0;
};

// What a pool did so far, and the bytes it holds (stats()).
struct MemoryPoolStats {
  std::uint64_t reuse_dominated = 0;      // step 1: reused with no synchronisation
  std::uint64_t reuse_complete = 0;       // step 2
  std::uint64_t reuse_with_waits = 0;     // step 3
  std::uint64_t waits_added = 0;          // step 3: entries handed to the wait callback
  std::uint64_t fresh_allocations = 0;    // step 4
  std::uint64_t trimmed = 0;              // free blocks returned to the source to make room
  std::uint64_t refused = 0;              // step 5: acquires that returned nothing
  std::uint64_t reservations_queued = 0;  // reserve() calls that had to wait
  std::uint64_t reuse_reserved = 0;       // reservations given a free block whose users had not all completed
  std::uint64_t settled_swapped = 0;      // settle(): reserved blocks swapped for a free block needing no wait
  std::uint64_t settled_dominated = 0;    // settle(): blocks the stream follows (as step 1), swapped or reserved so
  std::uint64_t tainted_blocks = 0;       // held apart now, waiting for reclaim_tainted()
  std::size_t bytes_in_use = 0;           // handed out and not released
  // The most bytes_in_use so far.
  std::size_t peak_bytes_in_use = 0;
  std::size_t bytes_held = 0;  // from the source: in use, free, and tainted
  // The most bytes_held so far.
  std::size_t peak_bytes_held = 0;
};

class MemoryPool {
 public:
  static constexpr unsigned kMinClassShift = 8;  // the smallest block: 256 bytes

  // A pool of `source`'s blocks. Throws std::invalid_argument for a null source.
  explicit MemoryPool(std::unique_ptr<BlockSource> source, MemoryPoolOptions options = {});
  // Returns every free and tainted block to the source. Blocks still handed out are not freed (their holder may still
  // use them: a free that was never issued because its stream failed, for one).
  ~MemoryPool();
  MemoryPool(const MemoryPool&) = delete;
  MemoryPool& operator=(const MemoryPool&) = delete;

  // A block of at least `bytes` (> 0) aligned to `alignment` (a power of two, at most the source's max_alignment()),
  // chosen as the file comment says; std::nullopt when the limit leaves no room. Throws std::length_error for a
  // request larger than the limit, std::invalid_argument for a zero size or a bad alignment, and whatever the source
  // or the wait callback throws.
  [[nodiscard]] std::optional<PoolBlock> acquire(std::size_t bytes, std::size_t alignment, const AcquireView& view);

  // The size of the block a request of `bytes` at `alignment` takes. Throws as reserve() does for a bad request.
  [[nodiscard]] std::size_t block_bytes(std::size_t bytes, std::size_t alignment) const;

  // Reserves a block for `waiter` (see Reservations in the file comment). Throws std::length_error for a request
  // larger than the limit and std::invalid_argument for a zero size or a bad alignment, before queueing anything.
  void reserve(std::size_t bytes, std::size_t alignment, ReserveWaiter& waiter);

  // For the holder of a block that reserve() granted, now that it knows its stream (`view`; its wait callback is not
  // used): returns the block to use, `block` or a free block of its class swapped for it (see settle() in the file
  // comment), and sets `death` to that block's death frontier, which the holder's stream must still wait for (empty
  // when it need not wait).
  [[nodiscard]] PoolBlock settle(const PoolBlock& block, DeathFrontier& death, const AcquireView& view);

  // Gives `block` back with its death frontier (copied). Throws std::invalid_argument for a block this pool did not
  // hand out (null data or a size that is not a size class).
  void release(const PoolBlock& block, const DeathFrontier& death);

  // Makes the tainted blocks reusable: the caller knows every user of every block released so far has completed.
  void reclaim_tainted();

  // The pool's counters (taken under its lock), and its name.
  [[nodiscard]] MemoryPoolStats stats() const;
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  // What the queued reservations wait for, in a line (the engine's in-flight report, through Buffers): how many, the
  // first one's size, the bytes held, in use and free, and whether the pool waits for a release or for the users of
  // free blocks to complete (the frontier it waits on). Empty when no reservation is queued.
  [[nodiscard]] std::string describe_queue() const;

 private:
  struct FreeBlock {
    void* data;
    DeathFrontier death;
  };
  static constexpr unsigned kClasses = 64 - kMinClassShift;
  // A reservation decided under the lock, completed (fresh allocation, callback) after it.
  struct Grant {
    ReserveWaiter* waiter;
    FreeBlock block;  // data null: allocate fresh
  };
  struct StuckWaiter final : TrackerWaiter {
    explicit StuckWaiter(MemoryPool* owner) noexcept;
    MemoryPool* pool;
  };

  // What make_room_locked() found: room made; no room until a release; no room until running users complete.
  enum class Room : std::uint8_t { kMade, kNone, kOnceComplete };

  [[nodiscard]] unsigned size_class_of(std::size_t bytes, std::size_t alignment) const;
  [[nodiscard]] Room try_reserve_locked(unsigned size_class, FreeBlock& out, std::vector<PoolBlock>& trim,
                                        DeathFrontier* running);
  [[nodiscard]] bool serve_locked(std::vector<Grant>& grants, std::vector<PoolBlock>& trim);
  void finish_serving(std::vector<Grant>& grants, std::vector<PoolBlock>& trim, bool arm_stuck);
  static void on_stuck_complete(TrackerWaiter& waiter, std::exception_ptr error) noexcept;

  [[nodiscard]] std::size_t alignment_of(unsigned size_class) const noexcept;
  [[nodiscard]] std::optional<FreeBlock> take_reusable_locked(unsigned size_class, const AcquireView& view,
                                                              DeathFrontier& waits);
  [[nodiscard]] Room make_room_locked(std::size_t bytes, const AcquireView& view, std::vector<PoolBlock>& trim,
                                      DeathFrontier* running);
  void note_in_use_locked(std::size_t bytes) noexcept;
  void note_fresh_locked(std::size_t bytes) noexcept;
  [[nodiscard]] void* allocate_fresh(unsigned size_class);
  void give_back(const PoolBlock& block) noexcept;

  const std::unique_ptr<BlockSource> source_;
  const std::size_t limit_;
  const std::uint32_t max_fence_waits_;
  const std::string name_;

  mutable std::mutex mutex_;
  std::vector<FreeBlock> free_[kClasses];  // per size class, oldest release first; guarded by mutex_
  std::vector<PoolBlock> tainted_;         // guarded by mutex_
  MemoryPoolStats stats_;                  // guarded by mutex_
  ReserveWaiter* queue_head_ = nullptr;    // queued reservations, in arrival order; guarded by mutex_
  ReserveWaiter* queue_tail_ = nullptr;    // guarded by mutex_
  // Armed on the tracker for stuck_requirement_ when a queued reservation was refused only because free blocks' users
  // still run (serve_locked). stuck_armed_ and stuck_requirement_ are guarded by mutex_; while stuck_armed_ is set the
  // tracker reads stuck_requirement_, which nothing writes until the callback has started and cleared stuck_armed_.
  Tracker* const tracker_;
  StuckWaiter stuck_waiter_{this};
  DeathFrontier stuck_requirement_;
  bool stuck_armed_ = false;
};

}  // namespace depengine
