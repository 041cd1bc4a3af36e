// The CPU executor: runs ready ops on oneTBB worker threads.
//
// oneTBB supplies the threads (a task_arena of `workers` slots); our ops never travel through a TBB task. Each worker
// runs a *drainer*: a TBB task that takes ops from this executor's queues, runs them, and runs one op that each
// completion made ready next, on the same thread, so a chain never crosses threads. A drainer that finds no work spins
// for `spin` (a cross-core wake costs about 10 us on these machines, so waiting that long first is cheap insurance),
// then returns its thread to oneTBB, which parks it.
//
// Four places for a ready op, so that a submitting thread never waits for a worker, a fan-out made ready by a
// completion stays with its worker, and a lone op it made ready reaches an idle worker in one line (README.md):
//   - the inbox, where submit() puts an op: a lock-free stack, one compare-exchange per op and nothing else shared
//     with the workers but that line; a drainer takes the whole stack at once.
//   - the ready queue (a ReadyQueue: higher priority first, FIFO among equals), where drainers put what they take from
//     the inbox, in submission order, and pop from. Only drainers and helping threads touch it, under a spinlock, so
//     the lock and the queue's lines stay with the workers.
//   - a slot per worker: the priority-0 ops its completions made ready beyond the one it runs next. The worker takes
//     them oldest first; an idle worker steals the oldest half, a helping thread one, so none is stranded behind a
//     worker blocked in a long op. Ops of a priority above 0 waiting in the ready queue go before a worker's slot.
//   - the hand-off cell: when a completion made ready exactly one op beyond the one its worker runs next, and a thread
//     is searching for work, the worker puts that op there instead of in its slot, and the searcher takes it with one
//     exchange: one line crosses, where a steal moves the slot's flag, its lock and the op's link.
//
// Waking, "never more workers than there is work": at most one drainer searches for work at a time. A submit starts
// a new drainer only when none is searching and fewer than `workers` exist; a searching drainer that finds work
// starts one more only if work remains queued. So a burst of n ops wakes at most min(n, workers) threads, one by
// one, and a steady trickle keeps one thread busy rather than waking a second. The counts live in one atomic word;
// a submit (push to the inbox, then read the word) and a drainer that gives up (leave the word, then read the inbox)
// form a Dekker pair, so an op is never left queued with nobody searching. (See README.md for the timeline.)
//
// Yielding to a thread that pushes: while a thread outside the pool submits ops (pushes from outside the engine's ops,
// ready at once) and the pool's drainers fill every hardware thread, that thread shares a core with one of them. A
// drainer that has searched for a quarter of `spin` without finding work then yields its core at each look instead of
// spinning through it, so that the thread whose pushes it waits for gets the core back (on 2 cores, `fanout` with 2
// workers in 0.65-0.82x the time, bench/README.md). The hint is cleared when an outside thread waiting on the engine
// finds no work to help with (try_help()), as it does before it sleeps.
//
// A waiting thread as a worker (ThreadPoolOptions::waiters_work): a thread waiting on the engine runs queued work
// (try_help()) in the guest slot, searches as a drainer does, keeps looking for `spin` when it finds none
// (help_spin()), and then sleeps; when work is made ready that no worker will take soon (every worker is busy, none
// searches), the pool wakes it (ExecutorHost::wake_helpers). It takes the ready queue and workers' slots only from
// workers that have run no op for a moment (stuck()), so that it does not split a worker's short ops with it. Without
// the option a waiting thread only runs what it finds queued, and sleeps. Either way a helper runs the chain it starts,
// up to kHelpChain ops per try_help().
//
// Thread safety: every method may be called from any thread, except start()/stop() (the engine's owner thread).
// Cost: submit() is one compare-exchange on the inbox line and one load of the counts (and enqueues a TBB task only
// when a drainer must be started); running a kept successor takes no lock, and one from the worker's slot a lock whose
// line stays in its cache unless another thread steals. No allocation per op; starting a drainer
// allocates one TBB task.
//
// oneTBB caps its worker threads at its process-wide limit (tbb::global_control::max_allowed_parallelism, by default
// the hardware threads) - 1. Only when `workers` do not fit under the limit in force does the executor hold a
// global_control(max_allowed_parallelism, workers + 1) for its lifetime, so that all of them can run; that raises the
// limit for every oneTBB user in the process while the pool lives (oneTBB applies the smallest such limit, so a lower
// one set by the application still wins, and then caps the pool). A pool that fits leaves the limit alone.
#pragma once

