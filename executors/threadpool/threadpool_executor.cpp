#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include <depengine/executors/threadpool/threadpool_executor.h>

namespace depengine {
namespace {

// The pool whose drainer the calling thread runs, if any: tells submits from outside the pool apart.
thread_local const ThreadPoolExecutor* t_draining = nullptr;

int hardware_threads() { return std::max(1, static_cast<int>(std::thread::hardware_concurrency())); }

int resolve_workers(int requested) {
  if (requested < 0) {
    throw std::invalid_argument("ThreadPoolOptions::workers must be >= 0 (0 = hardware threads), got " +
                                std::to_string(requested));
  }
  if (requested > 0) return requested;
  if (const char* env = std::getenv("DEPENGINE_CPU_WORKERS"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    const long workers = std::strtol(env, &end, 10);
    if (end == env || *end != '\0' || workers < 1 || workers > 4096) {
      throw std::invalid_argument(std::string("DEPENGINE_CPU_WORKERS='") + env +
                                  "': expected a number of worker threads from 1 to 4096");
    }
    return static_cast<int>(workers);
  }
  return hardware_threads();
}

}  // namespace

ThreadPoolExecutor::ThreadPoolExecutor(ThreadPoolOptions options)
    : workers_(static_cast<std::uint32_t>(resolve_workers(options.workers))),
      spin_(options.spin),
      hardware_threads_(static_cast<std::uint32_t>(hardware_threads())),
      waiters_work_(options.waiters_work),
      arena_(static_cast<int>(workers_), /*reserved_for_masters=*/0),
      arena_slots_(workers_ + 1),
      slot_count_(arena_slots_ + (waiters_work_ ? 1 : 0)),
      slots_(std::make_unique<Slot[]>(slot_count_)),
      watches_(waiters_work_ ? std::make_unique<Watch[]>(arena_slots_) : nullptr) {
  offers_work_first_ = options.work_first;
  // + 1: oneTBB counts the thread that starts its scheduler in the limit, and gives workers the rest.
  const std::size_t needed = static_cast<std::size_t>(workers_) + 1;
  if (tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism) < needed) {
    thread_limit_.emplace(tbb::global_control::max_allowed_parallelism, needed);
  }
}

// oneTBB calls it on each thread that joins or leaves the arena; it passes the thread on to the host.
//
// observe(false) waits for the callbacks in progress, and oneTBB calls none after it; but oneTBB is uninstrumented
// (cmake/tsan-ignorelist.txt), so the edges that ThreadSanitizer must see are our own: the constructor's release of
// armed_ before observe(true), and each callback's release of active_ once it is done with this object and the host,
// which the destructor acquires after observe(false).
class ThreadPoolExecutor::ThreadObserver final : public tbb::task_scheduler_observer {
 public:
  explicit ThreadObserver(ThreadPoolExecutor& pool) : tbb::task_scheduler_observer(pool.arena_), pool_(pool) {
    armed_.store(true, std::memory_order_release);  // release: pairs with the acquire in each callback
    observe(true);
  }
  ~ThreadObserver() override {
    observe(false);  // waits for the callbacks in progress; none is called after
    // acquire: pairs with the release decrement of each callback, the last access to this object and the host. Zero
    // at once, since observe(false) waited for them; the loop only names the edge.
    while (active_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
  }
  ThreadObserver(const ThreadObserver&) = delete;
  ThreadObserver& operator=(const ThreadObserver&) = delete;

  void on_scheduler_entry(bool /*is_worker*/) override { tell(true); }
  void on_scheduler_exit(bool /*is_worker*/) override { tell(false); }

 private:
  void tell(bool entered) noexcept {
    // acquire: pairs with the release in the constructor; before any other access to this object, which oneTBB's
    // threads (some made before it) reach through uninstrumented code alone.
    if (!armed_.load(std::memory_order_acquire)) return;
    // relaxed: the decrement below carries this callback's accesses to the destructor; the count only needs to be
    // exact.
    active_.fetch_add(1, std::memory_order_relaxed);
    const int worker = tbb::this_task_arena::current_thread_index();
    if (entered) {
      pool_.host_->thread_started(pool_, worker);
    } else {
      pool_.host_->thread_stopped(pool_, worker);
    }
    active_.fetch_sub(1, std::memory_order_release);  // release: pairs with the acquire in the destructor
  }

  ThreadPoolExecutor& pool_;
  std::atomic<bool> armed_{false};
  std::atomic<int> active_{0};  // callbacks in progress
};

ThreadPoolExecutor::~ThreadPoolExecutor() { stop(); }

void ThreadPoolExecutor::start(ExecutorHost& host) {
  host_ = &host;
  if (host.observes_threads()) thread_observer_ = std::make_unique<ThreadObserver>(*this);
}

void ThreadPoolExecutor::launch_drainer() noexcept {
  {
    std::lock_guard guard(alive_mutex_);
    ++alive_;
  }
  // release: pairs with the acquire at the start of drain().
  launches_.fetch_add(1, std::memory_order_release);
  arena_.enqueue([this] { drain(); });
}

// Starts a drainer, counted as searching, if none is searching and fewer than workers_ exist; if every worker is busy
// and none searches, wakes the threads waiting on the engine that work as workers (waiters_work_). `counts` is a value
// of counts_ read by the caller after it made its work visible (seq_cst).
void ThreadPoolExecutor::start_drainer_if_none_searching(std::uint64_t counts) noexcept {
  while (searchers(counts) == 0 && drainers(counts) < workers_) {
    // seq_cst: like every change of counts_, part of the Dekker pair described in next_task().
    if (counts_.compare_exchange_weak(counts, counts + kDrainer + kSearcher, std::memory_order_seq_cst)) {
      launch_drainer();
      return;
    }
  }
  // The executor's half of the Dekker pair of ExecutorHost::helpers_asleep: the work was made visible (seq_cst, but
  // for the ready queue's size, written under lock_), then this load. Only parallelism rests on it: every task queued
  // here is taken by a drainer anyway (next_task()), so a helper that misses one leaves it to the workers.
  if (waiters_work_ && searchers(counts) == 0 && host_->helpers_asleep()) host_->wake_helpers();
}

void ThreadPoolExecutor::submit(Task& task) noexcept {
  // relaxed: a hint for workers (find()); the task itself is published by the compare-exchange below.
  if (task.priority() > 0) urgent_.fetch_add(1, std::memory_order_relaxed);
  Task* newest = inbox_.load(std::memory_order_relaxed);
  do {
    task.next_ = newest;
    // seq_cst: releases the op's record to the consumer that takes the stack (its acquire exchange in pop_shared()),
    // and is the submit's half of the Dekker pair with a drainer that gives up (next_task()), with the load below.
  } while (!inbox_.compare_exchange_weak(newest, &task, std::memory_order_seq_cst, std::memory_order_relaxed));
  // relaxed: a hint (outside_submitting()); written only when it changes, so a stream of pushes writes it once.
  if (t_draining != this && !outside_submitting_.load(std::memory_order_relaxed)) {
    outside_submitting_.store(true, std::memory_order_relaxed);
  }
  start_drainer_if_none_searching(counts_.load(std::memory_order_seq_cst));
}

bool ThreadPoolExecutor::run_here(const Task& task) const noexcept {
  // relaxed, both: hints. An op still in the inbox is one no worker has taken since its submit: they are all busy, or
  // the one woken for it is not up yet. Reading the inbox line costs the pusher nothing: its submit would write it.
  return task.priority() >= 0 && inbox_.load(std::memory_order_relaxed) != nullptr &&
         urgent_.load(std::memory_order_relaxed) == 0;
}

bool ThreadPoolExecutor::has_shared_work() const noexcept {
  // relaxed: hints; pop_shared() decides under lock_.
  return inbox_.load(std::memory_order_relaxed) != nullptr || queued_.load(std::memory_order_relaxed) != 0;
}

Task* ThreadPoolExecutor::take_handoff() noexcept {
  // relaxed: looking first keeps the line shared while it is empty. acquire: pairs with the release of the
  // compare-exchange in keep_own(), so the task's record is visible.
  if (handoff_.load(std::memory_order_relaxed) == nullptr) return nullptr;
  return handoff_.exchange(nullptr, std::memory_order_acquire);
}

bool ThreadPoolExecutor::slots_empty() const noexcept {
  for (std::uint32_t i = 0; i < slot_count_; ++i) {
    // relaxed: a hint; steal() decides under the slot's lock.
    if (slots_[i].loaded.load(std::memory_order_relaxed)) return false;
  }
  return true;
}

bool ThreadPoolExecutor::has_work() const noexcept {
  // relaxed: a hint; take_handoff() decides with its exchange.
  return handoff_.load(std::memory_order_relaxed) != nullptr || has_shared_work() || !slots_empty();
}

// Moves the inbox into the ready queue, oldest first, and pops the task to start next (nullptr if none); `more` says
// whether tasks remain queued.
Task* ThreadPoolExecutor::pop_shared(bool& more) noexcept {
  std::lock_guard guard(lock_);
  // relaxed: looking first keeps the inbox line shared (not written) while it stays empty; the exchange decides.
  if (inbox_.load(std::memory_order_relaxed) != nullptr) {
    // acquire: pairs with the release of the compare-exchange of every submit() whose task is in the stack (they form
    // one release sequence), so the tasks' records are visible here.
    Task* newest = inbox_.exchange(nullptr, std::memory_order_acquire);
    Task* oldest = nullptr;
    while (newest != nullptr) {  // reverse the stack: submission order
      Task* next = newest->next_;
      newest->next_ = oldest;
      oldest = newest;
      newest = next;
    }
    std::size_t added = 0;
    while (oldest != nullptr) {
      Task* next = oldest->next_;
      queue_.push(oldest);
      oldest = next;
      ++added;
    }
    // relaxed: a hint for spinning drainers, written under lock_ only.
    queued_.store(queued_.load(std::memory_order_relaxed) + added, std::memory_order_relaxed);
  }
  Task* task = queue_.pop();
  if (task != nullptr) {
    queued_.store(queued_.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
    // relaxed: a hint (see urgent_).
    if (task->priority() > 0) urgent_.fetch_sub(1, std::memory_order_relaxed);
  }
  more = !queue_.empty();
  return task;
}

// The owner takes the oldest task of its slot; `more` says whether the slot holds more.
Task* ThreadPoolExecutor::pop_own(Slot& own, bool& more) noexcept {
  // relaxed: a hint; the owner alone makes the slot non-empty, so it reads its own write, or a thief's emptying.
  if (!own.loaded.load(std::memory_order_relaxed)) return nullptr;
  std::lock_guard guard(own.lock);
  Task* task = own.tasks.pop_front();
  if (task == nullptr) return nullptr;
  if (--own.count == 0) {
    // relaxed: turning empty needs no ordering; a searcher that still sees it loaded only looks once more.
    own.loaded.store(false, std::memory_order_relaxed);
  }
  more = own.count != 0;
  return task;
}

// The owner adds `count` tasks to its slot, up to its capacity (the rest go to the ready queue), and makes sure some
// thread looks for work if more could run. A single task goes to the hand-off cell instead while a thread searches.
void ThreadPoolExecutor::keep_own(Slot& own, TaskList& tasks, std::size_t count) noexcept {
  // relaxed: hints. A thread searches for work and the cell is free: hand it the task directly.
  if (count == 1 && searchers(counts_.load(std::memory_order_relaxed)) != 0 &&
      handoff_.load(std::memory_order_relaxed) == nullptr) {
    Task* task = tasks.pop_front();  // before the task is published: its taker may run and recycle it at once
    Task* expected = nullptr;
    // seq_cst: releases the task's record to take_handoff()'s acquire; and the giver's half of the Dekker pair with a
    // drainer that gives up (next_task()), with the load of counts_ below.
    if (handoff_.compare_exchange_strong(expected, task, std::memory_order_seq_cst, std::memory_order_relaxed)) {
      start_drainer_if_none_searching(counts_.load(std::memory_order_seq_cst));
      return;
    }
    tasks.push_back(task);
  }
  TaskList overflow;
  {
    std::lock_guard guard(own.lock);
    const std::size_t room = kSlotCapacity - std::min(kSlotCapacity, own.count);
    if (count > room) {
      TaskList kept;
      for (std::size_t k = 0; k < room; ++k) kept.push_back(tasks.pop_front());
      overflow.splice_back(tasks);
      tasks.splice_back(kept);
      count = room;
    }
    if (count != 0) {
      own.tasks.splice_back(tasks);
      if (own.count == 0) {
        // seq_cst: the owner's half of a Dekker pair with a drainer that gives up (next_task()): this store, then the
        // load of counts_ below; the drainer changes counts_, then loads `loaded`.
        own.loaded.store(true, std::memory_order_seq_cst);
      }
      own.count += count;
    }
  }
  while (Task* task = overflow.pop_front()) submit(*task);
  if (count != 0) start_drainer_if_none_searching(counts_.load(std::memory_order_seq_cst));
}

// Whether worker `worker` has run no op for kStuck, by the looks of the helper that holds the guest slot: it is blocked
// in a long op, or idle. Only then does a helper take work that a worker would take (the ready queue, a worker's
// slot). Else it would split the worker's short ops with it, and the lines they share (a variable their completions
// all release, the queue's lock) would cross the cores per op: a replayed fan-out of short readers ran 4-5x slower
// than on the worker alone.
bool ThreadPoolExecutor::stuck(std::uint32_t worker, Clock::time_point now) noexcept {
  Watch& watch = watches_[worker];
  // relaxed, both: hints. An index no drainer runs on holds no task and takes none.
  if (!slots_[worker].active.load(std::memory_order_relaxed)) {
    watch.stuck = false;
    return false;
  }
  const std::uint32_t ran = slots_[worker].ran.load(std::memory_order_relaxed);
  if (watch.ran != ran || watch.since == Clock::time_point{}) {
    watch.ran = ran;
    watch.since = now;
  }
  watch.stuck = now - watch.since >= kStuck;
  return watch.stuck;
}

// find() for the helper that holds the guest slot: its own slot, the hand-off cell; the slots of stuck workers; and the
// ready queue while a worker is stuck, or fewer drainers run than there are workers (a submit that saw the helper
// searching started none), or urgent tasks wait.
Task* ThreadPoolExecutor::find_as_guest(Slot& guest, bool& more) noexcept {
  more = false;
  Task* task = pop_own(guest, more);
  if (task == nullptr) task = take_handoff();
  if (task == nullptr && (has_shared_work() || !slots_empty())) {
    const Clock::time_point now = Clock::now();
    // relaxed: hints, as in find().
    bool shared =
        drainers(counts_.load(std::memory_order_relaxed)) < workers_ || urgent_.load(std::memory_order_relaxed) != 0;
    for (std::uint32_t i = 0; i < arena_slots_; ++i) shared = stuck(i, now) || shared;
    if (shared && has_shared_work()) task = pop_shared(more);
    if (task == nullptr) task = steal(&guest, more);
  }
  if (task != nullptr && !more) more = !slots_empty();
  return task;
}

// Takes the oldest half of another worker's slot (a helper, `own` null: one task). Returns the first task taken, and
// keeps the rest in `own`. `more` says whether tasks remain that other threads could take.
Task* ThreadPoolExecutor::steal(Slot* own, bool& more) noexcept {
  const std::uint32_t first = own != nullptr ? static_cast<std::uint32_t>(own - slots_.get()) + 1 : 0;
  for (std::uint32_t i = 0; i < slot_count_; ++i) {
    Slot& victim = slots_[(first + i) % slot_count_];
    // relaxed: a hint; decided under the victim's lock.
    if (&victim == own || !victim.loaded.load(std::memory_order_relaxed)) continue;
    // The guest takes only from a worker that its last look (find_as_guest()) found stuck.
    if (own != nullptr && own == guest_slot() && !watches_[&victim - slots_.get()].stuck) continue;
    TaskList taken;
    std::size_t count = 0;
    bool left = false;
    {
      std::lock_guard guard(victim.lock);
      count = own != nullptr ? (victim.count + 1) / 2 : std::min<std::size_t>(victim.count, 1);
      for (std::size_t k = 0; k < count; ++k) taken.push_back(victim.tasks.pop_front());
      victim.count -= count;
      // relaxed: as in pop_own().
      if (count != 0 && victim.count == 0) victim.loaded.store(false, std::memory_order_relaxed);
      left = victim.count != 0;
    }
    Task* task = taken.pop_front();
    if (task == nullptr) continue;
    if (count > 1) keep_own(*own, taken, count - 1);
    more = left || count > 1;
    return task;
  }
  return nullptr;
}

// The next task for a thread of the pool (`own`: its slot) or a helper (null): its own slot's oldest, unless urgent
// tasks wait in the ready queue; else the one in the hand-off cell; else the ready queue's next; else a share of
// another worker's slot.
//
// Every kFairness-th time a worker looks, it looks at the ready queue first, so that ops pushed from outside are not
// held back for long by a worker whose completions keep refilling its slot.
// `more` says whether tasks remain that another thread could take: in the queue, in this slot, or in any other slot
// (a slot's owner may be blocked in a long op, and the searcher it counted on may have just taken other work).
Task* ThreadPoolExecutor::find(Slot* own, bool& more) noexcept {
  more = false;
  // relaxed: a hint; an urgent task submitted a moment later starts after the task taken here.
  bool shared_first = urgent_.load(std::memory_order_relaxed) != 0;
  if (own != nullptr && ++own->streak >= kFairness) {
    own->streak = 0;
    shared_first = true;
  }
  Task* task = nullptr;
  if (own != nullptr && !shared_first) task = pop_own(*own, more);
  if (task == nullptr && !shared_first) task = take_handoff();
  if (task == nullptr && has_shared_work()) task = pop_shared(more);
  if (task == nullptr && shared_first) task = take_handoff();
  if (task == nullptr && own != nullptr && shared_first) task = pop_own(*own, more);
  if (task == nullptr) task = steal(own, more);
  if (task != nullptr && !more) more = !slots_empty();
  return task;
}

// Routes what a completion made ready: returns the task to run next on this thread (take_ready()'s choice), keeps the
// other priority-0 tasks of this pool in the worker's slot, and submits the rest.
Task* ThreadPoolExecutor::route(TaskList& ready, Slot* own) noexcept {
  if (own == nullptr) return take_ready(ready, this);
  Task* keep = nullptr;
  TaskList mine, others;
  std::size_t count = 0;
  while (Task* task = ready.pop_front()) {
    if (task->executor() == this && (keep == nullptr || task->priority() > keep->priority())) std::swap(keep, task);
    if (task == nullptr) continue;
    if (task->executor() == this && task->priority() == 0) {
      mine.push_back(task);
      ++count;
    } else {
      others.push_back(task);
    }
  }
  if (count != 0) keep_own(*own, mine, count);
  submit_in_priority_order(others);
  return keep;
}

bool ThreadPoolExecutor::try_help() noexcept {
  // A helper that works as a worker borrows the guest slot, unless another helper holds it: what it steals and what its
  // completions make ready then stay with it, as with a worker, where the pool's workers can steal them.
  // relaxed: looking first keeps the line shared while another helper holds it. acquire: pairs with the release that
  // gives it back below; the guest's own state (the slot's streak, watches_) passes with it.
  Slot* const guest = waiters_work_ && !guest_busy_.load(std::memory_order_relaxed) &&
                              !guest_busy_.exchange(true, std::memory_order_acquire)
                          ? guest_slot()
                          : nullptr;
  bool more = false;
  Task* task = guest != nullptr ? find_as_guest(*guest, more) : find(nullptr, more);
  if (task == nullptr && guest != nullptr) task = search_as_helper(*guest, more);
  const bool found = task != nullptr;
  if (found) {
    // Work remains and nobody looks for it: hand the search on, as a drainer would. seq_cst: as in next_task().
    if (more) start_drainer_if_none_searching(counts_.load(std::memory_order_seq_cst));
    // The op and, as on a worker, the chain it starts, for at most kHelpChain ops: then back to the wait, whose
    // condition a chain fed by another thread's pushes could otherwise keep the helper from for good.
    TaskList ready;
    for (std::uint32_t ran = 0; task != nullptr; ++ran) {
      if (ran == kHelpChain) {
        submit(*task);
        break;
      }
      host_->execute(*task, -1, ready);
      task = route(ready, guest);
    }
  } else if (outside_submitting_.load(std::memory_order_relaxed)) {
    // relaxed: a hint. The waiting thread is about to sleep, or to look again: it no longer needs a core from us.
    outside_submitting_.store(false, std::memory_order_relaxed);
  }
  if (guest != nullptr) guest_busy_.store(false, std::memory_order_release);  // pairs with the acquire above
  return found;
}

// Whether no task is queued anywhere: the second half of a searcher's leaving (next_task(), search_as_helper()), after
// its change of counts_.
bool ThreadPoolExecutor::idle() noexcept {
  {
    std::lock_guard guard(lock_);
    // seq_cst: the leaver's half of the Dekker pair with submit().
    if (!queue_.empty() || inbox_.load(std::memory_order_seq_cst) != nullptr) return false;
  }
  // seq_cst: the leaver's half of the Dekker pair with keep_own()'s hand-off.
  if (handoff_.load(std::memory_order_seq_cst) != nullptr) return false;
  for (std::uint32_t i = 0; i < slot_count_; ++i) {
    // seq_cst: the leaver's half of the Dekker pair with keep_own().
    if (slots_[i].loaded.load(std::memory_order_seq_cst)) return false;
  }
  return true;
}

// A helper that holds the guest slot and found no task searches as a drainer does, for 2 kStuck, counted as a
// searcher: so keep_own() hands it a lone task through the hand-off cell, and a submit leaves the task to it rather
// than wake a worker. Its looks are paced (stuck() times them). Returns the task found, or nullptr; in both cases it
// no longer counts as searching.
Task* ThreadPoolExecutor::search_as_helper(Slot& guest, bool& more) noexcept {
  // seq_cst: as every change of counts_ (see next_task()).
  counts_.fetch_add(kSearcher, std::memory_order_seq_cst);
  // The last look comes after the slice, 2 kStuck: a worker blocked since the first look is seen stuck by then.
  const Clock::time_point until = Clock::now() + 2 * kStuck;
  Task* task = nullptr;
  for (bool last = false; task == nullptr && !last;) {
    // relaxed: a hint; find_as_guest() decides. Only a hand-off cuts the pause short: queued work the helper may not
    // take (stuck()) would otherwise keep it looking without a pause, at the lines the workers write.
    for (int i = 0; i < 32 && handoff_.load(std::memory_order_relaxed) == nullptr; ++i) support::cpu_relax();
    last = Clock::now() >= until;
    task = find_as_guest(guest, more);
  }
  const std::uint64_t counts = counts_.fetch_sub(kSearcher, std::memory_order_seq_cst) - kSearcher;
  // Leaving empty-handed, as a drainer that gives up: work that arrived meanwhile, whose submit may have seen us
  // searching and started nobody, goes to a drainer.
  if (task == nullptr && !idle()) start_drainer_if_none_searching(counts);
  return task;
}

// Returns the next op for a drainer, which counts as searching, to run, or nullptr when the drainer should finish (it
// is then no longer counted).
//
// Giving up is one half of a Dekker pair with submit(): the drainer leaves counts_ and then looks at the inbox once
// more (seq_cst both); submit() pushes to the inbox and then reads counts_ (seq_cst both). One of the two sees the
// other: either the drainer sees the op and comes back, or the submit sees the drainer gone and starts one. The same
// pair holds with a worker that fills its empty slot or the hand-off cell (keep_own(): `loaded` or handoff_, then
// counts_). The ready queue is looked at under lock_, where every consumer changes it. So an op is never left queued
// with nobody searching.
Task* ThreadPoolExecutor::next_task(Slot* own) {
  Clock::time_point give_up{};
  for (;;) {
    bool more = false;
    if (Task* task = has_work() ? find(own, more) : nullptr) {
      const std::uint64_t counts = counts_.fetch_sub(kSearcher, std::memory_order_seq_cst) - kSearcher;
      // Work remains and nobody else is looking: hand the search on to one more thread.
      if (more) start_drainer_if_none_searching(counts);
      return task;
    }
    const Clock::time_point now = Clock::now();
    if (give_up == Clock::time_point{}) {
      give_up = now + spin_;
    } else if (now >= give_up) {
      std::uint64_t counts =
          counts_.fetch_sub(kDrainer + kSearcher, std::memory_order_seq_cst) - (kDrainer + kSearcher);
      if (idle()) return nullptr;
      // Work arrived as we left, and its submit may have seen us searching: search again, unless another drainer
      // does or the pool is full again.
      bool back = false;
      while (!back && searchers(counts) == 0 && drainers(counts) < workers_) {
        back = counts_.compare_exchange_weak(counts, counts + kDrainer + kSearcher, std::memory_order_seq_cst);
      }
      if (!back) return nullptr;
      give_up = Clock::time_point{};
      continue;
    }
    // relaxed: hints. Searched for a quarter of the spin in vain while a thread outside the pool pushes and the
    // drainers fill every hardware thread: let that thread have this core (see the header).
    if (now >= give_up - spin_ * 3 / 4 && outside_submitting_.load(std::memory_order_relaxed) &&
        drainers(counts_.load(std::memory_order_relaxed)) >= hardware_threads_) {
      std::this_thread::yield();
    } else {
      for (int i = 0; i < 256 && !has_work(); ++i) support::cpu_relax();
    }
  }
}

void ThreadPoolExecutor::drain() {
  // acquire: pairs with the release in launch_drainer(); the value read is that launch's or a later one's, all in the
  // counter's release sequence.
  (void)launches_.load(std::memory_order_acquire);
  const int worker = tbb::this_task_arena::current_thread_index();
  const ThreadPoolExecutor* const outer = std::exchange(t_draining, this);  // an op may wait in oneTBB and nest us
  // A thread of the arena has an index below arena_slots_; anything else (never seen) runs without a slot, as a helper.
  Slot* const own = worker >= 0 && static_cast<std::uint32_t>(worker) < arena_slots_
                        ? &slots_[static_cast<std::size_t>(worker)]
                        : nullptr;
  // Progress for helpers (stuck()), counted only where they work (waiters_work_). relaxed: hints; the drainer's alone.
  Slot* const watched = waiters_work_ ? own : nullptr;
  if (watched != nullptr) watched->active.store(true, std::memory_order_relaxed);
  TaskList ready;
  while (Task* task = next_task(own)) {
    while (task != nullptr) {
      do {
        host_->execute(*task, worker, ready);
        if (watched != nullptr) {
          watched->ran.store(watched->ran.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
        }
        // The common cases without a call: nothing made ready, or one op of this pool (a chain).
        const Task* made = ready.front();
        task = made == nullptr || (made->next_ == nullptr && made->executor() == this) ? ready.pop_front()
                                                                                       : route(ready, own);
      } while (task != nullptr);
      // Still counted as running, not searching: the next task is taken at once, without touching counts_ (a
      // searcher's round trip, two read-modify-writes on a line every drainer shares, per op of a fan-out).
      bool more = false;
      task = find(own, more);  // each place it looks at is guarded by a hint read first
      // Work remains and nobody looks for it: hand the search to one more thread, as a searcher that found work would.
      // seq_cst: as every access to counts_ (see next_task()).
      if (more) start_drainer_if_none_searching(counts_.load(std::memory_order_seq_cst));
    }
    // seq_cst: see next_task(). Searching again.
    counts_.fetch_add(kSearcher, std::memory_order_seq_cst);
  }
  if (watched != nullptr) watched->active.store(false, std::memory_order_relaxed);  // relaxed: as above
  t_draining = outer;
  // The last access to this object: stop() cannot return before we release alive_mutex_.
  std::lock_guard guard(alive_mutex_);
  if (--alive_ == 0) alive_cv_.notify_all();
}

void ThreadPoolExecutor::stop() noexcept {
  {
    std::unique_lock lock(alive_mutex_);
    alive_cv_.wait(lock, [this] { return alive_ == 0; });
  }
  // A thread still in the arena now gets no stop call: the host may be gone once stop() returns.
  thread_observer_.reset();
}

}  // namespace depengine
