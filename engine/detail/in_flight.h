// InFlight: the count of ops pushed and not yet retired, the bound on it (EngineOptions::max_in_flight), and the
// threads that wait for it to fall (back-pressure, WaitForAll, StopTrace, shutdown).
//
// In flight = pushed - retired. The two counts live on separate cache lines, written by separate parties (pushers;
// completing threads), so a push and a completion on different cores do not trade a line per op. A pusher checks the
// bound against its cached view of `retired` and re-reads the real count only when the view says the bound is reached.
// `retired` is itself kRetireSlots counters, each on its own line: a thread counts its retirements in the slot the
// process gave it (threads are numbered as they first retire an op, modulo the slots), so two workers retiring ops
// each write a line of their own instead of trading one per op; whoever needs the total sums the slots.
//
// Waiting: a thread that waits (for a level here, or for any condition through help_until()) helps run queued work
// (Executor::try_help of the engine's executors). When it finds none, it keeps looking for the longest help_spin() of
// the executors, then sleeps on a condition variable. Three things wake it: leave(), when the count reaches the level
// it waits for; notify_waiters(), when another condition may have become true; and wake_helpers(), when an executor
// has work that its own threads will not take (ExecutorHost::wake_helpers). Each announcement is a Dekker pair (see
// leave() and help_until() in in_flight.cpp), so no sleeper misses its level or that work. So where an executor asks
// for it (the threadpool with ThreadPoolOptions::waiters_work), a waiting thread works as one more of its workers.
//
// Helping (EngineOptions::help_above): a push that finds more than help_above ops in flight runs queued work before it
// goes on, without waiting (help_while_ahead()). A push learns whether to look from try_admit(), which compares its
// count of pushes with help_at_, the count at which to look again, on the pushers' line; a look sums the slots. Helping
// stops once the count has fallen by a quarter of help_above, or when no work is queued; a look that found none puts
// the next look off, twice as far each time up to that quarter, so that a count held up by ops that are not queued (a
// long chain its workers run on their own) costs a look per quarter of help_above pushes.
//
// Happens-before: when wait_at_most(level) returns, the effects of every op retired so far (everything done before its
// leave()) are visible to the caller.
//
// Thread safety: every member from any thread. Cost: try_admit() (inline) is one relaxed compare-exchange on the
// pushers' line (and, for a push from outside an op, loads of the closed flag, a line written once, and of help_at_);
// leave() one seq_cst increment on the calling thread's slot and one load of the sleepers' line (cached everywhere
// while no one waits); a total (waits, a push at the bound, a look of helping, reports) reads kRetireSlots lines.
// Allocation: none.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <depengine/executors/executor.h>
#include <depengine/support/cache_line.h>

namespace depengine::detail {

class InFlight {
 public:
  // `max` bounds the ops in flight (at least 1, checked by the engine); a push held back by it resumes once the count
  // falls to 3/4 of it. Above `help_above` ops in flight (0: never; under `max`, checked by the engine) a push runs
  // queued work first (help_while_ahead()). `helpers` are the executors whose queued work waiting and helping threads
  // run; they must outlive this.
  InFlight(std::size_t max, std::size_t help_above, std::span<const std::unique_ptr<Executor>> helpers) noexcept;

  // Whether a replay should call help_while_ahead(): true once the pushes since its last call may have taken the
  // count above help_above (EngineOptions::help_above). A push learns the same from try_admit().
  [[nodiscard]] bool ahead() const noexcept {
    // relaxed, both: hints; help_while_ahead() counts for itself.
    return pushed_.load(std::memory_order_relaxed) >= help_at_.load(std::memory_order_relaxed);
  }
  // Counts the ops in flight, and if there are more than help_above, runs queued work (help()) on the calling thread
  // until the count falls by a quarter of help_above or no queued work is left; then sets the push count at which
  // ahead() next says to look. Never waits: ops not queued (waiting for grants, or running) are left alone.
  void help_while_ahead() noexcept;

