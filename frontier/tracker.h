// Tracker: which epochs of which axes have COMPLETED, and waiters that fire when a whole requirement has.
//
// A stream op is issued long before it completes (docs/architecture.md §3). The tracker is where completion lands: the
// stream executor calls advance(axis, epoch) from its host-callback or poller thread for each completed op, and a CPU
// op that depends on stream work is parked on a TrackerWaiter for its wait frontier instead of blocking a worker on a
// device event. WaitForVar and the memory pools ask the same tracker (completed, satisfied). docs/architecture.md §4;
// README.md in this folder has the waiter protocol as a thread timeline.
//
// Model. Each registered axis has a completed epoch (0 until advanced), which only grows: advance(axis, e) raises it
// to e, and is a no-op when e is not above it (completions may arrive twice, or from several threads, out of order).
// An epoch e complete on axis a means every op on a up to and including epoch e has completed. A RequirementFrontier
// is satisfied when every entry (a, e) has completed(a) >= e. A tainted requirement has lost entries and is never
// satisfied: satisfied() returns false for it, and wait_async() rejects it with std::invalid_argument, because a waiter
// on it could never fire. The caller takes its conservative path instead (wait for the producing ops through their
// variables, or build an untainted requirement that covers more, such as every stream's issued epoch).
//
// Failure and retirement close an axis: its completed epoch freezes (later advances are ignored), waiters that still
// need a higher epoch of it fail, and so does every later wait that needs one. Entries at or below the frozen epoch
// remain satisfied: that work did complete. fail(axis, e) closes with error e (a lost device, a broken stream);
// retire_axis(axis) closes with AxisRetiredError (the stream was destroyed; whatever it completed stays known, so death
// frontiers naming it stay decidable). A waiter learns of a closed axis when it reaches that entry: at arming, any
// entry on a closed axis that is not complete fails it at once; a parked waiter fails when it reaches the entry.
//
// Waiters (TrackerWaiter) are intrusive: owned by the caller, parked on one axis at a time (the first entry of their
// requirement that is not complete), moved on by the thread whose advance completes that entry, and fired by the
// thread that completes the last one, or by the arming thread if the requirement was already satisfied. A callback
// runs exactly once per arming unless cancel() prevented it, and never while any tracker lock is held.
//
// Happens-before: everything a thread did before advance(a, e) is visible to a thread that afterwards finds
// completed(a) >= e or satisfied(r) true for an r whose entry on a is at most e, and inside the callback of a waiter
// whose requirement includes (a, e' <= e). Everything done before fail(a, error) is visible to whoever receives error.
//
// Thread safety: every member may be called concurrently from any threads, except the destructor. completed(),
// satisfied() and advance() when no waiter is due are lock-free. The slow paths (a due waiter, arming, cancel, fail,
// retire) take a per-axis spinlock; register_axis takes a tracker-wide mutex.
//
// Ownership and lifetime: the tracker owns one slot per axis ever registered (slots are never reused, like axes);
// waiters and their requirements are owned by the caller. Not copyable or movable. Destroying a tracker fails parked
// waiters with std::logic_error (their callbacks run inside the destructor).
//
// Failure: misuse throws and changes nothing: std::invalid_argument (null, unknown or twice-registered axis; a tainted
// requirement; an epoch above kMaxTrackedEpoch), std::length_error (more than TrackerOptions::max_axes axes),
// std::logic_error (arming an armed waiter). Callbacks must not throw (they are noexcept).
//
// Cost: advance() with no due waiter is one relaxed load and one compare-exchange on the axis's line (plus one relaxed
// load when waiters are parked on the axis but none is due); completed() is a hash probe and one acquire load;
// satisfied() is that per entry. Moving a waiter on costs a spinlock round trip on the axis it leaves and on each
// axis it parks on; firing it costs two more on the axis that fired it. Allocation: the constructor allocates every
// slot (64 bytes per axis of max_axes) and the axis index (32 bytes per axis); nothing else allocates, except the
// exception objects of errors and of retire_axis.
#pragma once

