// Timeline: a timeline semaphore whose every signal carries the signaller's knowledge frontier.
//
// A timeline is a monotonically increasing 64-bit value. signal(v, f) raises it to v and attaches f, the frontier of
// what the signaller knew had happened before it signalled. A wait for `value >= v` imports the frontier of the
// signal that FIRST reached v, not the newest one: a consumer that needs "S reached 2" depends on the work before the
// signal of 2, not on the work that later pushed S to 5 (IREE's frontier design, "Scheduling vs. Causality"; IREE's
// code keeps one accumulated frontier per semaphore, which over-attributes). This is what user fences (push options
// that wait on and signal timeline values) and cross-engine hand-offs are built on. docs/architecture.md §4; README.md
// in this folder.
//
// Roles. Both the frontier a signal carries and the frontier a wait imports are KNOWLEDGE (KnowledgeFrontier): the
// signal says what had happened before it, and the import is what the waiter may now assume has happened. Losing
// entries from knowledge is safe, so every degraded import (history gone, external origin) is a tainted knowledge
// frontier that knows less, never more. Frontiers here have the fixed capacity kTimelineFrontierCapacity (16): a
// signal's frontier is converted to it (evicting and tainting if larger, as KnowledgeFrontier's constructor does).
//
// History and the import rule (constants: TimelineOptions). The timeline keeps the newest `history` engine signals
// exactly, and of the older ones every `checkpoint_stride`-th, up to `checkpoints` of them. Each record holds its
// value, the engine value just before it, and its frontier, so record r was the first engine signal to reach v exactly
// when r.previous < v <= r.value. A wait for v imports:
//   1. v == 0: the empty frontier, untainted (nothing had to happen);
//   2. the record that first reached v, if retained: its frontier as signalled;
//   3. else the newest retained record whose value is <= v, marked tainted (it happened before v was reached, so it
//      is true but incomplete knowledge);
//   4. else the empty frontier, marked tainted.
//
// External signals and the taint watermark. signal_external(v) raises the value from outside the engine, with no
// frontier. The watermark is the highest value signalled by the engine (signal()). Values in (watermark, value] were
// reached only from outside: a wait for such a value falls to rule 3 or 4 above (the newest engine frontier, tainted).
// Once the engine's own signal passes v (watermark >= v), rule 2 applies again and waits for v import the frontier of
// the first ENGINE signal >= v, untainted: that signal has happened by the time the import is made, so its knowledge
// is true, and it is the closest knowledge the timeline has for v. Taint therefore covers exactly the window of
// external uncertainty and disappears when the engine signals past it (IREE's frontier design, "Taint").
//
// Waiting. poll(v) answers now; wait(v, timeout) blocks the calling thread; wait_async(waiter, v) arms an intrusive
// TimelineWaiter whose callback runs exactly once, when v is reached or the timeline fails, unless cancel() prevents
// it. Every result is a TimelineWaitResult: reached (with the imported frontier), promised (below), timed out, or
// failed (with the error).
//
// Promises: submit-before-wait across a timeline. A scheduler that has issued, but not finished, the work that will
// signal v (a stream op enqueued on a device) calls promise(v, owner, requirement): once every entry of `requirement`
// has completed on the owner's axes, v will be signalled (or the timeline failed). A waiter armed with the same owner
// (wait_async(waiter, v, owner)) then fires at once with that requirement instead of waiting for the value, and the
// owner makes its device wait for exactly those entries. The requirement is a RequirementFrontier (it must never lose
// an entry), and it is meaningful only to the owner, whose axes it names: waiters of any other owner, and poll() and
// wait(), ignore promises. A waiter for v takes the smallest promise >= v of its owner (the timeline reaches v no
// later than that promise's signal, which raises it to at least v). Promises must increase strictly (promise()
// returns false and records nothing otherwise) and are kept until the value reaches them, at most
// TimelineOptions::promises at a time: a new one evicts the oldest, whose late waiters then take a later promise (more
// to wait for, never too little, as long as the signallers are ordered) or wait for the value.
//
// Happens-before: everything a thread did before signal(v, ...) or signal_external(v) is visible to a thread after
// query() returned a value >= v, after a poll or wait for a value <= v returned reached, and inside a callback fired
// for such a value. Everything done before fail(e) is visible to whoever receives e from this timeline.
//
// Thread safety: every member function may be called concurrently from any threads, except that the destructor must
// not run concurrently with anything. Callbacks never run while the timeline's lock is held, so a callback may call
// any member of this timeline or of another (signal, wait_async, cancel, ...), except a blocking wait() on a value that
// only this thread would signal.
//
// Ownership and lifetime: the timeline owns its history; waiters are owned by their callers (intrusive, see
// TimelineWaiter). A timeline is neither copyable nor movable (armed waiters point at it). Destroying it with armed
// waiters fails them (their callbacks run inside the destructor with a std::logic_error, and must not re-arm on it).
//
// Failure: signal() and signal_external() throw TimelineOrderError unless the value strictly increases; raise(v, f)
// is the same signal with >= semantics (a no-op returning false when the value is already v or more, or the timeline
// has failed), for signallers that complete out of order. fail(e) fails every armed waiter and every later wait,
// drops the promises, and makes every later signal rethrow e. The timeline never terminates the
// process; a callback must not throw (it is declared noexcept: it runs on the signaller's thread, which has no one to
// hand the exception to).
//
// Cost: query() is one acquire load. signal() takes a spinlock and copies the frontier's live entries into the
// history (no allocation); firing k waiters adds k + 1 lock round trips and the k callbacks. poll() and an
// immediately satisfied wait take the lock and copy one frontier (at most 16 entries). A blocking wait that must sleep
// uses a mutex and a condition variable on the waiting thread's stack. promise() copies its requirement into the
// store and scans the armed waiters at or below its value. Allocation: the constructor allocates the history
// ((history + checkpoints) records of about 280 bytes each) and the promise store (promises records of about 280
// bytes); nothing else allocates, except the exception objects of errors.
#pragma once

