// The inline executor: runs each op on the thread that makes it ready, at once (MXNet's NaiveEngine).
//
// A push whose op is ready runs the op before Push() returns; an op held back by a dependency runs on the thread
// that completes that dependency. Nothing is concurrent unless the user pushes from several threads or completes
// asynchronous ops elsewhere, so this is the debugging mode: stack traces show the pusher, and a failing op fails
// where it was pushed.
//
// Ops made ready by a completion run in a loop, not by recursion, so a chain of a million ops needs no deep stack.
// Thread safety: submit() from any thread. Cost: no queue, no allocation.
#pragma once

#include <depengine/executors/executor.h>

namespace depengine {

// Runs each op on the thread that makes it ready (see the file comment).
class InlineExecutor final : public Executor {
 public:
  [[nodiscard]] std::string_view name() const noexcept override { return "inline"; }
  void start(ExecutorHost& host) override { host_ = &host; }
  void submit(Task& task) noexcept override;
  [[nodiscard]] bool try_help() noexcept override { return false; }  // nothing is ever queued
  void stop() noexcept override {}

 private:
  void run_ready(TaskList& ready) noexcept;

  ExecutorHost* host_ = nullptr;  // not owned: the engine, set once by start()
};

}  // namespace depengine
