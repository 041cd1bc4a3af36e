// ReadyQueue and submit_in_priority_order (executors/ready_queue.h) on their own: higher priority first, submission
// order among equal priorities, priority 0 between the positive and the negative ones.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <deque>
#include <random>
#include <string_view>
#include <utility>
#include <vector>

#include <depengine/executors/ready_queue.h>

#include "test/test_support.h"

namespace depengine::test {
namespace {

struct PlainTask : Task {
  PlainTask(Executor* runs_on, std::int32_t urgency, int task_id) : id(task_id) {
    executor_ = runs_on;
    priority_ = urgency;
  }
  int id;
};

// An executor that records the order of submissions.
class Recorder final : public Executor {
 public:
  [[nodiscard]] std::string_view name() const noexcept override { return "recorder"; }
  void start(ExecutorHost& /*host*/) override {}
  void submit(Task& task) noexcept override { order.push_back(static_cast<PlainTask&>(task).id); }
  [[nodiscard]] bool try_help() noexcept override { return false; }
  void stop() noexcept override {}
  std::vector<int> order;
};

// The order a stable sort by descending priority gives: what the queue must produce.
std::vector<int> expected_order(const std::deque<PlainTask>& tasks) {
  std::vector<const PlainTask*> sorted;
  for (const PlainTask& task : tasks) sorted.push_back(&task);
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const PlainTask* a, const PlainTask* b) { return a->priority() > b->priority(); });
  std::vector<int> ids;
  for (const PlainTask* task : sorted) ids.push_back(task->id);
  return ids;
}

TEST_CASE("ReadyQueue pops by priority, in push order among equals", "[executors][ready_queue]") {
  Recorder executor;
  const std::vector<std::int32_t> priorities = {0, -5, 0, 1, 0, 10, 2, -5, 1};
  std::deque<PlainTask> tasks;
  ReadyQueue queue;
  CHECK(queue.empty());
  for (std::size_t i = 0; i < priorities.size(); ++i) {
    tasks.emplace_back(&executor, priorities[i], static_cast<int>(i));
    queue.push(&tasks.back());
  }
  CHECK_FALSE(queue.empty());
  std::vector<int> popped;
  while (Task* task = queue.pop()) popped.push_back(static_cast<PlainTask*>(task)->id);
  CHECK(queue.empty());
  CHECK(popped == std::vector<int>{5, 6, 3, 8, 0, 2, 4, 1, 7});
}

TEST_CASE("ReadyQueue keeps the order under random interleaved pushes and pops", "[executors][ready_queue][random]") {
  Recorder executor;
  for (const std::uint64_t seed : test_seeds()) {
    CAPTURE(seed);
    std::mt19937_64 rng(seed);
    std::deque<PlainTask> tasks;
    ReadyQueue queue;
    std::vector<const PlainTask*> waiting;  // the model: what is queued, in push order
    for (int step = 0; step < 20'000; ++step) {
      if (waiting.empty() || rng() % 3 != 0) {
        const auto priority = rng() % 2 == 0 ? 0 : static_cast<std::int32_t>(rng() % 9) - 4;
        tasks.emplace_back(&executor, priority, step);
        queue.push(&tasks.back());
        waiting.push_back(&tasks.back());
        continue;
      }
      // The model's next: the first of the highest priority.
      auto next = waiting.begin();
      for (auto it = waiting.begin(); it != waiting.end(); ++it) {
        if ((*it)->priority() > (*next)->priority()) next = it;
      }
      const Task* popped = queue.pop();
      REQUIRE(popped == *next);
      waiting.erase(next);
    }
  }
}

TEST_CASE("submit_in_priority_order submits a list by priority, and a list of one priority as it is",
          "[executors][ready_queue]") {
  Recorder executor;
  for (const std::vector<std::int32_t>& priorities :
       {std::vector<std::int32_t>{0, 0, 0}, std::vector<std::int32_t>{-3, -3},
        std::vector<std::int32_t>{0, -1, 3, 0, 3}}) {
    std::deque<PlainTask> tasks;
    TaskList ready;
    for (std::size_t i = 0; i < priorities.size(); ++i) {
      tasks.emplace_back(&executor, priorities[i], static_cast<int>(i));
      ready.push_back(&tasks.back());
    }
    executor.order.clear();
    submit_in_priority_order(ready);
    CHECK(ready.empty());
    CHECK(executor.order == expected_order(tasks));
  }
}

}  // namespace
}  // namespace depengine::test