#include <atomic>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include <depengine/frontier/frontier.h>

namespace depengine {

// The largest epoch the tracker records: epochs share a 64-bit word with two flag bits.
inline constexpr std::uint64_t kMaxTrackedEpoch = (std::uint64_t{1} << 62) - 1;

struct TrackerOptions {
  std::uint32_t max_axes = 256;  // axes registered over the tracker's life (retired ones included); at least 1
};

// The error of waits that need an epoch a retired axis never completed.
class AxisRetiredError : public std::runtime_error {
 public:
  // The error of `axis`, retired at `final_epoch`; and those two back.
  AxisRetiredError(Axis axis, std::uint64_t final_epoch);
  [[nodiscard]] Axis axis() const noexcept { return axis_; }
  [[nodiscard]] std::uint64_t final_epoch() const noexcept { return final_epoch_; }

 private:
  Axis axis_;
  std::uint64_t final_epoch_;
};

namespace detail {
struct TrackerSlot;  // one axis's state (tracker.cpp)
}  // namespace detail

// A registered axis, resolved: advance() and completed() on a handle skip the index probe. A plain value, valid as
// long as its tracker (for the stream executor: held by the stream that owns the axis).
class TrackedAxis {
 public:
  TrackedAxis() = default;
  // The axis, and whether the handle names one (a default-constructed handle does not).
  [[nodiscard]] Axis axis() const noexcept { return axis_; }
  [[nodiscard]] explicit operator bool() const noexcept { return slot_ != nullptr; }

 private:
  friend class Tracker;
  TrackedAxis(detail::TrackerSlot* slot, Axis axis) noexcept : slot_(slot), axis_(axis) {}
  detail::TrackerSlot* slot_ = nullptr;  // owned by the tracker
  Axis axis_{};
};

// A wait for a whole requirement: an intrusive node the caller owns (embed it in an op record, or use
// TrackerCallbackWaiter), so parking allocates nothing.
//
// Arm it with Tracker::wait_async(waiter, requirement). The callback then runs exactly once, with a null error when
// every entry has completed or with the error of a closed axis, unless Tracker::cancel(waiter) returned true first.
// Once the callback has started the waiter is the callback's: it may re-arm it, destroy it or hand it on; the tracker
// never touches a waiter after calling its callback.
//
// Lifetime: the waiter AND the requirement it was armed with must stay alive and unchanged until the callback has
// started or cancel() has returned (the waiter refers to the requirement's entries instead of copying them).
// Thread safety: one arming at a time (arming an armed waiter throws std::logic_error).
class TrackerWaiter {
 public:
  // What the tracker calls once the wait ends: (the waiter, null or a closed axis's error).
  using Callback = void (*)(TrackerWaiter& self, std::exception_ptr error) noexcept;

  // A waiter that calls `callback`; arm it with Tracker::wait_async.
  explicit TrackerWaiter(Callback callback) noexcept : callback_(callback) {}
  TrackerWaiter(const TrackerWaiter&) = delete;
  TrackerWaiter& operator=(const TrackerWaiter&) = delete;
  ~TrackerWaiter() {
    // relaxed: a debug check of the owner's own precondition; an armed waiter is a use-after-free waiting to happen.
    assert(state_.load(std::memory_order_relaxed) != kParked && state_.load(std::memory_order_relaxed) != kTransit &&
           "a TrackerWaiter was destroyed while armed: cancel() it first");
  }

 private:
  friend class Tracker;

  // kIdle -> kTransit (wait_async) -> kParked (on an axis's list) -> kTransit (detached by an advance) -> ... ->
  // kFired (its callback has started; kept until re-armed). cancel(): kParked -> kIdle under the axis's lock, or
  // kTransit -> kCancelRequested, which the transit owner acknowledges by storing kIdle. See README.md.
  enum : std::uint8_t { kIdle, kTransit, kCancelRequested, kParked, kFired };