#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/task_arena.h>
#include <oneapi/tbb/task_scheduler_observer.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>

#include <depengine/executors/executor.h>
#include <depengine/executors/ready_queue.h>
#include <depengine/support/cache_line.h>
#include <depengine/support/spinlock.h>

namespace depengine {

struct ThreadPoolOptions {
  // Worker threads; 0 means the environment variable DEPENGINE_CPU_WORKERS if set (MXNet's MXNET_CPU_WORKER_NTHREADS),
  // else std::thread::hardware_concurrency().
  int workers = 0;
  // How long an idle worker keeps looking for work before giving its thread back to oneTBB.
  std::chrono::nanoseconds spin = std::chrono::microseconds(20);
  // Work-first: a thread pushing from outside the engine's ops runs the op it pushed itself, if that op is ready at
  // its push, when the workers are behind (an op it submitted before still waits for one, and none of a higher
  // priority does), as OpenMP's task creators do when their queues fill. Ops of a fast stream of pushes then cost what
  // they cost on the inline executor instead of a hand-off each, and the pushing thread counts as one more worker
  // (a pool of 1 worker and a pushing thread uses two cores). The pushing thread then stops pushing while the op
  // runs, so leave it off where the pusher's pace matters more (it issues GPU work the device waits for). And an op
  // must never wait for anything its pushing thread does after the push returns (a lock the pusher holds, a flag it
  // sets later): the pusher may be the thread running it (as a push past max_in_flight already may).
  bool work_first = false;
  // A thread waiting on the engine (WaitForAll, WaitForVar, a push held back by max_in_flight) works as one more worker
  // of this pool: it keeps looking for work for `spin` before it sleeps, and the pool wakes it for work that no busy
  // worker will take soon. Meant for a pool of hardware threads - 1 workers fed by a thread that pushes and then
  // waits: 1 worker and that thread then run like 2 workers, on long ops (twice the throughput) and on short ones
  // (whose lines then cross the cores: "A waiting thread as a worker" below). Off, a waiting thread runs only what it
  // finds queued.
  bool waiters_work = false;
};

// Runs ready ops on oneTBB worker threads (see the file comment).
class ThreadPoolExecutor final : public Executor {
 public:
  // Throws std::invalid_argument if options.workers is negative, or DEPENGINE_CPU_WORKERS is used and is not a number
  // from 1 to 4096.
  explicit ThreadPoolExecutor(ThreadPoolOptions options = {});
  ~ThreadPoolExecutor() override;

  [[nodiscard]] std::string_view name() const noexcept override { return "threadpool"; }
  // The number of worker threads.
  [[nodiscard]] int workers() const noexcept { return static_cast<int>(workers_); }
  // Whether a thread outside the pool has submitted an op since one waiting on the engine last found no work to help
  // with (see "Yielding to a thread that pushes" above). A hint, for idle workers and diagnostics.
  [[nodiscard]] bool outside_submitting() const noexcept {
    return outside_submitting_.load(std::memory_order_relaxed);  // relaxed: a hint
  }

  // When the host observes threads (ExecutorHost::observes_threads), tells it of each thread that enters or leaves the
  // pool's arena, from that thread (a oneTBB task_scheduler_observer on the arena), until stop().
  void start(ExecutorHost& host) override;
  void submit(Task& task) noexcept override;
  [[nodiscard]] bool run_here(const Task& task) const noexcept override;
  [[nodiscard]] bool try_help() noexcept override;
  // `spin` with ThreadPoolOptions::waiters_work (see "A waiting thread as a worker" above); else 0.
  [[nodiscard]] std::chrono::nanoseconds help_spin() const noexcept override {
    return waiters_work_ ? spin_ : std::chrono::nanoseconds{0};
  }
  void stop() noexcept override;