  // What try_admit() did: counted the op in; counted it in, and the pusher may be far enough ahead to help first
  // (ahead()); or counted nothing, the bound being reached or close() called.
  enum class Admitted : std::uint8_t { kIn, kInAhead, kAtBound };
  // Counts one op in (kIn, or kInAhead: then the caller, a push from outside every engine's ops, calls
  // help_while_ahead()), unless the bound is reached or close() was called: then counts nothing and returns kAtBound,
  // and the caller, unless it gives up, calls admit_at_bound(). An `exempt` op (pushed from inside a running op, or by
  // the engine itself: waiting there could deadlock) is always counted in, as kIn. Never blocks. Inline: the call cost
  // a push more than the admission itself (bench/engine/count_instructions.sh: 750 -> 737 per op).
  [[nodiscard]] Admitted try_admit(bool exempt) noexcept {
    if (exempt) {
      // relaxed: counting only; the op's publication is ordered by the variable locks.
      pushed_.fetch_add(1, std::memory_order_relaxed);
      return Admitted::kIn;
    }
    if (closed_.load(std::memory_order_relaxed)) [[unlikely]]  // relaxed: see close()
      return Admitted::kAtBound;
    // relaxed throughout: the bound is a count, not a hand-off. A stale view of retired_ only overestimates what is in
    // flight, so the bound is never exceeded; the compare-exchange makes concurrent pushers exact among themselves.
    // help_at_ is a hint (see help_while_ahead()).
    std::size_t pushed = pushed_.load(std::memory_order_relaxed);
    for (;;) {
      const std::size_t retired = retired_view_.load(std::memory_order_relaxed);
      if (pushed > retired && pushed - retired >= max_) return Admitted::kAtBound;  // a view ahead counts as none
      if (pushed_.compare_exchange_weak(pushed, pushed + 1, std::memory_order_relaxed)) {
        return pushed < help_at_.load(std::memory_order_relaxed) ? Admitted::kIn : Admitted::kInAhead;
      }
    }
  }
  // A push that try_admit() did not count in: waits while the bound is reached, helping meanwhile, then counts one op
  // in and returns true; once close() was called, counts nothing and returns false. While it waits, blocked() names it
  // after `api` ("Push") and `name` (the op's, or empty), which must stay valid until it returns.
  [[nodiscard]] bool admit_at_bound(const char* api, std::string_view name);
  // Counts `count` ops in at once (a replay, admitted whole), as try_admit() then admit_at_bound(): unless exempt,
  // waits first until all of them fit under the bound. `count` must be at most max().
  [[nodiscard]] bool admit_many(std::size_t count, bool exempt);
  [[nodiscard]] std::size_t max() const noexcept { return max_; }
  // The engine is being destroyed: the admissions refuse every op but the exempt ones (the ops still running may push
  // the rest of their work). A push racing with the engine's destruction is the user's race: this turns the pushes made
  // after it into errors.
  void close() noexcept {
    // relaxed: see above; the flag is the only thing it tells.
    closed_.store(true, std::memory_order_relaxed);
  }
  // Counts `ops` ops out (retired), and wakes the threads waiting for the level now reached.
  void leave(std::size_t ops = 1) noexcept;

  // A push or replay waiting in admit_at_bound() or admit_many(), as a report names it.
  struct Blocked {
    std::string what;                 // "Push of op 'load'", "Push of an unnamed op", "Replay of a graph of 12 ops"
    std::size_t resumes_at;           // the count of ops in flight at which it goes on
    std::string thread;               // the waiting thread's std::thread::id
    std::chrono::nanoseconds waited;  // how long it has waited
  };
  // The pushes and replays waiting at the bound now. Takes a mutex that only waits at the bound take; allocates.
  [[nodiscard]] std::vector<Blocked> blocked() const;

  // Ops retired so far: a count of progress (the stall watch).
  [[nodiscard]] std::size_t retired() const noexcept {
    // relaxed: a count compared with itself over time; nothing is read through it.
    return retired_total(std::memory_order_relaxed);
  }
  // An upper bound of the ops in flight during the call (what waits rely on: never too low).
  [[nodiscard]] std::size_t upper_bound() const noexcept;
  // The ops in flight at one moment during the call (Engine::InFlight); see the definition for the rare fallback.
  [[nodiscard]] std::size_t now() const noexcept;

  // Waits until no op is in flight, helping meanwhile. Must not be called from inside an op of the same engine.
  void wait_for_zero() { wait_at_most(0); }

  // Waits until `done()` returns true, helping meanwhile, as the waits above do. Whatever makes `done()` true must call
  // notify_waiters() after it, and must not rely on the caller's objects then: help_until() may return as soon as
  // `done()` is true (an op's completion may; the engine outlives it). Must not be called from inside an op of the
  // same engine.
  template <class Done>
  void help_until(const Done& done) {
    help_until([](const void* context) { return (*static_cast<const Done*>(context))(); }, &done, 0);
  }
  // Runs queued work of the first helper executor that has some (Executor::try_help) on the calling thread; false if
  // none had any.
  [[nodiscard]] bool help() noexcept;
  // Wakes the threads asleep in the waits, to test their condition again.
  void notify_waiters() noexcept;