  Callback callback_;  // immutable
  std::atomic<std::uint8_t> state_{kIdle};
  // kParked: the axis whose list holds this waiter; kFired: the axis whose firing list records the running callback
  // (null: fired inside wait_async). Written by the transit owner under that axis's lock, before state_ changes.
  std::atomic<detail::TrackerSlot*> slot_{nullptr};
  // Owned by whoever owns the waiter (its arming thread or a transit owner), or guarded by slot_'s lock while parked.
  TrackerWaiter* prev_ = nullptr;  // list links: an axis's parked list, or a transit owner's batch (next_ only)
  TrackerWaiter* next_ = nullptr;
  const FrontierEntry* entries_ = nullptr;  // the requirement (caller-owned)
  std::uint32_t count_ = 0;
  std::uint32_t index_ = 0;   // entries before it are complete
  std::uint64_t needed_ = 0;  // entries_[index_].epoch while parked: the sort key of the parked list
};

// A TrackerWaiter that stores a callable inline: fn(std::exception_ptr error), which must be noexcept.
template <class F>
class TrackerCallbackWaiter final : public TrackerWaiter {
  static_assert(std::is_nothrow_invocable_v<F&, std::exception_ptr>,
                "a tracker callback is called as fn(std::exception_ptr error) (null: satisfied) and must be noexcept: "
                "it runs on the advancing thread, which has no one to hand an exception to");

 public:
  // A waiter that calls `fn` (moved in).
  explicit TrackerCallbackWaiter(F fn) noexcept(std::is_nothrow_move_constructible_v<F>)
      : TrackerWaiter(&TrackerCallbackWaiter::trampoline), fn_(std::move(fn)) {}

 private:
  static void trampoline(TrackerWaiter& self, std::exception_ptr error) noexcept {
    static_cast<TrackerCallbackWaiter&>(self).fn_(std::move(error));
  }
  F fn_;
};

class Tracker {
 public:
  // Throws std::invalid_argument if options.max_axes is 0. Allocates every slot (see Cost).
  explicit Tracker(TrackerOptions options = {});
  ~Tracker();
  Tracker(const Tracker&) = delete;
  Tracker& operator=(const Tracker&) = delete;

  // Starts tracking `axis` at completed epoch 0. Throws std::invalid_argument for the null axis or one already
  // registered (retired axes stay registered), std::length_error past max_axes. Takes a mutex; any thread.
  TrackedAxis register_axis(Axis axis);
  // The handle of a registered axis, or an empty handle. Lock-free.
  [[nodiscard]] TrackedAxis find(Axis axis) const noexcept;
  [[nodiscard]] bool is_registered(Axis axis) const noexcept { return static_cast<bool>(find(axis)); }

  // Raises the axis's completed epoch to `epoch` and moves on the waiters that were waiting for it (on this thread,
  // without holding a lock; their callbacks may run before advance returns). Returns whether the epoch rose: false
  // when `epoch` is not above the completed epoch, or the axis is closed (failed or retired). Throws
  // std::invalid_argument for an unknown axis or an epoch above kMaxTrackedEpoch. Lock-free unless a waiter is due.
  bool advance(TrackedAxis axis, std::uint64_t epoch);
  bool advance(Axis axis, std::uint64_t epoch);

  // Whether a waiter may be parked on the axis: someone is waiting for its next completions now. A hint (it may be
  // stale by the time it returns), for pacing a completion poller; false for an unknown axis. Lock-free.
  [[nodiscard]] bool has_waiters(TrackedAxis axis) const noexcept;

  // The completed epoch (0 for an unknown axis). Lock-free.
  [[nodiscard]] std::uint64_t completed(TrackedAxis axis) const noexcept;
  [[nodiscard]] std::uint64_t completed(Axis axis) const noexcept;

  // Whether every entry of `requirement` has completed. False for a tainted requirement and for entries on unknown
  // axes. Lock-free.
  template <std::size_t N>
  [[nodiscard]] bool satisfied(const RequirementFrontier<N>& requirement) const noexcept {
    return !requirement.tainted() && satisfied_entries(requirement.entries());
  }

