// What the calling thread is running: the engine and the ready list of the executor loop that called an op's function.
//
// Set by EngineCore::execute() and issue() around an op's function and restored after (executors nest when an inline
// op pushes a ready op). It lets a Completion called from inside an op route successors into the running executor's
// ready list, exempts pushes from inside ops from back-pressure (waiting there could deadlock), and detects waits that
// would never return (WaitForVar from inside an op).
//
// Thread safety: thread-local; each thread reads and writes its own. Cost: a TLS load or store.
#pragma once

#include "executors/executor.h"

namespace depengine::detail {

class EngineCore;

struct Running {
  EngineCore* engine = nullptr;  // null: no op of any engine is running on this thread
  TaskList* ready = nullptr;     // where ops made ready from inside the running op go
};

inline thread_local Running t_running;

// Sets t_running for the scope's lifetime and restores what it was.
class RunningScope {
 public:
  RunningScope(EngineCore* engine, TaskList* ready) noexcept : saved_(t_running) { t_running = {engine, ready}; }
  ~RunningScope() { t_running = saved_; }
  RunningScope(const RunningScope&) = delete;
  RunningScope& operator=(const RunningScope&) = delete;

 private:
  Running saved_;
};

}  // namespace depengine::detail
