#include <string>
#include <thread>

#include <depengine/frontier/tracker.h>
#include <depengine/support/cache_line.h>
#include <depengine/support/spinlock.h>

namespace depengine {
namespace detail {

// A callback in progress, on the firing thread's stack, listed in the firing axis's slot while the callback runs:
// what lets cancel() wait for a running callback although the firer never touches the waiter after calling it.
struct TrackerFiring {
  const TrackerWaiter* waiter;
  std::thread::id thread;
  TrackerFiring* next;
};

// One axis. `word` and `min_needed` are the lock-free surface; everything else is the slow path, under `lock`.
// One cache line per axis: the advancing thread of one stream never shares a line with another stream's.
struct alignas(support::kCacheLine) TrackerSlot {
  // completed epoch << 2 | kClosed | kWaiters. Written by advance() (compare-exchange), by park() (fetch_or of
  // kWaiters, under lock), by settle_locked() (fetch_and of kWaiters, under lock) and by close() (a compare-exchange
  // adding kClosed, under lock).
  std::atomic<std::uint64_t> word{0};
  // A lower bound of the smallest epoch any parked waiter needs (kNobody when none): lets advance() skip the lock
  // when waiters are parked but none is due. Written only under lock; read by advance() after its compare-exchange.
  std::atomic<std::uint64_t> min_needed;
  support::Spinlock lock;
  Axis axis{};                       // immutable after registration
  TrackerWaiter* head = nullptr;     // parked waiters sorted by ascending needed_; guarded by lock
  TrackerWaiter* tail = nullptr;     // guarded by lock
  TrackerFiring* firings = nullptr;  // callbacks in progress fired from this slot; guarded by lock
  std::exception_ptr error;          // set once by close(), under lock; read under lock
};
static_assert(sizeof(TrackerSlot) == 64, "one axis's tracker state is one cache line");

}  // namespace detail

using detail::TrackerFiring;
using detail::TrackerSlot;

namespace {

constexpr std::uint64_t kWaiters = 1;  // the axis's parked list may be non-empty
constexpr std::uint64_t kClosed = 2;   // failed or retired: the epoch is frozen
constexpr unsigned kEpochShift = 2;
constexpr std::uint64_t kNobody = ~std::uint64_t{0};

constexpr std::uint64_t epoch_of(std::uint64_t word) noexcept { return word >> kEpochShift; }

std::uint64_t hash(std::uint64_t bits) noexcept {
  // Fibonacci hashing, then the high bits folded down: axes differ mostly in their low (ordinal) bits.
  const std::uint64_t h = bits * 0x9e3779b97f4a7c15ULL;
  return h ^ (h >> 29);
}

}  // namespace

struct Tracker::IndexEntry {
  // The axis bits (0: empty). Published with release after `slot`, read with acquire by lookups.
  std::atomic<std::uint64_t> key{0};
  TrackerSlot* slot = nullptr;  // written once, before `key`
};

enum class Tracker::Park : std::uint8_t { kParked, kSatisfied, kClosed, kCancelled };

AxisRetiredError::AxisRetiredError(Axis axis, std::uint64_t final_epoch)
    : std::runtime_error("axis " + to_string(axis) + " was retired at completed epoch " + std::to_string(final_epoch) +
                         "; a wait needs a later epoch, which will never complete"),
      axis_(axis),
      final_epoch_(final_epoch) {}

Tracker::Tracker(TrackerOptions options) : max_axes_(options.max_axes) {
  if (max_axes_ == 0) throw std::invalid_argument("Tracker: TrackerOptions::max_axes must be at least 1");
  std::uint64_t size = 2;
  while (size < 2 * std::uint64_t{max_axes_}) size *= 2;
  index_mask_ = size - 1;
  slots_ = std::make_unique<TrackerSlot[]>(max_axes_);
  for (std::uint32_t i = 0; i < max_axes_; ++i) {
    // relaxed: not yet shared with any other thread.
    slots_[i].min_needed.store(kNobody, std::memory_order_relaxed);
  }
  index_ = std::make_unique<IndexEntry[]>(size);
}

Tracker::~Tracker() {
  const auto error = std::make_exception_ptr(std::logic_error("the tracker was destroyed while a waiter was parked"));
  for (std::uint32_t i = 0; i < registered_; ++i) {
    TrackerSlot& slot = slots_[i];
    bool more = true;
    while (more) {
      TrackerWaiter* waiter = take(slot, /*all=*/true, more);
      if (waiter == nullptr) break;
      finish(*waiter, error, &slot);
    }
  }
}

// ---- the axis index --------------------------------------------------------------------------------------------

TrackerSlot* Tracker::slot_of(Axis axis) const noexcept {
  const std::uint64_t bits = axis.bits();
  if (bits == 0) return nullptr;
  for (std::uint64_t i = hash(bits) & index_mask_;; i = (i + 1) & index_mask_) {
    // acquire: pairs with the release store in register_axis, so `slot` (written before it) is visible.
    const std::uint64_t key = index_[i].key.load(std::memory_order_acquire);
    if (key == bits) return index_[i].slot;
    if (key == 0) return nullptr;  // entries are never removed, so the probe ends at the first empty one
  }
}

TrackerSlot& Tracker::known_slot(Axis axis, const char* operation) const {
  TrackerSlot* slot = slot_of(axis);
  if (slot == nullptr) {
    throw std::invalid_argument(std::string("Tracker::") + operation + ": axis " + to_string(axis) +
                                " is not registered");
  }
  return *slot;
}

TrackedAxis Tracker::register_axis(Axis axis) {
  if (axis.is_null()) throw std::invalid_argument("Tracker::register_axis: the null axis cannot be tracked");
  std::lock_guard guard(registry_mutex_);
  if (slot_of(axis) != nullptr) {
    throw std::invalid_argument("Tracker::register_axis: axis " + to_string(axis) + " is already registered");
  }
  if (registered_ == max_axes_) {
    throw std::length_error("Tracker::register_axis: all " + std::to_string(max_axes_) +
                            " axis slots are used (TrackerOptions::max_axes; retired axes keep their slots)");
  }
  TrackerSlot& slot = slots_[registered_++];
  slot.axis = axis;
  std::uint64_t i = hash(axis.bits()) & index_mask_;
  // relaxed: only registrations (serialised by registry_mutex_) write keys.
  while (index_[i].key.load(std::memory_order_relaxed) != 0) i = (i + 1) & index_mask_;
  index_[i].slot = &slot;
  // release: pairs with the acquire load in slot_of(), publishing `slot` and the slot's axis.
  index_[i].key.store(axis.bits(), std::memory_order_release);
  return TrackedAxis(&slot, axis);
}

TrackedAxis Tracker::find(Axis axis) const noexcept {
  TrackerSlot* slot = slot_of(axis);
  return slot != nullptr ? TrackedAxis(slot, axis) : TrackedAxis();
}

// ---- queries ---------------------------------------------------------------------------------------------------

std::uint64_t Tracker::completed(TrackedAxis axis) const noexcept {
  if (!axis) return 0;
  // acquire: pairs with the release compare-exchange in advance(), so the advancer's prior writes are visible.
  return epoch_of(axis.slot_->word.load(std::memory_order_acquire));
}

std::uint64_t Tracker::completed(Axis axis) const noexcept { return completed(find(axis)); }

bool Tracker::has_waiters(TrackedAxis axis) const noexcept {
  // relaxed: a hint that orders nothing; kWaiters is set and cleared under the slot's lock (park, settle_locked).
  return axis && (axis.slot_->word.load(std::memory_order_relaxed) & kWaiters) != 0;
}

bool Tracker::satisfied_entries(std::span<const FrontierEntry> entries) const noexcept {
  for (const FrontierEntry& entry : entries) {
    const TrackerSlot* slot = slot_of(entry.axis);
    // acquire: pairs with the release compare-exchange in advance().
    if (slot == nullptr || epoch_of(slot->word.load(std::memory_order_acquire)) < entry.epoch) return false;
  }
  return true;
}

std::exception_ptr Tracker::error(Axis axis) const {
  TrackerSlot* slot = slot_of(axis);
  if (slot == nullptr) return nullptr;
  std::lock_guard guard(slot->lock);
  return slot->error;
}

// ---- advance ---------------------------------------------------------------------------------------------------

bool Tracker::advance(Axis axis, std::uint64_t epoch) {
  TrackerSlot& slot = known_slot(axis, "advance");
  return advance(TrackedAxis(&slot, axis), epoch);
}

bool Tracker::advance(TrackedAxis axis, std::uint64_t epoch) {
  if (!axis) throw std::invalid_argument("Tracker::advance: empty TrackedAxis handle");
  if (epoch > kMaxTrackedEpoch) {
    throw std::invalid_argument("Tracker::advance: epoch " + std::to_string(epoch) + " of axis " +
                                to_string(axis.axis()) + " exceeds kMaxTrackedEpoch");
  }
  TrackerSlot& slot = *axis.slot_;
  // relaxed: a first guess for the compare-exchange below, which validates it.
  std::uint64_t word = slot.word.load(std::memory_order_relaxed);
  do {
    if ((word & kClosed) != 0 || epoch_of(word) >= epoch) return false;
    // acq_rel on success. Release: pairs with the acquire loads in completed(), satisfied_entries(), drive() and
    // take(), and with park()'s fetch_or, publishing what this thread did before advancing. Acquire: pairs with
    // the acq_rel fetch_or in park(): if this exchange comes after a registration's fetch_or in the word's
    // modification order (so it sees kWaiters), it also sees the min_needed that registration stored before it.
    // relaxed on failure: the loop retries with the fresh word.
  } while (!slot.word.compare_exchange_weak(word, (epoch << kEpochShift) | (word & kWaiters), std::memory_order_acq_rel,
                                            std::memory_order_relaxed));
  // `word` is the value this exchange replaced. kWaiters clear there means no waiter was parked when the epoch rose:
  // a registration after it in the word's order reads the new epoch from its own fetch_or (see park()).
  // relaxed: ordered by the acquire of the exchange above (see there).
  if ((word & kWaiters) != 0 && epoch >= slot.min_needed.load(std::memory_order_relaxed)) advance_slow(slot);
  return true;
}

void Tracker::advance_slow(TrackerSlot& slot) {
  // One waiter at a time: the ones not yet taken stay parked, so a callback fired from here may cancel them at once
  // (a private batch would leave them in transit, owned by this thread, and such a cancel would wait for us forever).
  bool more = true;
  while (more) {
    TrackerWaiter* waiter = take(slot, /*all=*/false, more);
    if (waiter == nullptr) return;
    ++waiter->index_;  // the entry it was parked on is complete
    drive(*waiter, &slot);
  }
}

// Unparks the head waiter of `slot` if it is due (or if `all`), making the caller its transit owner, and settles the
// slot. `more` says whether another waiter may be due after it.
TrackerWaiter* Tracker::take(TrackerSlot& slot, bool all, bool& more) noexcept {
  std::lock_guard guard(slot.lock);
  // acquire: pairs with the release compare-exchange of whichever advance() raised the epoch (perhaps another
  // thread's, later than ours): the waiter we move on sees that advancer's writes.
  const std::uint64_t epoch = epoch_of(slot.word.load(std::memory_order_acquire));
  TrackerWaiter* waiter = slot.head;
  if (waiter != nullptr && (all || waiter->needed_ <= epoch)) {
    slot.head = waiter->next_;
    (slot.head != nullptr ? slot.head->prev_ : slot.tail) = nullptr;
    // relaxed: under slot.lock; cancel() re-reads the state under the same lock, and a transit cancellation is
    // handed over by the acq_rel exchanges on state_ (see cancel()).
    waiter->state_.store(TrackerWaiter::kTransit, std::memory_order_relaxed);
  } else {
    waiter = nullptr;
  }
  more = waiter != nullptr && slot.head != nullptr && (all || slot.head->needed_ <= epoch);
  settle_locked(slot);
  return waiter;
}

// Makes min_needed exact again and clears kWaiters if the parked list is empty. Under slot.lock.
void Tracker::settle_locked(TrackerSlot& slot) noexcept {
  // relaxed: min_needed is only written under slot.lock; a too-small bound only costs advance() a slow path.
  slot.min_needed.store(slot.head != nullptr ? slot.head->needed_ : kNobody, std::memory_order_relaxed);
  // relaxed: every write of kWaiters is under slot.lock, and a stale kWaiters only sends an advance() to the slow
  // path for nothing; clearing it is safe because the list is empty and only a registration under this lock refills it.
  if (slot.head == nullptr) slot.word.fetch_and(~kWaiters, std::memory_order_relaxed);
}

// ---- waiters ---------------------------------------------------------------------------------------------------

void Tracker::arm(TrackerWaiter& waiter, std::span<const FrontierEntry> entries, bool tainted) {
  if (tainted) {
    throw std::invalid_argument(
        "Tracker::wait_async: the requirement is tainted (it lost entries on overflow), so it can never be known "
        "satisfied; wait for the producing ops another way, or build an untainted requirement");
  }
  std::exception_ptr error;
  for (const FrontierEntry& entry : entries) {
    TrackerSlot& slot = known_slot(entry.axis, "wait_async");
    if (entry.epoch > kMaxTrackedEpoch) {
      throw std::invalid_argument("Tracker::wait_async: epoch " + std::to_string(entry.epoch) + " of axis " +
                                  to_string(entry.axis) + " exceeds kMaxTrackedEpoch");
    }
    // acquire: pairs with the release compare-exchange in advance(); a closed axis's error is then read under lock.
    const std::uint64_t word = slot.word.load(std::memory_order_acquire);
    if (!error && (word & kClosed) != 0 && epoch_of(word) < entry.epoch) {
      std::lock_guard guard(slot.lock);
      error = slot.error;
    }
  }
  // acquire: pairs with the release stores of a previous owner (the acknowledgement of a cancellation).
  std::uint8_t state = waiter.state_.load(std::memory_order_acquire);
  if (state != TrackerWaiter::kIdle && state != TrackerWaiter::kFired) {
    throw std::logic_error("Tracker::wait_async: the waiter is already armed");
  }
  // relaxed: the arming thread owns an idle or fired waiter; cancel() may not run concurrently with wait_async.
  waiter.state_.store(TrackerWaiter::kTransit, std::memory_order_relaxed);
  waiter.entries_ = entries.data();
  waiter.count_ = static_cast<std::uint32_t>(entries.size());
  waiter.index_ = 0;
  if (error) {
    finish(waiter, std::move(error), nullptr);
  } else {
    drive(waiter, nullptr);
  }
}

// The transit owner's loop: skip the entries that are complete, park on the first that is not, or fire. `via` is the
// slot whose advance (or close) moved the waiter on, null for the arming thread.
void Tracker::drive(TrackerWaiter& waiter, TrackerSlot* via) noexcept {
  while (waiter.index_ < waiter.count_) {
    const FrontierEntry& entry = waiter.entries_[waiter.index_];
    TrackerSlot& slot = *slot_of(entry.axis);  // checked at arming; slots are never removed
    // acquire: pairs with the release compare-exchange in advance().
    const std::uint64_t word = slot.word.load(std::memory_order_acquire);
    if (epoch_of(word) >= entry.epoch) {
      ++waiter.index_;
      continue;
    }
    std::exception_ptr error;
    switch (park(waiter, slot, entry.epoch, error)) {
      case Park::kParked:
        return;
      case Park::kSatisfied:
        ++waiter.index_;
        continue;
      case Park::kClosed:
        finish(waiter, std::move(error), via);
        return;
      case Park::kCancelled:
        // release: pairs with the acquire load in cancel()'s wait for kIdle; this is our last touch of the waiter.
        waiter.state_.store(TrackerWaiter::kIdle, std::memory_order_release);
        return;
    }
  }
  finish(waiter, nullptr, via);
}

// Parks `waiter` on `slot` for epoch `needed` unless the epoch is complete, the axis closed, or a cancel requested.
Tracker::Park Tracker::park(TrackerWaiter& waiter, TrackerSlot& slot, std::uint64_t needed,
                            std::exception_ptr& error) noexcept {
  std::lock_guard guard(slot.lock);
  // Lower min_needed BEFORE the fetch_or below publishes it (release), so an advance() that sees our kWaiters also
  // sees this bound. relaxed: min_needed is only written under slot.lock, which we hold.
  if (needed < slot.min_needed.load(std::memory_order_relaxed)) {
    slot.min_needed.store(needed, std::memory_order_relaxed);
  }
  // acq_rel: the registration half of the hand-off with advance() (README.md, "The missed-wake race"). Both sides are
  // read-modify-writes of this one word, so its modification order decides: if advance()'s compare-exchange comes
  // first, this fetch_or returns the new epoch (acquire: with the advancer's writes) and we do not park; if this comes
  // first, the compare-exchange sees kWaiters (release: with min_needed) and takes the slow path, which waits for
  // this lock and finds the waiter linked.
  const std::uint64_t word = slot.word.fetch_or(kWaiters, std::memory_order_acq_rel);
  Park outcome = Park::kParked;
  if (epoch_of(word) >= needed) {
    outcome = Park::kSatisfied;
  } else if ((word & kClosed) != 0) {
    outcome = Park::kClosed;
    error = slot.error;
  } else {
    // relaxed: cancel() re-checks slot_ under this lock; the state exchange below publishes it.
    waiter.slot_.store(&slot, std::memory_order_relaxed);
    waiter.needed_ = needed;
    std::uint8_t expected = TrackerWaiter::kTransit;
    // acq_rel: pairs with cancel()'s exchange kTransit -> kCancelRequested; whichever comes first wins.
    if (waiter.state_.compare_exchange_strong(expected, TrackerWaiter::kParked, std::memory_order_acq_rel,
                                              std::memory_order_acquire)) {
      TrackerWaiter* after = slot.tail;  // sorted insertion from the tail: epochs are mostly awaited in order
      while (after != nullptr && after->needed_ > needed) after = after->prev_;
      waiter.prev_ = after;
      waiter.next_ = after != nullptr ? after->next_ : slot.head;
      (waiter.next_ != nullptr ? waiter.next_->prev_ : slot.tail) = &waiter;
      (after != nullptr ? after->next_ : slot.head) = &waiter;
      slot.min_needed.store(slot.head->needed_, std::memory_order_relaxed);  // relaxed: under slot.lock
      return Park::kParked;
    }
    outcome = Park::kCancelled;
  }
  settle_locked(slot);  // not parked: undo what the registration announced
  return outcome;
}

// Fires `waiter` with `error` (null: satisfied) unless a cancellation was requested. The callback runs with no lock
// held; `via`'s firing list records it meanwhile, so that cancel() can wait for it.
void Tracker::finish(TrackerWaiter& waiter, std::exception_ptr error, TrackerSlot* via) noexcept {
  TrackerFiring firing{&waiter, std::this_thread::get_id(), nullptr};
  {
    std::unique_lock<support::Spinlock> guard;
    if (via != nullptr) guard = std::unique_lock(via->lock);
    // relaxed: published by the exchange below.
    waiter.slot_.store(via, std::memory_order_relaxed);
    std::uint8_t expected = TrackerWaiter::kTransit;
    // acq_rel: pairs with cancel()'s exchange kTransit -> kCancelRequested; release also publishes slot_ to cancel().
    if (!waiter.state_.compare_exchange_strong(expected, TrackerWaiter::kFired, std::memory_order_acq_rel,
                                               std::memory_order_acquire)) {
      // release: pairs with the acquire load in cancel()'s wait for kIdle; our last touch of the waiter.
      waiter.state_.store(TrackerWaiter::kIdle, std::memory_order_release);
      return;
    }
    if (via != nullptr) {
      firing.next = via->firings;
      via->firings = &firing;
    }
  }
  const TrackerWaiter::Callback callback = waiter.callback_;
  callback(waiter, std::move(error));  // from here on the waiter is the callback's: do not touch it
  if (via != nullptr) {
    std::lock_guard guard(via->lock);
    TrackerFiring** link = &via->firings;
    while (*link != &firing) link = &(*link)->next;
    *link = firing.next;
  }
}

bool Tracker::cancel(TrackerWaiter& waiter) {
  for (;;) {
    // acquire: pairs with the release side of every state change (the exchanges in park() and finish(), the
    // acknowledging kIdle stores).
    const std::uint8_t state = waiter.state_.load(std::memory_order_acquire);
    if (state == TrackerWaiter::kIdle) return false;
    if (state == TrackerWaiter::kCancelRequested) {  // another cancel() won; wait for the acknowledgement
      while (waiter.state_.load(std::memory_order_acquire) != TrackerWaiter::kIdle) std::this_thread::yield();
      return false;
    }
    if (state == TrackerWaiter::kTransit) {
      std::uint8_t expected = TrackerWaiter::kTransit;
      // acq_rel: pairs with the transit owner's exchanges in park() and finish(); whichever comes first wins.
      if (waiter.state_.compare_exchange_strong(expected, TrackerWaiter::kCancelRequested, std::memory_order_acq_rel,
                                                std::memory_order_acquire)) {
        // acquire: pairs with the owner's release store of kIdle, after its last touch of the waiter.
        while (waiter.state_.load(std::memory_order_acquire) != TrackerWaiter::kIdle) std::this_thread::yield();
        return true;
      }
      continue;
    }
    // kParked or kFired: slot_ names the axis whose lock decides. relaxed: re-checked under that lock.
    TrackerSlot* slot = waiter.slot_.load(std::memory_order_relaxed);
    if (slot == nullptr) return false;  // fired inside wait_async, which has returned: the callback has finished
    bool running_elsewhere = false;
    {
      std::lock_guard guard(slot->lock);
      // acquire: pairs with the release exchanges of park() and finish(), which may have run under ANOTHER axis's
      // lock (the waiter moved on since we read slot_): slot_ read below is then at least as new as this state, and
      // the check that it names this slot is what makes the state ours to decide on.
      const std::uint8_t now = waiter.state_.load(std::memory_order_acquire);
      const bool here = waiter.slot_.load(std::memory_order_relaxed) == slot;
      if (here && now == TrackerWaiter::kParked) {  // parked on this axis: kParked changes only under this lock
        (waiter.prev_ != nullptr ? waiter.prev_->next_ : slot->head) = waiter.next_;
        (waiter.next_ != nullptr ? waiter.next_->prev_ : slot->tail) = waiter.prev_;
        settle_locked(*slot);
        waiter.state_.store(TrackerWaiter::kIdle, std::memory_order_relaxed);  // relaxed: under the lock
        return true;
      }
      if (here && now == TrackerWaiter::kFired) {  // fired from this axis: its firing record is listed here if running
        for (const TrackerFiring* f = slot->firings; f != nullptr; f = f->next) {
          if (f->waiter != &waiter) continue;
          if (f->thread == std::this_thread::get_id()) return false;  // called from inside its own callback
          running_elsewhere = true;
        }
        if (!running_elsewhere) return false;  // its callback has finished
      }
    }
    std::this_thread::yield();  // moved on meanwhile, or its callback is running on another thread: look again
  }
}

// ---- closing ---------------------------------------------------------------------------------------------------

bool Tracker::fail(Axis axis, std::exception_ptr error) {
  if (!error) throw std::invalid_argument("Tracker::fail: a null error");
  return close(known_slot(axis, "fail"), std::move(error), /*retire=*/false);
}

void Tracker::retire_axis(Axis axis) { close(known_slot(axis, "retire_axis"), nullptr, /*retire=*/true); }

bool Tracker::close(TrackerSlot& slot, std::exception_ptr error, bool retire) {
  {
    std::lock_guard guard(slot.lock);
    if (slot.error) return false;  // closed already: the first closing wins
    // relaxed: a first guess for the compare-exchange below, which validates it.
    std::uint64_t word = slot.word.load(std::memory_order_relaxed);
    for (;;) {
      // Built before the epoch freezes, so that a failed allocation leaves the axis open; rebuilt if an advance
      // raced us, so that the message names the final epoch.
      if (retire) error = std::make_exception_ptr(AxisRetiredError(slot.axis, epoch_of(word)));
      // acq_rel: freezes the epoch (advance() stops at kClosed). Release: pairs with the acquire loads that then see
      // kClosed (they read the error under this lock). Acquire: we read the advancers' epoch (their release).
      if (slot.word.compare_exchange_weak(word, word | kClosed, std::memory_order_acq_rel, std::memory_order_relaxed)) {
        break;
      }
    }
    slot.error = error;  // read under this lock by everyone who sees kClosed
  }
  // Move every parked waiter on, one at a time as advance_slow() does. One whose entry here completed before the
  // epoch froze (an advance that has not reached its slow path yet) goes on to its next entry; the others re-park,
  // find kClosed and fail with `error`. No new waiter parks here from now on (park() sees kClosed).
  bool more = true;
  while (more) {
    TrackerWaiter* waiter = take(slot, /*all=*/true, more);
    if (waiter == nullptr) break;
    drive(*waiter, &slot);
  }
  return true;
}

}  // namespace depengine