  // Arms `waiter` for `requirement` (which must outlive the arming: see TrackerWaiter). If it is already satisfied, or
  // one of its pending entries is on a closed axis, the callback runs on this thread before wait_async returns. An
  // empty requirement is satisfied. Throws (and changes nothing): std::invalid_argument for a tainted requirement, an
  // unregistered axis, an epoch above kMaxTrackedEpoch; std::logic_error if `waiter` is armed.
  template <std::size_t N>
  void wait_async(TrackerWaiter& waiter, const RequirementFrontier<N>& requirement) {
    arm(waiter, requirement.entries(), requirement.tainted());
  }

  // Disarms `waiter`. Returns true if this prevented its callback: it has not run and will not run. Returns false if
  // it was not armed or its callback has already started; then cancel returns only after that callback has finished
  // (waiting, yielding), unless called from inside that same callback, where it returns at once. Either way, once
  // cancel returns the callback is not running (bar that exception) and will not run, so the caller may destroy the
  // waiter. Call it from any thread after wait_async returned, one cancel per waiter at a time, and not while the
  // waiter's own callback may be re-arming it on another thread; two callbacks that cancel each other's waiters on two
  // threads would wait for each other forever.
  bool cancel(TrackerWaiter& waiter);

  // Closes `axis` with `error`: its completed epoch freezes, and every waiter that still needs more of it fails with
  // `error` (callbacks run on this thread, without a lock), now or when it reaches that entry. Returns false (and
  // changes nothing) if the axis was already closed. Throws std::invalid_argument for an unknown axis or a null error.
  bool fail(Axis axis, std::exception_ptr error);

  // Closes `axis` for good (its stream is gone): like fail() with an AxisRetiredError naming the final epoch, except
  // that retiring a failed axis keeps its error. Completed epochs stay queryable. Throws std::invalid_argument for an
  // unknown axis. Retiring twice does nothing.
  void retire_axis(Axis axis);

  // The error the axis was closed with, or null while it is open (or unknown).
  [[nodiscard]] std::exception_ptr error(Axis axis) const;

 private:
  struct IndexEntry;
  enum class Park : std::uint8_t;

  [[nodiscard]] detail::TrackerSlot* slot_of(Axis axis) const noexcept;
  [[nodiscard]] detail::TrackerSlot& known_slot(Axis axis, const char* operation) const;
  [[nodiscard]] bool satisfied_entries(std::span<const FrontierEntry> entries) const noexcept;
  void arm(TrackerWaiter& waiter, std::span<const FrontierEntry> entries, bool tainted);
  void advance_slow(detail::TrackerSlot& slot);
  TrackerWaiter* take(detail::TrackerSlot& slot, bool all, bool& more) noexcept;
  static void settle_locked(detail::TrackerSlot& slot) noexcept;
  void drive(TrackerWaiter& waiter, detail::TrackerSlot* via) noexcept;
  Park park(TrackerWaiter& waiter, detail::TrackerSlot& slot, std::uint64_t needed, std::exception_ptr& error) noexcept;
  void finish(TrackerWaiter& waiter, std::exception_ptr error, detail::TrackerSlot* via) noexcept;
  bool close(detail::TrackerSlot& slot, std::exception_ptr error, bool retire);

  // Immutable after construction.
  std::unique_ptr<detail::TrackerSlot[]> slots_;  // max_axes_ slots, handed out in registration order
  std::unique_ptr<IndexEntry[]> index_;           // open addressing, axis bits -> slot; entries never removed
  std::uint64_t index_mask_ = 0;                  // index size - 1 (a power of two, at least 2 * max_axes_)
  std::uint32_t max_axes_ = 0;

  std::mutex registry_mutex_;     // serialises register_axis
  std::uint32_t registered_ = 0;  // guarded by registry_mutex_
};

}  // namespace depengine
