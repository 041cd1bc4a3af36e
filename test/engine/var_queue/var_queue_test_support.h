// Helpers of the var queue's tests (var_queue_test.cpp, var_queue_group_test.cpp): a queue driven by hand, as the
// engine drives it.
#pragma once

#include <vector>

#include <depengine/engine/var_queue/op_node.h>
#include <depengine/engine/var_queue/var_queue.h>

namespace depengine::test {

// Completes `use` and returns the ops it made ready, in the order the queue listed them.
inline std::vector<OpNode*> complete(const VarUse& use) {
  ReadyList ready;
  use.var->complete(use, nullptr, ready);
  std::vector<OpNode*> ops;
  while (OpNode* op = ready.pop_front()) ops.push_back(op);
  return ops;
}

// Whether the queue holds nothing, read under its lock.
inline bool idle(VarQueue& queue) {
  queue.lock();
  const bool result = queue.idle_locked();
  queue.unlock();
  return result;
}

}  // namespace depengine::test
