#include <depengine/executors/inline_executor.h>
#include <depengine/executors/ready_queue.h>

namespace depengine {

void InlineExecutor::submit(Task& task) noexcept {
  TaskList ready;
  host_->execute(task, -1, ready);
  if (!ready.empty()) run_ready(ready);  // most ops make nothing ready: no queue for them
}

// Runs what an op made ready, then what those make ready, and so on, from a queue that starts the highest priority
// first: the ops that one completion makes ready run by priority, as on the other executors.
void InlineExecutor::run_ready(TaskList& ready) noexcept {
  ReadyQueue queue;
  for (;;) {
    while (Task* made_ready = ready.pop_front()) {
      if (made_ready->executor() == this) {
        queue.push(made_ready);
      } else {
        made_ready->executor()->submit(*made_ready);
      }
    }
    Task* next = queue.pop();
    if (next == nullptr) return;
    host_->execute(*next, -1, ready);
  }
}

}  // namespace depengine
