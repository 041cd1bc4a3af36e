// ReadyQueue: ready tasks in the order an executor starts them: a higher priority first (Task::priority(),
// PushOptions:: priority), and in submission order among equal priorities.
//
// Priority 0, what nearly every op has, goes to a FIFO list: O(1), no allocation. Other priorities go to a binary heap
// ordered by (priority, arrival), the arrival number kept in the task's executor word while it is queued; a heap
// operation is O(log n) and allocates only when the heap grows past its capacity so far. If that allocation fails the
// task joins the FIFO instead: its place in the order is lost, never the task.
//
// submit_in_priority_order() hands a list of tasks made ready together to their executors in that order, so that an
// executor that starts each task as it is submitted (the inline executor, an idle stream executor) still starts them
// by priority; take_ready() routes what a completion made ready through it.
//
// Thread safety: none; the owner guards it (an executor's queue lock) or keeps it to one thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include <depengine/executors/executor.h>

namespace depengine {

class ReadyQueue {
 public:
  // Whether no task is queued.
  [[nodiscard]] bool empty() const noexcept { return fifo_.empty() && heap_.empty(); }

  // Queues `task` in its place: by priority, then in submission order.
  void push(Task* task) noexcept {
    if (task->priority() == 0) {
      fifo_.push_back(task);
      return;
    }
    task->executor_word_ = arrivals_++;
    try {
      heap_.push_back(task);
    } catch (...) {  // out of memory: keep the task, lose its place
      fifo_.push_back(task);
      return;
    }
    std::push_heap(heap_.begin(), heap_.end(), runs_later);
  }

  // The task to start next, or nullptr when empty.
  [[nodiscard]] Task* pop() noexcept {
    if (!heap_.empty() && (heap_.front()->priority() > 0 || fifo_.empty())) {
      std::pop_heap(heap_.begin(), heap_.end(), runs_later);
      Task* task = heap_.back();
      heap_.pop_back();
      return task;
    }
    return fifo_.pop_front();
  }

 private:
  // The heap's order: whether `a` starts after `b`.
  static bool runs_later(const Task* a, const Task* b) noexcept {
    return a->priority() != b->priority() ? a->priority() < b->priority() : a->executor_word_ > b->executor_word_;
  }

  TaskList fifo_;            // priority 0, in submission order
  std::vector<Task*> heap_;  // other priorities
  std::uint64_t arrivals_ = 0;
};

// Submits every task of `ready` to its executor, highest priority first, in list order among equal priorities. A list
// whose tasks share one priority (the common case) is submitted as it is, without a queue. Executors that start a task
// as it is submitted (inline, a stream executor that is not issuing) then start them in that order too.
inline void submit_in_priority_order(TaskList& ready) noexcept {
  bool mixed = false;
  if (const Task* first = ready.front(); first != nullptr) {
    for (const Task* task = first->next_; task != nullptr && !mixed; task = task->next_) {
      mixed = task->priority() != first->priority();
    }
  }
  if (!mixed) {
    while (Task* task = ready.pop_front()) task->executor()->submit(*task);
    return;
  }
  ReadyQueue queue;
  while (Task* task = ready.pop_front()) queue.push(task);
  while (Task* task = queue.pop()) task->executor()->submit(*task);
}

// Routes the tasks in `ready`: submits every task that belongs to another executor (submit_in_priority_order), and
// every task of `self` but one, which it returns for the caller to run next on this thread (nullptr if none is
// `self`'s). The kept task is the first of highest priority, so a chain stays on one thread and urgent work is not
// queued behind it.
inline Task* take_ready(TaskList& ready, const Executor* self) noexcept {
  Task* keep = nullptr;
  TaskList others;
  while (Task* task = ready.pop_front()) {
    if (task->executor() == self && (keep == nullptr || task->priority() > keep->priority())) {
      std::swap(keep, task);
      if (task == nullptr) continue;
    }
    others.push_back(task);
  }
  submit_in_priority_order(others);
  return keep;
}

}  // namespace depengine