#include <atomic>
#include <cassert>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>

#include <depengine/frontier/frontier.h>
#include <depengine/support/cache_line.h>
#include <depengine/support/spinlock.h>

namespace depengine {

// The capacity of every frontier a timeline stores and imports. Sized like a stream's knowledge frontier: a few
// queues, a collective channel or two, host axes, with room to spare; larger signals are evicted into taint.
inline constexpr std::size_t kTimelineFrontierCapacity = 16;
using TimelineFrontier = KnowledgeFrontier<kTimelineFrontierCapacity>;
// What a promise says must complete before its value is signalled.
using TimelineRequirement = RequirementFrontier<kTimelineFrontierCapacity>;

struct TimelineOptions {
  std::string name{};                   // for error messages ("timeline 'x': ..."); may be empty
  std::uint32_t history = 32;           // exact records of the newest engine signals; at least 1
  std::uint32_t checkpoints = 8;        // older records kept, thinned; 0 keeps none
  std::uint32_t checkpoint_stride = 0;  // keep every stride-th evicted signal as a checkpoint; 0 means `history`
  std::uint32_t promises = 8;           // pending promises kept at once; 0 disables promises
};

// A signal that does not strictly increase the timeline's value. The message names the timeline and both values.
class TimelineOrderError : public std::invalid_argument {
 public:
  // The error of `requested` signalled on `timeline` while at `current` (`external`: by signal_external).
  TimelineOrderError(const std::string& timeline, std::uint64_t current, std::uint64_t requested, bool external);
  // The timeline's value at the signal, and the value signalled.
  [[nodiscard]] std::uint64_t current() const noexcept { return current_; }
  [[nodiscard]] std::uint64_t requested() const noexcept { return requested_; }

 private:
  std::uint64_t current_;
  std::uint64_t requested_;
};

// How a wait ended.
enum class TimelineWaitStatus : std::uint8_t {
  kReached,   // the value was reached; knowledge() is the import
  kPromised,  // not reached, but promised to the waiter's owner; requirement() is what must complete first
  kTimedOut,  // not reached before the deadline (a poll's deadline is now)
  kFailed,    // the timeline failed; error() is the failure
};

// The outcome of a wait. Thread safety: a value; Cost: about 560 bytes (two frontiers), copied, never allocated.
class [[nodiscard]] TimelineWaitResult {
 public:
  // A wait that reached its value, importing `knowledge`.
  [[nodiscard]] static TimelineWaitResult reached(const TimelineFrontier& knowledge) noexcept {
    return TimelineWaitResult(TimelineWaitStatus::kReached, knowledge, {}, nullptr);
  }
  // A wait answered by a promise: `requirement` must complete before the value is signalled.
  [[nodiscard]] static TimelineWaitResult promised(const TimelineRequirement& requirement) noexcept {
    return TimelineWaitResult(TimelineWaitStatus::kPromised, {}, requirement, nullptr);
  }
  // A wait whose deadline passed.
  [[nodiscard]] static TimelineWaitResult timed_out() noexcept {
    return TimelineWaitResult(TimelineWaitStatus::kTimedOut, {}, {}, nullptr);
  }
  // A wait on a failed timeline, with its failure.
  [[nodiscard]] static TimelineWaitResult failed(std::exception_ptr error) noexcept {
    return TimelineWaitResult(TimelineWaitStatus::kFailed, {}, {}, std::move(error));
  }

