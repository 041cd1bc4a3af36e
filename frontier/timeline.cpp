#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <optional>

#include <depengine/frontier/timeline.h>

namespace depengine {
namespace {

using detail::TimelineLink;

// Circular doubly-linked lists with a sentinel; every call below runs under the timeline's lock.
void make_empty(TimelineLink& sentinel) noexcept { sentinel.prev = sentinel.next = &sentinel; }
bool is_empty(const TimelineLink& sentinel) noexcept { return sentinel.next == &sentinel; }
void link_after(TimelineLink& position, TimelineLink& node) noexcept {
  node.prev = &position;
  node.next = position.next;
  position.next->prev = &node;
  position.next = &node;
}
void unlink(TimelineLink& node) noexcept {
  node.prev->next = node.next;
  node.next->prev = node.prev;
  node.prev = node.next = nullptr;
}

std::string quoted(const std::string& name) {
  return name.empty() ? std::string("timeline") : "timeline '" + name + "'";
}

// A wait far enough in the future to be "forever" without overflowing steady_clock arithmetic.
constexpr std::chrono::nanoseconds kLongestTimedWait = std::chrono::hours(24 * 365 * 100);

}  // namespace

TimelineOrderError::TimelineOrderError(const std::string& timeline, std::uint64_t current, std::uint64_t requested,
                                       bool external)
    : std::invalid_argument(quoted(timeline) + ": " + (external ? "signal_external(" : "signal(") +
                            std::to_string(requested) + ") does not exceed the current value " +
                            std::to_string(current) + "; a timeline's value must strictly increase"),
      current_(current),
      requested_(requested) {}

static_assert(alignof(Timeline) == 64,
              "value_ (read by queriers) and lock_ (written by every signaller and waiter) start separate cache lines");

// One engine signal: `previous` is the engine value (watermark) just before it, so this record is the first engine
// signal to reach v exactly when previous < v <= value.
struct Timeline::Record {
  std::uint64_t value = 0;
  std::uint64_t previous = 0;
  std::uint64_t sequence = 0;  // 0 for the first engine signal, 1 for the next, ...
  TimelineFrontier knowledge;
};

// A pending promise: `value` will be signalled once `requirement` has completed on `owner`'s axes.
struct Timeline::Promise {
  std::uint64_t value = 0;
  const void* owner = nullptr;
  TimelineRequirement requirement;
};

// A callback in progress, on the firing thread's stack, linked into firings_ while `waiter`'s callback runs: what
// lets cancel() wait for a running callback without the firer touching the waiter after calling it.
struct Timeline::Firing : TimelineLink {
  const TimelineWaiter* waiter = nullptr;
  std::thread::id thread;
};

// Waiters detached from armed_ (under the lock) and not yet fired; a cancel() can still unlink them.
class Timeline::Batch {
 public:
  Batch() noexcept { make_empty(head); }
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;
  [[nodiscard]] bool empty() const noexcept { return is_empty(head); }
  TimelineLink head;
};

Timeline::Timeline(TimelineOptions options)
    : history_(options.history),
      checkpoints_(options.checkpoints),
      stride_(options.checkpoint_stride == 0 ? options.history : options.checkpoint_stride),
      promise_capacity_(options.promises),
      name_(std::move(options.name)) {
  if (history_ == 0) throw std::invalid_argument(quoted(name_) + ": TimelineOptions::history must be at least 1");
  records_ = std::make_unique<Record[]>(std::size_t{history_} + checkpoints_);
  promises_ = std::make_unique<Promise[]>(promise_capacity_);
  make_empty(armed_);
  make_empty(firings_);
}

Timeline::~Timeline() {
  Batch batch;
  {
    std::lock_guard guard(lock_);
    detach_reached_locked(~std::uint64_t{0}, batch);
  }
  if (!batch.empty()) {
    fire(batch, TimelineWaitResult::failed(std::make_exception_ptr(
                    std::logic_error(quoted(name_) + " was destroyed while waiters were armed on it"))));
  }
}

std::exception_ptr Timeline::error() const {
  std::lock_guard guard(lock_);
  return error_;
}

void Timeline::publish_value(std::uint64_t value) noexcept {
  // release: pairs with the acquire load in query() (and the lock-free check in poll()), publishing everything the
  // signaller did before signalling. Written only under lock_, so no two stores race.
  value_.store(value, std::memory_order_release);
  // Promises the value has reached are moot: a waiter for them now imports the signal instead.
  while (promise_count_ > 0 && promise_at_locked(0).value <= value) {
    if (++promise_head_ == promise_capacity_) promise_head_ = 0;
    --promise_count_;
  }
}

void Timeline::check_order_locked(std::uint64_t value, bool external) const {
  if (error_) std::rethrow_exception(error_);
  // relaxed: value_ is only written under lock_, which we hold.
  const std::uint64_t current = value_.load(std::memory_order_relaxed);
  if (value <= current) throw TimelineOrderError(name_, current, value, external);
}

void Timeline::signal_locked(std::uint64_t value, const TimelineFrontier& knowledge, Batch& batch) {
  // relaxed: watermark_ is only written under lock_, which we hold; readers use it as a diagnostic.
  record_signal_locked(value, watermark_.load(std::memory_order_relaxed), knowledge);
  watermark_.store(value, std::memory_order_relaxed);
  publish_value(value);
  detach_reached_locked(value, batch);
}

void Timeline::signal(std::uint64_t value, const TimelineFrontier& knowledge) {
  Batch batch;
  {
    std::lock_guard guard(lock_);
    check_order_locked(value, /*external=*/false);
    signal_locked(value, knowledge, batch);
  }
  // Every waiter detached here waited for a value in (previous value, value]: this signal is the first to reach it,
  // so its import is exactly `knowledge` (rule 2 of the header).
  if (!batch.empty()) fire(batch, TimelineWaitResult::reached(knowledge));
}

bool Timeline::raise(std::uint64_t value, const TimelineFrontier& knowledge) {
  Batch batch;
  {
    std::lock_guard guard(lock_);
    // relaxed: value_ is only written under lock_, which we hold.
    if (error_ || value <= value_.load(std::memory_order_relaxed)) return false;
    signal_locked(value, knowledge, batch);
  }
  if (!batch.empty()) fire(batch, TimelineWaitResult::reached(knowledge));  // as in signal()
  return true;
}

bool Timeline::promise(std::uint64_t value, const void* owner, const TimelineRequirement& requirement) {
  if (owner == nullptr) throw std::invalid_argument(quoted(name_) + ": promise() needs an owner");
  Batch batch;
  {
    std::lock_guard guard(lock_);
    // relaxed: value_ is only written under lock_, which we hold.
    if (error_ || requirement.tainted() || value <= value_.load(std::memory_order_relaxed) || promise_capacity_ == 0) {
      return false;
    }
    if (promise_count_ > 0 && promise_at_locked(promise_count_ - 1).value >= value) return false;
    if (promise_count_ == promise_capacity_) {  // evict the oldest: its late waiters take a later promise instead
      if (++promise_head_ == promise_capacity_) promise_head_ = 0;
      --promise_count_;
    }
    Promise& promise = promise_at_locked(promise_count_);
    promise.value = value;
    promise.owner = owner;
    promise.requirement = requirement;
    ++promise_count_;
    detach_promised_locked(value, owner, batch);
  }
  // Every waiter detached here had no promise of this owner at or above its value (it would have fired then), so this
  // is the smallest one that covers it.
  if (!batch.empty()) fire(batch, TimelineWaitResult::promised(requirement));
  return true;
}

void Timeline::signal_external(std::uint64_t value) {
  Batch batch;
  TimelineFrontier knowledge;
  {
    std::lock_guard guard(lock_);
    check_order_locked(value, /*external=*/true);
    publish_value(value);
    detach_reached_locked(value, batch);
    // The detached waiters' values lie above the watermark: each imports the newest engine record, tainted (rule 3),
    // or the empty tainted frontier (rule 4) — the same for all of them.
    if (!batch.empty()) knowledge = import_locked(value);
  }
  if (!batch.empty()) fire(batch, TimelineWaitResult::reached(knowledge));
}

bool Timeline::fail(std::exception_ptr error) {
  if (!error) throw std::invalid_argument(quoted(name_) + ": fail() needs an error");
  Batch batch;
  {
    std::lock_guard guard(lock_);
    if (error_) return false;
    error_ = error;
    // release: pairs with the acquire load in failed(), so a thread that sees the flag sees error_.
    failed_.store(true, std::memory_order_release);
    promise_count_ = 0;
    detach_reached_locked(~std::uint64_t{0}, batch);
  }
  if (!batch.empty()) fire(batch, TimelineWaitResult::failed(std::move(error)));
  return true;
}

void Timeline::record_signal_locked(std::uint64_t value, std::uint64_t previous, const TimelineFrontier& knowledge) {
  Record* const recent = records_.get();
  std::uint32_t slot;
  if (recent_count_ < history_) {
    slot = recent_head_ + recent_count_;
    if (slot >= history_) slot -= history_;
    ++recent_count_;
  } else {
    // The ring is full: the oldest record leaves it, kept as a checkpoint if its sequence falls on the stride.
    slot = recent_head_;
    if (++recent_head_ == history_) recent_head_ = 0;
    const Record& evicted = recent[slot];
    if (checkpoints_ > 0 && evicted.sequence % stride_ == 0) {
      Record* const older = recent + history_;
      std::uint32_t at;
      if (checkpoint_count_ < checkpoints_) {
        at = checkpoint_head_ + checkpoint_count_;
        if (at >= checkpoints_) at -= checkpoints_;
        ++checkpoint_count_;
      } else {
        at = checkpoint_head_;
        if (++checkpoint_head_ == checkpoints_) checkpoint_head_ = 0;
      }
      older[at] = evicted;
    }
  }
  Record& record = recent[slot];
  record.value = value;
  record.previous = previous;
  record.sequence = signals_++;
  record.knowledge = knowledge;
}

TimelineFrontier Timeline::import_locked(std::uint64_t value) const {
  if (value == 0) return {};  // rule 1: nothing had to happen
  // Scan one ring from its newest record to its oldest: the record that first reached `value` (rule 2), else the
  // newest record at or below it (rule 3). Every record of the recent ring is newer than every checkpoint, so a floor
  // found in the recent ring ends the search.
  const Record* floor = nullptr;
  auto scan = [&](const Record* ring, std::uint32_t head, std::uint32_t count, std::uint32_t size) -> const Record* {
    for (std::uint32_t k = 0; k < count; ++k) {
      std::uint32_t i = head + count - 1 - k;
      if (i >= size) i -= size;
      const Record& r = ring[i];
      if (r.previous < value && value <= r.value) return &r;
      if (r.value <= value) {
        floor = &r;
        return nullptr;
      }
    }
    return nullptr;
  };
  if (const Record* exact = scan(records_.get(), recent_head_, recent_count_, history_)) return exact->knowledge;
  if (floor == nullptr && checkpoints_ > 0) {
    if (const Record* exact = scan(records_.get() + history_, checkpoint_head_, checkpoint_count_, checkpoints_)) {
      return exact->knowledge;
    }
  }
  TimelineFrontier result = floor != nullptr ? floor->knowledge : TimelineFrontier{};  // rule 3 or rule 4
  result.mark_tainted();
  return result;
}

TimelineWaitResult Timeline::poll(std::uint64_t value) const {
  // The lock-free answer for the common "not yet" case; failed() first, as a failed timeline fails every wait.
  if (!failed() && query() < value) return TimelineWaitResult::timed_out();
  std::lock_guard guard(lock_);
  if (error_) return TimelineWaitResult::failed(error_);
  // relaxed: value_ is only written under lock_, which we hold.
  if (value_.load(std::memory_order_relaxed) < value) return TimelineWaitResult::timed_out();
  return TimelineWaitResult::reached(import_locked(value));
}

namespace {

// The waiter of a blocking wait(): lives on the waiting thread's stack. The callback notifies while holding `mutex`,
// which the waiting thread must reacquire before it can return and destroy the blocker (as in detail::Notification).
struct Blocker : TimelineWaiter {
  Blocker() noexcept : TimelineWaiter(&Blocker::on_done) {}

