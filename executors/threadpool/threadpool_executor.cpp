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
    : workers_(resolve_workers(options.workers)),
      spin_(options.spin),
      thread_limit_(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(workers_) + 1),
      arena_(workers_, /*reserved_for_masters=*/0) {}

ThreadPoolExecutor::~ThreadPoolExecutor() { stop(); }

Task* ThreadPoolExecutor::pop_locked() noexcept {
  Task* task = queue_.pop();
  if (task != nullptr) {
    // relaxed: a hint for spinning drainers; the queue itself is read under lock_.
    queued_.store(queued_.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
  }
  return task;
}

bool ThreadPoolExecutor::claim_drainer_locked() noexcept {
  if (searching_ > 0 || drainers_ >= workers_) return false;
  ++drainers_;
  ++searching_;  // a new drainer starts out searching
  return true;
}

void ThreadPoolExecutor::launch_drainer() {
  {
    std::lock_guard guard(alive_mutex_);
    ++alive_;
  }
  // release: pairs with the acquire at the start of drain().
  launches_.fetch_add(1, std::memory_order_release);
  arena_.enqueue([this] { drain(); });
}

void ThreadPoolExecutor::submit(Task& task) noexcept {
  bool start_drainer;
  {
    std::lock_guard guard(lock_);
    queue_.push(&task);
    // relaxed: a hint; see pop_locked().
    queued_.store(queued_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    start_drainer = claim_drainer_locked();
  }
  if (start_drainer) launch_drainer();
}

bool ThreadPoolExecutor::try_help() noexcept {
  Task* task;
  {
    std::lock_guard guard(lock_);
    task = pop_locked();
  }
  if (task == nullptr) return false;
  TaskList ready;
  host_->execute(*task, -1, ready);
  // A helper runs one op and returns to its wait: everything it made ready goes to the queue.
  if (Task* keep = take_ready(ready, this)) submit(*keep);
  return true;
}

// Returns the next op for a drainer to run, or nullptr when the drainer should finish. `was_running` says the drainer
// comes back from running ops (and so is not yet counted as searching).
Task* ThreadPoolExecutor::next_task(bool was_running) {
  using Clock = std::chrono::steady_clock;
  Clock::time_point give_up{};
  for (;;) {
    bool start_drainer = false;
    Task* task;
    {
      std::lock_guard guard(lock_);
      if (was_running) {
        ++searching_;
        was_running = false;
      }
      task = pop_locked();
      if (task != nullptr) {
        --searching_;
        // Work remains and nobody else is looking: hand the search on to one more thread.
        if (!queue_.empty()) start_drainer = claim_drainer_locked();
      } else if (give_up != Clock::time_point{} && Clock::now() >= give_up) {
        --searching_;
        --drainers_;
        return nullptr;  // decided under lock_: a submit after this sees searching_ == 0 and starts a drainer
      }
    }
    if (start_drainer) launch_drainer();
    if (task != nullptr) return task;
    if (give_up == Clock::time_point{}) give_up = Clock::now() + spin_;
    // relaxed: a hint; whether there really is work is decided under lock_ above.
    for (int i = 0; i < 256 && queued_.load(std::memory_order_relaxed) == 0; ++i) support::cpu_relax();
  }
}

void ThreadPoolExecutor::drain() {
  // acquire: pairs with the release in launch_drainer(); the value read is that launch's or a later one's, all in the
  // counter's release sequence.
  (void)launches_.load(std::memory_order_acquire);
  const int worker = tbb::this_task_arena::current_thread_index();
  TaskList ready;
  for (Task* task = next_task(false); task != nullptr; task = next_task(true)) {
    do {
      host_->execute(*task, worker, ready);
      task = take_ready(ready, this);
    } while (task != nullptr);
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