  // How the wait ended, and a test for each ending.
  [[nodiscard]] TimelineWaitStatus status() const noexcept { return status_; }
  [[nodiscard]] bool is_reached() const noexcept { return status_ == TimelineWaitStatus::kReached; }
  [[nodiscard]] bool is_promised() const noexcept { return status_ == TimelineWaitStatus::kPromised; }
  [[nodiscard]] bool is_timed_out() const noexcept { return status_ == TimelineWaitStatus::kTimedOut; }
  [[nodiscard]] bool is_failed() const noexcept { return status_ == TimelineWaitStatus::kFailed; }
  // The imported knowledge when reached (tainted when degraded, see the file comment); empty otherwise.
  [[nodiscard]] const TimelineFrontier& knowledge() const noexcept { return knowledge_; }
  // What must complete before the value is signalled, when promised; empty otherwise.
  [[nodiscard]] const TimelineRequirement& requirement() const noexcept { return requirement_; }
  // The failure when failed; null otherwise.
  [[nodiscard]] const std::exception_ptr& error() const noexcept { return error_; }
  // Rethrows error() when failed; does nothing otherwise.
  void rethrow_if_failed() const {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  TimelineWaitResult(TimelineWaitStatus status, const TimelineFrontier& knowledge,
                     const TimelineRequirement& requirement, std::exception_ptr error) noexcept
      : status_(status), knowledge_(knowledge), requirement_(requirement), error_(std::move(error)) {}

  TimelineWaitStatus status_;
  TimelineFrontier knowledge_;
  TimelineRequirement requirement_;
  std::exception_ptr error_;
};

class Timeline;

namespace detail {
// A link of the timeline's intrusive lists (armed waiters; a firer's batch; firings in progress).
struct TimelineLink {
  TimelineLink* prev = nullptr;  // null when not linked
  TimelineLink* next = nullptr;
};
}  // namespace detail

// An asynchronous wait on a timeline: an intrusive node the caller owns (embed it in an op record, or use
// TimelineCallbackWaiter), so arming it allocates nothing.
//
// Arm it with Timeline::wait_async(waiter, v). The callback then runs exactly once, with the result (reached with the
// import, or failed), unless Timeline::cancel(waiter) returned true first. Once the callback has started, the waiter
// is the callback's again: it may re-arm it, destroy it or hand it on; the timeline never touches a waiter after
// calling its callback.
//
// Lifetime: the waiter must outlive its arming, that is until its callback has started or cancel() has returned.
// Thread safety: the callback runs on the thread that reached the value (a signaller), that failed the timeline, or
// that armed the waiter (when the value was already reached). One arming at a time: arming an armed waiter throws
// std::logic_error.
class TimelineWaiter : private detail::TimelineLink {
 public:
  // What the timeline calls once the wait ends: (the waiter, the result).
  using Callback = void (*)(TimelineWaiter& self, const TimelineWaitResult& result) noexcept;

  // A waiter that calls `callback`; arm it with Timeline::wait_async.
  explicit TimelineWaiter(Callback callback) noexcept : callback_(callback) {}
  TimelineWaiter(const TimelineWaiter&) = delete;
  TimelineWaiter& operator=(const TimelineWaiter&) = delete;
  ~TimelineWaiter() { assert(prev == nullptr && "a TimelineWaiter was destroyed while armed: cancel() it first"); }

  // The value of the latest arming. Read it from the callback or while not armed.
  [[nodiscard]] std::uint64_t value() const noexcept { return value_; }

