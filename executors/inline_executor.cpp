#include "executors/inline_executor.h"

namespace depengine {

void InlineExecutor::submit(Task& task) noexcept {
  TaskList ready;
  for (Task* next = &task; next != nullptr; next = take_ready(ready, this)) {
    host_->execute(*next, -1, ready);
  }
}

}  // namespace depengine