  static void on_done(TimelineWaiter& self, const TimelineWaitResult& result) noexcept {
    auto& blocker = static_cast<Blocker&>(self);
    std::lock_guard lock(blocker.mutex);
    blocker.result.emplace(result);
    blocker.cv.notify_all();
  }

  std::mutex mutex;
  std::condition_variable cv;
  std::optional<TimelineWaitResult> result;  // guarded by mutex
};

}  // namespace

TimelineWaitResult Timeline::wait(std::uint64_t value, std::chrono::nanoseconds timeout) {
  TimelineWaitResult now = poll(value);
  if (!now.is_timed_out() || timeout <= std::chrono::nanoseconds::zero()) return now;
  Blocker blocker;
  wait_async(blocker, value);  // may run the callback here, if the value was reached since the poll
  {
    std::unique_lock lock(blocker.mutex);
    const auto done = [&blocker] { return blocker.result.has_value(); };
    if (timeout >= kLongestTimedWait) {
      blocker.cv.wait(lock, done);
    } else {
      blocker.cv.wait_for(lock, timeout, done);
    }
    if (blocker.result) return *blocker.result;
  }
  if (cancel(blocker)) return TimelineWaitResult::timed_out();
  // The callback started before the cancel, and cancel() returned only once it had finished: the result is there.
  std::lock_guard lock(blocker.mutex);
  return *blocker.result;
}

void Timeline::wait_async(TimelineWaiter& waiter, std::uint64_t value, const void* promise_owner) {
  TimelineLink& link = waiter;
  std::optional<TimelineWaitResult> now;
  {
    std::lock_guard guard(lock_);
    if (link.prev != nullptr) {
      throw std::logic_error(quoted(name_) + ": wait_async on a waiter that is already armed");
    }
    waiter.value_ = value;
    waiter.promise_owner_ = promise_owner;
    // relaxed: value_ is only written under lock_, which we hold.
    if (error_) {
      now.emplace(TimelineWaitResult::failed(error_));
    } else if (value_.load(std::memory_order_relaxed) >= value) {
      now.emplace(TimelineWaitResult::reached(import_locked(value)));
    } else if (const Promise* promise = find_promise_locked(value, promise_owner)) {
      now.emplace(TimelineWaitResult::promised(promise->requirement));
    } else {
      link_sorted_locked(waiter);
      return;
    }
  }
  waiter.callback_(waiter, *now);
}

const Timeline::Promise* Timeline::find_promise_locked(std::uint64_t value, const void* owner) const {
  if (owner == nullptr) return nullptr;
  for (std::uint32_t k = 0; k < promise_count_; ++k) {  // by ascending value: the first match is the smallest
    const Promise& promise = promise_at_locked(k);
    if (promise.value >= value && promise.owner == owner) return &promise;
  }
  return nullptr;
}

// The k-th pending promise from the oldest (k may be promise_count_: the next free slot).
Timeline::Promise& Timeline::promise_at_locked(std::uint32_t k) const noexcept {
  std::uint32_t i = promise_head_ + k;
  if (i >= promise_capacity_) i -= promise_capacity_;
  return promises_[i];
}

void Timeline::link_sorted_locked(TimelineWaiter& waiter) {
  // From the tail: waiters are usually armed in increasing value order, which makes this O(1); so is a waiter below
  // every armed one (a pipeline pushed last stage first). Equal values keep their arming order.
  if (!is_empty(armed_) && waiter.value_ < static_cast<TimelineWaiter*>(armed_.next)->value_) {
    link_after(armed_, waiter);
    return;
  }
  TimelineLink* position = armed_.prev;
  while (position != &armed_ && static_cast<TimelineWaiter*>(position)->value_ > waiter.value_) {
    position = position->prev;
  }
  link_after(*position, waiter);
}

void Timeline::detach_reached_locked(std::uint64_t value, Batch& batch) {
  // armed_ is sorted by value, so the reached waiters are a prefix; moved in order to the batch's tail.
  while (!is_empty(armed_) && static_cast<TimelineWaiter*>(armed_.next)->value_ <= value) {
    TimelineLink& node = *armed_.next;
    unlink(node);
    link_after(*batch.head.prev, node);
  }
}

void Timeline::detach_promised_locked(std::uint64_t value, const void* owner, Batch& batch) {
  // The armed waiters at or below `value` are a prefix of armed_; those of `owner` move to the batch, in order.
  TimelineLink* node = armed_.next;
  while (node != &armed_ && static_cast<TimelineWaiter*>(node)->value_ <= value) {
    TimelineLink* next = node->next;
    if (static_cast<TimelineWaiter*>(node)->promise_owner_ == owner) {
      unlink(*node);
      link_after(*batch.head.prev, *node);
    }
    node = next;
  }
}

void Timeline::fire(Batch& batch, const TimelineWaitResult& result) {
  Firing firing;
  firing.thread = std::this_thread::get_id();
  for (;;) {
    TimelineWaiter* waiter = nullptr;
    {
      std::lock_guard guard(lock_);
      if (firing.prev != nullptr) unlink(firing);  // the previous callback has returned
      if (batch.empty()) return;
      waiter = static_cast<TimelineWaiter*>(batch.head.next);
      unlink(*waiter);
      firing.waiter = waiter;
      link_after(firings_, firing);
    }
    // No lock held: the callback may use this timeline. From here on the waiter is the callback's (it may destroy it);
    // this thread only touches `firing`, on its own stack.
    waiter->callback_(*waiter, result);
  }
}

bool Timeline::is_running_locked(const TimelineWaiter& waiter, bool& on_this_thread) const {
  for (const TimelineLink* link = firings_.next; link != &firings_; link = link->next) {
    const auto* firing = static_cast<const Firing*>(link);
    if (firing->waiter == &waiter) {
      on_this_thread = firing->thread == std::this_thread::get_id();
      return true;
    }
  }
  return false;
}

bool Timeline::cancel(TimelineWaiter& waiter) {
  TimelineLink& link = waiter;
  for (;;) {
    bool on_this_thread = false;
    {
      std::lock_guard guard(lock_);
      if (link.prev != nullptr) {  // armed, or detached into a firer's batch and not yet called: prevent it
        unlink(link);
        return true;
      }
      if (!is_running_locked(waiter, on_this_thread)) return false;  // never armed, or its callback has finished
    }
    if (on_this_thread) return false;  // called from inside its own callback
    // Its callback is running on another thread: wait for it to return (callbacks are short; this is a slow path).
    std::this_thread::yield();
  }
}

}  // namespace depengine