  // ExecutorHost::helpers_asleep and wake_helpers (see the header).
  [[nodiscard]] bool helpers_asleep() const noexcept {
    // seq_cst: the executor's half of the Dekker pair with help_until() (ExecutorHost::helpers_asleep).
    return asleep_.load(std::memory_order_seq_cst) != 0;
  }
  void wake_helpers() noexcept;

 private:
  void wait_at_most(std::size_t level);
  // Out of line, so that leave() saves no registers: its common case is a thread that has retired ops before and finds
  // no sleeper.
  [[gnu::noinline]] void leave_first(std::size_t ops) noexcept;
  // A thread waiting at the bound, for blocked(): on its stack (in a Listed), linked into waiting_ while it waits.
  struct Waiting {
    const char* api;
    std::string_view name;
    std::size_t graph_ops;   // a replay's count of ops; 0 for a push
    std::size_t resumes_at;  // the level it waits for
    std::thread::id thread;
    std::chrono::steady_clock::time_point since;
    Waiting* next = nullptr;
  };
  class Listed;
  [[gnu::noinline]] void wake_sleepers(std::uint64_t sleepers) noexcept;
  // `sleeper` is what the thread adds to sleepers_ while asleep (0: it waits for no level).
  void help_until(bool (*done)(const void* context), const void* context, std::uint64_t sleeper);
  // The sum of the retired_ slots, each loaded with `order`. The counts only grow, so the sum lies between the total
  // when the first slot is read and the total when the last one is.
  [[nodiscard]] std::size_t retired_total(std::memory_order order) const noexcept {
    std::size_t total = 0;
    for (const RetireSlot& slot : retired_) total += slot.count.load(order);
    return total;
  }

  // Immutable after construction, but for closed_, written once by close(); read by every admission that is not exempt
  // (the line stays cached everywhere).
  const std::size_t max_;
  std::atomic<bool> closed_{false};
  const std::size_t low_water_;  // a push held back by the bound resumes once the count falls to this
  const std::span<const std::unique_ptr<Executor>> helpers_;
  const std::chrono::nanoseconds help_spin_;  // the longest Executor::help_spin() of helpers_

  // EngineOptions::help_above (see ahead()); 0: off. Checked by the engine to be under max_.
  const std::size_t help_above_;
  const std::size_t help_gap_;  // a quarter of help_above_, at least 1
  const std::size_t help_low_;  // help_while_ahead() helps until the count falls to this: help_above_ - help_gap_
  // help_while_ahead() runs this many helps between two counts.
  static constexpr std::size_t kHelpsPerCount = 16;

  // Written by pushers.
  alignas(support::kCacheLine) std::atomic<std::size_t> pushed_{0};
  std::atomic<std::size_t> retired_view_{0};  // a pusher's cached lower bound of retired_
  // The count of pushes from which ahead() is true (help_while_ahead() moves it on); the most a size_t holds: never.
  std::atomic<std::size_t> help_at_;
  std::atomic<std::size_t> help_backoff_{1};  // pushes between looks while nothing is queued (help_while_ahead())
  // Written by completing threads, each in its own slot (see the header).
  static constexpr std::size_t kRetireSlots = 8;
  struct alignas(support::kCacheLine) RetireSlot {
    std::atomic<std::size_t> count{0};
  };
  RetireSlot retired_[kRetireSlots];
  // Threads asleep in wait_at_most(): the low 32 bits count those waiting for low_water_, the high 32 bits those
  // waiting for zero. Read by every completion, written only by waiters, so its line stays cached everywhere while no
  // one waits; the mutex and condition variable, touched only by sleepers and their wakers, sit on the next line.
  alignas(support::kCacheLine) std::atomic<std::uint64_t> sleepers_{0};
  // Threads asleep in help_until(), whatever they wait for: read by executors (helpers_asleep()), written only by
  // waiters.
  std::atomic<std::uint32_t> asleep_{0};
  // Whether wake_helpers() rang since a helper last went to sleep: the executor's later calls return at once, so a
  // burst of work pays one wake-up. Cleared by a helper before it counts itself asleep.
  std::atomic<bool> rung_{false};
  // The threads waiting at the bound (blocked()): touched only by them and by reports.
  mutable std::mutex waiting_mutex_;
  Waiting* waiting_ = nullptr;  // guarded by waiting_mutex_
  alignas(support::kCacheLine) std::mutex wake_mutex_;
  std::condition_variable wake_cv_;
  std::uint64_t rings_ = 0;  // guarded by wake_mutex_: how many times wake_helpers() rang
};

}  // namespace depengine::detail
