#include "executors/threadpool/threadpool_executor.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

namespace depengine {
namespace {

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
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

}  // namespace

ThreadPoolExecutor::ThreadPoolExecutor(ThreadPoolOptions options)
    : workers_(static_cast<std::uint32_t>(resolve_workers(options.workers))),
      spin_(options.spin),
      arena_(static_cast<int>(workers_), /*reserved_for_masters=*/0) {
  // + 1: oneTBB counts the thread that starts its scheduler in the limit, and gives workers the rest.
  const std::size_t needed = static_cast<std::size_t>(workers_) + 1;
  if (tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism) < needed) {
    thread_limit_.emplace(tbb::global_control::max_allowed_parallelism, needed);
  }
}

ThreadPoolExecutor::~ThreadPoolExecutor() { stop(); }

void ThreadPoolExecutor::launch_drainer() noexcept {
  {
    std::lock_guard guard(alive_mutex_);
    ++alive_;
  }
  // release: pairs with the acquire at the start of drain().
  launches_.fetch_add(1, std::memory_order_release);
  arena_.enqueue([this] { drain(); });
}

// Starts a drainer, counted as searching, if none is searching and fewer than workers_ exist. `counts` is a value of
// counts_ read by the caller after it made its work visible.
void ThreadPoolExecutor::start_drainer_if_none_searching(std::uint64_t counts) noexcept {
  while (searchers(counts) == 0 && drainers(counts) < workers_) {
    // seq_cst: like every change of counts_, part of the Dekker pair described in next_task().
    if (counts_.compare_exchange_weak(counts, counts + kDrainer + kSearcher, std::memory_order_seq_cst)) {
      launch_drainer();
      return;
    }
  }
}

void ThreadPoolExecutor::submit(Task& task) noexcept {
  Task* newest = inbox_.load(std::memory_order_relaxed);
  do {
    task.next_ = newest;
    // seq_cst: releases the op's record to the consumer that takes the stack (its acquire exchange in pop()), and is
    // the submit's half of the Dekker pair with a drainer that gives up (next_task()), with the load below.
  } while (!inbox_.compare_exchange_weak(newest, &task, std::memory_order_seq_cst, std::memory_order_relaxed));
  start_drainer_if_none_searching(counts_.load(std::memory_order_seq_cst));
}

bool ThreadPoolExecutor::has_work() const noexcept {
  // relaxed: hints for a spinning drainer; pop() decides under lock_.
  return inbox_.load(std::memory_order_relaxed) != nullptr || queued_.load(std::memory_order_relaxed) != 0;
}

// Moves the inbox into the ready queue, oldest first, and pops the task to start next (nullptr if none); `more` says
// whether tasks remain queued.
Task* ThreadPoolExecutor::pop(bool& more) noexcept {
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
  if (task != nullptr) queued_.store(queued_.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
  more = !queue_.empty();
  return task;
}

bool ThreadPoolExecutor::try_help() noexcept {
  bool more = false;
  Task* task = has_work() ? pop(more) : nullptr;
  if (task == nullptr) return false;
  TaskList ready;
  host_->execute(*task, -1, ready);
  // A helper runs one op and returns to its wait: everything it made ready goes to the queue.
  if (Task* keep = take_ready(ready, this)) submit(*keep);
  return true;
}

// Returns the next op for a drainer, which counts as searching, to run, or nullptr when the drainer should finish (it
// is then no longer counted).
//
// Giving up is one half of a Dekker pair with submit(): the drainer leaves counts_ and then looks at the inbox once
// more (seq_cst both); submit() pushes to the inbox and then reads counts_ (seq_cst both). One of the two sees the
// other: either the drainer sees the op and comes back, or the submit sees the drainer gone and starts one. The ready
// queue is looked at under lock_, where every consumer changes it. So an op is never left queued with nobody searching.
Task* ThreadPoolExecutor::next_task() {
  using Clock = std::chrono::steady_clock;
  Clock::time_point give_up{};
  for (;;) {
    if (has_work()) {
      bool more = false;
      if (Task* task = pop(more)) {
        const std::uint64_t counts = counts_.fetch_sub(kSearcher, std::memory_order_seq_cst) - kSearcher;
        // Work remains and nobody else is looking: hand the search on to one more thread.
        if (more) start_drainer_if_none_searching(counts);
        return task;
      }
    }
    const Clock::time_point now = Clock::now();
    if (give_up == Clock::time_point{}) {
      give_up = now + spin_;
    } else if (now >= give_up) {
      std::uint64_t counts =
          counts_.fetch_sub(kDrainer + kSearcher, std::memory_order_seq_cst) - (kDrainer + kSearcher);
      bool idle;
      {
        std::lock_guard guard(lock_);
        idle = queue_.empty() && inbox_.load(std::memory_order_seq_cst) == nullptr;
      }
      if (idle) return nullptr;
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
    for (int i = 0; i < 256 && !has_work(); ++i) support::cpu_relax();
  }
}

void ThreadPoolExecutor::drain() {
  // acquire: pairs with the release in launch_drainer(); the value read is that launch's or a later one's, all in the
  // counter's release sequence.
  (void)launches_.load(std::memory_order_acquire);
  const int worker = tbb::this_task_arena::current_thread_index();
  TaskList ready;
  while (Task* task = next_task()) {
    while (task != nullptr) {
      do {
        host_->execute(*task, worker, ready);
        task = take_ready(ready, this);
      } while (task != nullptr);
      // Still counted as running, not searching: the next queued op is taken at once, without touching counts_ (a
      // searcher's round trip, two read-modify-writes on a line every drainer shares, per op of a fan-out).
      bool more = false;
      task = has_work() ? pop(more) : nullptr;
      // Work remains and nobody looks for it: hand the search to one more thread, as a searcher that found work would.
      // seq_cst: as every access to counts_ (see next_task()).
      if (more) start_drainer_if_none_searching(counts_.load(std::memory_order_seq_cst));
    }
    // seq_cst: see next_task(). Searching again.
    counts_.fetch_add(kSearcher, std::memory_order_seq_cst);
  }
  // The last access to this object: stop() cannot return before we release alive_mutex_.
  std::lock_guard guard(alive_mutex_);
  if (--alive_ == 0) alive_cv_.notify_all();
}

void ThreadPoolExecutor::stop() noexcept {
  std::unique_lock lock(alive_mutex_);
  alive_cv_.wait(lock, [this] { return alive_ == 0; });
}

}  // namespace depengine
