// What the calling thread is running: the engine and the ready list of the executor loop that called an op's function,
// and the running op's owner.
//
// Set by EngineCore::execute() and issue() around an op's function and restored after (executors nest when an inline
// op pushes a ready op). It lets a Completion called from inside an op route successors into the running executor's
// ready list, exempts pushes from inside ops from back-pressure (waiting there could deadlock), and detects waits that
// would never return (WaitForVar from inside an op). An op pushed from inside a running op has that op's owner
// (error_log.h), so the ops a user thread starts, however deep, are that thread's. It also says whether the thread is
// capturing (Engine::Capture), which an op running on it is not.
//
// Thread safety: thread-local; each thread reads and writes its own. Cost: a TLS load or store.
#pragma once

#include <atomic>
#include <cstdint>

#include <depengine/executors/executor.h>

namespace depengine::detail {

class EngineCore;
struct CaptureState;

struct Running {
  EngineCore* engine = nullptr;  // null: no op of any engine is running on this thread
  TaskList* ready = nullptr;     // where ops made ready from inside the running op go
  // The owner of the ops this thread pushes: the running op's; outside ops, the thread's own token (unique to the
  // thread for the process's lifetime), or 0 until current_owner() first gives it one.
  std::uint64_t owner = 0;
  // The engine this thread is capturing for (Engine::Capture) and what it captured so far; null when it is not, and
  // always inside an op (an op that runs on the capturing thread, made ready by the body, pushes for real).
  EngineCore* capturing = nullptr;
  CaptureState* capture = nullptr;
};

inline thread_local Running t_running;

// The owner of an op pushed now (error_log.h): the running op's owner, or the calling thread's token.
[[nodiscard]] inline std::uint64_t current_owner() noexcept {
  if (t_running.owner == 0) [[unlikely]] {
    static std::atomic<std::uint64_t> next{1};
    // relaxed: only uniqueness matters.
    t_running.owner = next.fetch_add(1, std::memory_order_relaxed);
  }
  return t_running.owner;
}

// Sets t_running for the scope's lifetime and restores what it was.
class RunningScope {
 public:
  RunningScope(EngineCore* engine, TaskList* ready, std::uint64_t owner) noexcept : saved_(t_running) {
    t_running = {engine, ready, owner};
  }
  ~RunningScope() { t_running = saved_; }
  RunningScope(const RunningScope&) = delete;
  RunningScope& operator=(const RunningScope&) = delete;

 private:
  Running saved_;
};

}  // namespace depengine::detail