 private:
  // The drainer and searcher counts, one word: drainers (started, not finished) in the high half, searchers (drainers
  // looking for work, not running an op) in the low half.
  static constexpr std::uint64_t kSearcher = 1;
  static constexpr std::uint64_t kDrainer = std::uint64_t{1} << 32;
  [[nodiscard]] static std::uint32_t searchers(std::uint64_t counts) noexcept {
    return static_cast<std::uint32_t>(counts);
  }
  [[nodiscard]] static std::uint32_t drainers(std::uint64_t counts) noexcept {
    return static_cast<std::uint32_t>(counts >> 32);
  }

  // A worker's own ready tasks (priority 0 only), oldest first: what its completions made ready beyond the one it runs
  // next. The owner adds and takes under `lock`, a line that stays in
  // its cache while nobody steals; other workers and helpers take from the front under the same lock (steal()).
  // `loaded` says whether the slot holds tasks, for threads looking for work: on a line of its own, written only when
  // the slot turns empty or non-empty, so a searcher spinning on it does not pull the lock's line away per task.
  using Clock = std::chrono::steady_clock;
  struct Slot {
    alignas(support::kCacheLine) support::Spinlock lock;
    TaskList tasks;            // guarded by lock
    std::size_t count = 0;     // guarded by lock
    std::uint32_t streak = 0;  // the owner's alone: tasks find() took since it last looked at the ready queue first
    // Whether a drainer runs with this slot, and the ops it ran: written by that drainer alone, read by helpers
    // (stuck()).
    std::atomic<bool> active{false};
    std::atomic<std::uint32_t> ran{0};
    alignas(support::kCacheLine) std::atomic<bool> loaded{false};
  };
  // What the helper holding the guest slot last saw of a worker's progress (stuck()).
  struct Watch {
    std::uint32_t ran = 0;
    Clock::time_point since{};  // when `ran` was last seen to change; zero: never looked
    bool stuck = false;         // what the last look concluded
  };
  // The most tasks a slot holds; a fan-out beyond it goes to the ready queue.
  static constexpr std::size_t kSlotCapacity = 256;
  // The most ops of a chain a helping thread runs in one try_help().
  static constexpr std::uint32_t kHelpChain = 64;
  // How long a worker must have run no op before a helper takes work a worker would take (stuck()).
  static constexpr std::chrono::nanoseconds kStuck = std::chrono::microseconds(1);
  // Every how many looks for a task (find()) a worker looks at the ready queue before its own slot.
  static constexpr std::uint32_t kFairness = 64;

  void drain();
  Task* next_task(Slot* own);
  [[nodiscard]] Task* find(Slot* own, bool& more) noexcept;
  [[nodiscard]] Task* pop_shared(bool& more) noexcept;
  [[nodiscard]] Task* take_handoff() noexcept;
  [[nodiscard]] static Task* pop_own(Slot& own, bool& more) noexcept;
  [[nodiscard]] Task* steal(Slot* own, bool& more) noexcept;
  [[nodiscard]] bool stuck(std::uint32_t worker, Clock::time_point now) noexcept;
  [[nodiscard]] Task* find_as_guest(Slot& guest, bool& more) noexcept;
  [[nodiscard]] Task* search_as_helper(Slot& guest, bool& more) noexcept;
  [[nodiscard]] bool idle() noexcept;
  [[nodiscard]] Slot* guest_slot() const noexcept { return waiters_work_ ? &slots_[arena_slots_] : nullptr; }
  void keep_own(Slot& own, TaskList& tasks, std::size_t count) noexcept;
  [[nodiscard]] Task* route(TaskList& ready, Slot* own) noexcept;
  [[nodiscard]] bool has_shared_work() const noexcept;
  [[nodiscard]] bool has_work() const noexcept;
  [[nodiscard]] bool slots_empty() const noexcept;
  void start_drainer_if_none_searching(std::uint64_t counts) noexcept;
  void launch_drainer() noexcept;

