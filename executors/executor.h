// The running policy: what an Engine hands ready ops to.
//
// The engine tracks dependencies; an Executor decides where and when a ready op runs. The engine calls submit() with
// an op whose every dependency is satisfied; the executor eventually calls ExecutorHost::execute() for it on a thread
// of its choosing. execute() runs the op's function, completes it, and returns the ops that its completion made
// ready; the executor routes them with take_ready(), keeping one of its own to run next on the same thread (so a
// chain never crosses threads) and submitting the rest.
//
// An executor owns its threads and queues. It never learns what an op does, only its priority and which executor it
// belongs to. (Stream executors, which issue an op before it completes, extend ExecutorHost with issue and
// completion reports; CPU executors complete an op when execute() returns.)
//
// Lifetime: the Engine owns its executors. It calls start() once before the first submit(), and stop() once after
// the last op has completed; the executor must not call into the host after stop() returns.
// Thread safety: submit() and try_help() are called from any thread, concurrently; start()/stop() from the thread
// that builds or destroys the engine.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>

namespace depengine {

class Executor;

// The part of an op that executors see: where it runs, how urgent it is, and a link for the executor's queues.
class Task {
 public:
  [[nodiscard]] Executor* executor() const noexcept { return executor_; }
  // A hint: higher runs earlier among ops that are ready at the same time. 0 is normal.
  [[nodiscard]] std::int32_t priority() const noexcept { return priority_; }

  // Intrusive link, owned by whichever queue or TaskList holds the task (a task is in at most one).
  Task* next_ = nullptr;

 protected:
  Executor* executor_ = nullptr;  // not owned: the engine owns executors and outlives its ops
  std::int32_t priority_ = 0;
};

// An intrusive FIFO of tasks. Owned by one thread at a time; never allocates.
class TaskList {
 public:
  [[nodiscard]] bool empty() const noexcept { return head_ == nullptr; }

  void push_back(Task* task) noexcept {
    task->next_ = nullptr;
    if (tail_ != nullptr) {
      tail_->next_ = task;
    } else {
      head_ = task;
    }
    tail_ = task;
  }

  [[nodiscard]] Task* pop_front() noexcept {
    Task* task = head_;
    if (task != nullptr) {
      head_ = task->next_;
      if (head_ == nullptr) tail_ = nullptr;
    }
    return task;
  }

 private:
  Task* head_ = nullptr;
  Task* tail_ = nullptr;
};

// What an executor may ask of the engine. Implemented by the engine.
class ExecutorHost {
 public:
  // Runs `task`'s function on the calling thread, with `worker` as the run context's worker index (-1 for a thread
  // that is not one of the executor's workers), then completes it (unless it is asynchronous and completes later).
  // Tasks made ready are appended to `ready`, for the caller to route with take_ready(). Never throws: the op's
  // errors go to its variables.
  virtual void execute(Task& task, int worker, TaskList& ready) noexcept = 0;

 protected:
  ~ExecutorHost() = default;
};

class Executor {
 public:
  Executor() = default;
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;
  virtual ~Executor() = default;

  // A short name for traces and error messages, e.g. "threadpool".
  [[nodiscard]] virtual std::string_view name() const noexcept = 0;

  // Called once by the engine before any submit(). `host` outlives the executor's use of it (until stop()).
  virtual void start(ExecutorHost& host) = 0;

  // Takes a ready task and runs it eventually. May run it before returning (the inline executor does). Any thread.
  virtual void submit(Task& task) noexcept = 0;

  // Runs one queued task on the calling thread, if there is one, and returns whether it did. Called by threads that
  // wait (WaitForAll, a push held back by the in-flight bound) so that they help rather than idle. Any thread.
  [[nodiscard]] virtual bool try_help() noexcept = 0;

  // Called once by the engine when no op is in flight and none will be pushed again: release threads.
  virtual void stop() noexcept = 0;
};

// Routes the tasks in `ready`: submits every task that belongs to another executor, and every task of `self` but one,
// which it returns for the caller to run next on this thread (nullptr if none is `self`'s). The kept task is the
// first of highest priority, so a chain stays on one thread and urgent work is not queued behind it.
inline Task* take_ready(TaskList& ready, const Executor* self) noexcept {
  Task* keep = nullptr;
  while (Task* task = ready.pop_front()) {
    if (task->executor() == self && (keep == nullptr || task->priority() > keep->priority())) {
      std::swap(keep, task);
      if (task == nullptr) continue;
    }
    task->executor()->submit(*task);
  }
  return keep;
}

}  // namespace depengine