 private:
  friend class Timeline;
  Callback callback_;                    // immutable
  std::uint64_t value_ = 0;              // written by wait_async before linking; read under the timeline's lock
  const void* promise_owner_ = nullptr;  // whose promises it takes (null: none); as value_
};

// A TimelineWaiter that stores a callable inline: fn(const TimelineWaitResult&), which must be noexcept.
template <class F>
class TimelineCallbackWaiter final : public TimelineWaiter {
  static_assert(std::is_nothrow_invocable_v<F&, const TimelineWaitResult&>,
                "a timeline callback is called as fn(const TimelineWaitResult&) and must be noexcept: it runs on the "
                "signalling thread, which has no one to hand an exception to");

 public:
  // A waiter that calls `fn` (moved in).
  explicit TimelineCallbackWaiter(F fn) noexcept(std::is_nothrow_move_constructible_v<F>)
      : TimelineWaiter(&TimelineCallbackWaiter::trampoline), fn_(std::move(fn)) {}

 private:
  static void trampoline(TimelineWaiter& self, const TimelineWaitResult& result) noexcept {
    static_cast<TimelineCallbackWaiter&>(self).fn_(result);
  }
  F fn_;
};

class Timeline {
 public:
  // Starts at value 0 with an empty history. Throws std::invalid_argument if options.history is 0; allocates the
  // history (see Cost in the file comment).
  explicit Timeline(TimelineOptions options = {});
  // Fails armed waiters with std::logic_error (their callbacks run here). Must not run concurrently with any call.
  ~Timeline();
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // The current value (engine and external signals). Lock-free; any thread.
  [[nodiscard]] std::uint64_t query() const noexcept {
    // acquire: pairs with the release store in publish_value() (signal / signal_external), so the caller sees what
    // the signaller did before signalling once it sees the value.
    return value_.load(std::memory_order_acquire);
  }
  // The taint watermark: the highest value signalled by signal() (0 if none). Values above it are tainted. Lock-free.
  [[nodiscard]] std::uint64_t watermark() const noexcept {
    // relaxed: a diagnostic read; it orders nothing (query() is the synchronising read).
    return watermark_.load(std::memory_order_relaxed);
  }
  // Whether fail() has been called. Lock-free.
  [[nodiscard]] bool failed() const noexcept {
    // acquire: pairs with the release store in fail(), so error() is visible once this is true.
    return failed_.load(std::memory_order_acquire);
  }
  // The failure, or null. Any thread.
  [[nodiscard]] std::exception_ptr error() const;
  [[nodiscard]] const std::string& name() const noexcept { return name_; }

  // Raises the value to `value`, attaching `knowledge` (what the signaller knew had happened), and fires the waiters
  // it satisfies on this thread after releasing the lock. Throws TimelineOrderError unless value > query(), and
  // rethrows the failure after fail(); the timeline is unchanged then. `knowledge` need only live for the call.
  void signal(std::uint64_t value, const TimelineFrontier& knowledge);
  // A frontier of another capacity is converted (evicting and tainting if it does not fit). For M equal to the
  // timeline's capacity the non-template overload above is the better match, so this never calls itself.
  template <std::size_t M>
  void signal(std::uint64_t value, const KnowledgeFrontier<M>& knowledge) {
    signal(value, TimelineFrontier(knowledge));
  }

  // signal() with >= semantics: raises the value to `value` and returns true, or returns false and changes nothing
  // when the value is already `value` or more (a later signal got there first) or the timeline has failed.
  bool raise(std::uint64_t value, const TimelineFrontier& knowledge);

  // Raises the value from outside the engine (an imported event, another process): no frontier, so the values it
  // reaches are tainted until the engine signals past them. Same errors as signal().
  void signal_external(std::uint64_t value);

  // Promises `value` to the waiters of `owner` (see Promises in the file comment) and fires those armed for a value
  // <= it; when the store is full, the oldest promise makes room. Returns false, recording nothing, when the promise
  // would not help or not hold: the timeline has failed or already reached `value`, `value` does not exceed the
  // newest pending promise, `requirement` is tainted (it would not name everything to wait for), or
  // TimelineOptions::promises is 0. Throws std::invalid_argument for a null owner.
  bool promise(std::uint64_t value, const void* owner, const TimelineRequirement& requirement);

  // Fails the timeline: every armed waiter's callback runs (on this thread, after the lock is released) with
  // `error`, every later wait returns failed, every later signal rethrows `error`. Returns false (and changes nothing)
  // if the timeline had already failed: the first failure wins. Throws std::invalid_argument for a null error.
  bool fail(std::exception_ptr error);

  // The result of a wait for `value` now: reached (with the import), timed out (not reached), or failed. Never blocks
  // beyond the lock's critical section.
  [[nodiscard]] TimelineWaitResult poll(std::uint64_t value) const;