  ExecutorHost* host_ = nullptr;  // not owned: the engine, set by start()
  const std::uint32_t workers_;
  const std::chrono::nanoseconds spin_;
  const std::uint32_t hardware_threads_;
  const bool waiters_work_;                          // ThreadPoolOptions::waiters_work
  std::optional<tbb::global_control> thread_limit_;  // held only when the workers do not fit under oneTBB's limit
  tbb::task_arena arena_;

  // Written by submitters (a push) and by drainers and helpers (taking the whole stack), read by spinning drainers.
  // Linked through Task::next_, newest first.
  alignas(support::kCacheLine) std::atomic<Task*> inbox_{nullptr};
  // See outside_submitting(). Written by submits from outside the pool (only when it was false) and by helpers that
  // find nothing (only when it was true), read by idle drainers; on the inbox's line, which such a submit writes
  // anyway.
  std::atomic<bool> outside_submitting_{false};
  // See kSearcher/kDrainer: written by submits that start a drainer and by drainers as they find work or give up.
  alignas(support::kCacheLine) std::atomic<std::uint64_t> counts_{0};
  // One task handed from a worker to a searching thread (keep_own()): what a completion made ready beyond the op its
  // worker runs next, while another worker waits for work. Written by that worker, taken by whoever finds it first.
  alignas(support::kCacheLine) std::atomic<Task*> handoff_{nullptr};
  // Drainers and helpers only: the ready queue, under lock_, and its size, written under lock_ and read by spinning
  // drainers without it (a hint).
  alignas(support::kCacheLine) support::Spinlock lock_;
  ReadyQueue queue_;
  std::atomic<std::size_t> queued_{0};
  // Tasks of a priority above 0 submitted and not yet taken from the ready queue: while there are, a worker looks at
  // the ready queue before its own slot. Written only by such submits and their pops, so the line stays cached
  // everywhere.
  alignas(support::kCacheLine) std::atomic<std::uint32_t> urgent_{0};
  // One per index a thread of the arena may have (tbb::this_task_arena::current_thread_index()): arena_slots_ =
  // workers_ + 1, since oneTBB leaves index 0 to an outside thread in an arena of one slot without reserved ones (its
  // worker is index 1). Where helpers work as workers (waiters_work_), one more: the guest slot, held by one helping
  // thread at a time (guest_busy_).
  const std::uint32_t arena_slots_;
  const std::uint32_t slot_count_;
  std::unique_ptr<Slot[]> slots_;
  alignas(support::kCacheLine) std::atomic<bool> guest_busy_{false};
  std::unique_ptr<Watch[]> watches_;  // one per worker, where waiters_work_; the guest slot's holder's alone
  // Drainers alive, for stop() to wait on. A mutex rather than an atomic wait: the last drainer's notify must happen
  // before stop() can return and the executor be destroyed, and holding alive_mutex_ across it guarantees that.
  // Bumped (release) by every launch and read (acquire) by every drainer as it starts, so the executor's state and the
  // host set by start() are visible to the drainer through an edge of our own: the hand-off itself goes through
  // oneTBB's enqueue, which ThreadSanitizer cannot see (oneTBB is uninstrumented, cmake/tsan-ignorelist.txt).
  alignas(support::kCacheLine) std::atomic<std::uint64_t> launches_{0};
  std::mutex alive_mutex_;
  std::condition_variable alive_cv_;
  int alive_ = 0;  // guarded by alive_mutex_

  // Tells the host of the threads entering and leaving the arena; made by start() when the host observes threads.
  class ThreadObserver;
  std::unique_ptr<ThreadObserver> thread_observer_;
};

}  // namespace depengine