  // Blocks until `value` is reached, the timeline fails, or `timeout` passes (kForever: no limit; zero or negative:
  // poll). Must not be called from a callback of this timeline for a value that only this thread would signal.
  static constexpr std::chrono::nanoseconds kForever = std::chrono::nanoseconds::max();
  [[nodiscard]] TimelineWaitResult wait(std::uint64_t value, std::chrono::nanoseconds timeout = kForever);

  // Arms `waiter` for `value`, taking the promises of `promise_owner` if not null. If the value is already reached,
  // promised to that owner, or the timeline has failed, the callback runs on this thread before wait_async returns;
  // otherwise it runs later on the thread that reaches or promises the value or fails the timeline. Throws
  // std::logic_error (and changes nothing) if `waiter` is armed. O(armed waiters) worst case, O(1) when values are
  // armed in increasing or in decreasing order.
  void wait_async(TimelineWaiter& waiter, std::uint64_t value, const void* promise_owner = nullptr);

  // Disarms `waiter`. Returns true if this prevented its callback: it has not run and will not run. Returns false if
  // it was not armed or its callback has already started; in that case cancel returns only after the callback has
  // finished (it waits, yielding), unless called from inside that same callback, where it returns at once. Either way,
  // once cancel returns the callback is not running (bar that one exception) and will not run, so the caller may
  // destroy the waiter. Call it from any thread after wait_async has returned, at most one cancel per waiter at a time;
  // two callbacks that cancel each other's waiters on two threads would wait for each other forever.
  bool cancel(TimelineWaiter& waiter);

 private:
  struct Record;
  struct Promise;
  struct Firing;
  class Batch;

  void signal_locked(std::uint64_t value, const TimelineFrontier& knowledge, Batch& batch);
  void publish_value(std::uint64_t value) noexcept;
  void check_order_locked(std::uint64_t value, bool external) const;
  void record_signal_locked(std::uint64_t value, std::uint64_t previous, const TimelineFrontier& knowledge);
  [[nodiscard]] TimelineFrontier import_locked(std::uint64_t value) const;
  void detach_reached_locked(std::uint64_t value, Batch& batch);
  void detach_promised_locked(std::uint64_t value, const void* owner, Batch& batch);
  [[nodiscard]] const Promise* find_promise_locked(std::uint64_t value, const void* owner) const;
  [[nodiscard]] Promise& promise_at_locked(std::uint32_t k) const noexcept;
  void fire(Batch& batch, const TimelineWaitResult& result);
  void link_sorted_locked(TimelineWaiter& waiter);
  [[nodiscard]] bool is_running_locked(const TimelineWaiter& waiter, bool& on_this_thread) const;

  // Read-mostly by queriers, written (under lock_) by signallers: its own line, so queries do not share a line with
  // the lock that every signaller and waiter writes.
  alignas(support::kCacheLine) std::atomic<std::uint64_t> value_{0};
  std::atomic<std::uint64_t> watermark_{0};
  std::atomic<bool> failed_{false};

  // Written under lock_ by signallers, waiters and cancellers.
  alignas(support::kCacheLine) mutable support::Spinlock lock_;
  detail::TimelineLink armed_;    // sentinel of the armed waiters, sorted by ascending value; guarded by lock_
  detail::TimelineLink firings_;  // sentinel of the callbacks in progress (Firing records); guarded by lock_
  std::exception_ptr error_;      // guarded by lock_; set once, before failed_
  std::uint64_t signals_ = 0;     // engine signals so far; guarded by lock_
  std::uint32_t recent_head_ = 0, recent_count_ = 0;          // ring of the newest records; guarded by lock_
  std::uint32_t checkpoint_head_ = 0, checkpoint_count_ = 0;  // ring of the thinned older records; guarded by lock_
  std::uint32_t promise_head_ = 0, promise_count_ = 0;        // ring of pending promises, by value; guarded by lock_

  // Immutable after construction.
  alignas(support::kCacheLine)
      std::unique_ptr<Record[]> records_;  // [0, history): recent ring; [history, history + checkpoints)
  std::uint32_t history_;
  std::uint32_t checkpoints_;
  std::uint32_t stride_;
  std::unique_ptr<Promise[]> promises_;  // [0, promise_capacity_)
  std::uint32_t promise_capacity_;
  std::string name_;
};

}  // namespace depengine
