// Helpers shared by the engine and executor tests, on top of the engine-independent ones of test/test_support.h (sizes,
// seeds, the watchdog, bounded waits): ways to hold an op (or a pool's worker) open or complete it from threads the
// engine does not own, pushes from inside an op counted, stderr capture for the shutdown report, and the tests' own
// exception type.
//
// Nothing here sleeps to wait for another thread.
#pragma once

#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <depengine/engine/engine.h>
#include <depengine/engine/fence.h>
#include <depengine/frontier/timeline.h>

#include "test/test_support.h"

namespace depengine::test {

// The message of the Error that `fn` throws, or a note saying it threw something else or nothing.
template <class Fn>
[[nodiscard]] std::string error_message(Fn&& fn) {
  try {
    fn();
  } catch (const Error& error) {
    return error.what();
  } catch (...) {
    return "(threw something other than depengine::Error)";
  }
  return "(threw nothing)";
}

// An op held open: everything queued behind it on what it uses waits, on every executor, until release(); no thread
// blocks meanwhile. On an executor that takes async ops it is pushed with PushAsync and keeps its Completion until
// release() calls it. A stream executor refuses PushAsync (executor_factories.h, takes_async), and it releases an op's
// variables when it issues the op, so the op cannot be held once its function has run: there it is pushed with Push
// behind a wait fence on a timeline of its own, which release() signals (or fails, with the error).
class HeldOp {
 public:
  HeldOp(Engine& engine, VarList reads, VarList mutates, const PushOptions& options = {})
      : state_(std::make_shared<State>()) {
    // The engine refuses PushAsync exactly for the executors that issue ahead (engine_core.cpp, make_record).
    if (!engine.executor(options.context.executor).issues_ahead()) {
      engine.PushAsync(
          [state = state_](Completion done) {
            state->done.emplace(done);
            // release: pairs with the acquire in holding(), publishing `done`.
            state->started.store(true, std::memory_order_release);
          },
          reads, mutates, options);
      return;
    }
    state_->fenced = true;
    PushOptions fenced = options;
    fenced.wait_fences = {{&state_->gate, 1}};
    // The function keeps the state (and so the timeline it waits on) alive until the op has run.
    engine.Push([state = state_] {}, reads, mutates, fenced);
  }

  // Whether the op holds what it uses and waits for release(): its function has run (async), or it has been pushed
  // (held by its fence, its function runs after release()).
  [[nodiscard]] bool holding() const { return state_->fenced || state_->started.load(std::memory_order_acquire); }

  // Completes the op (with `error`, if given) once it holds what it uses. Returns false if it never did within
  // meet_limit() (an engine bug, or a test that held an op behind a poisoned variable, which is skipped). A fenced op
  // then runs, or with an error is skipped, passing the error on to what it mutates as a failed op would.
  [[nodiscard]] bool release(std::exception_ptr error = nullptr) {
    if (!wait_until([this] { return holding(); })) return false;
    if (state_->fenced) {
      if (error != nullptr) return state_->gate.fail(std::move(error));
      state_->gate.signal(1, {});
      return true;
    }
    (*state_->done)(std::move(error));
    return true;
  }

 private:
  struct State {
    std::optional<Completion> done;  // written by the op's function before `started`
    std::atomic<bool> started{false};
    bool fenced = false;  // held by `gate` (set before the push, then immutable)
    Timeline gate;        // the fenced op waits for it to reach 1
  };
  std::shared_ptr<State> state_;
};

// Threads that run posted jobs: async ops hand their work and Completion here, so completions arrive from threads
// the engine does not own. With `batch` > 1 a thread waits until that many jobs are queued (or flush()), which lets
// async ops pile up to the in-flight bound.
class Completer {
 public:
  explicit Completer(int threads = 1, std::size_t batch = 1) : batch_(batch) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { run(); });
  }
  ~Completer() { stop(); }
  Completer(const Completer&) = delete;
  Completer& operator=(const Completer&) = delete;

  // Notifies under the lock: the posting thread may be an op's function that continues after its job has completed
  // the op, so the test may already be destroying this Completer; stop() must take mutex_ first, so it cannot begin
  // until post() has let go of cv_ and mutex_.
  void post(std::function<void()> job) {
    std::lock_guard lock(mutex_);
    jobs_.push_back(std::move(job));
    cv_.notify_one();
  }

  // From now on, run jobs as they come, whatever the batch size.
  void flush() {
    std::lock_guard lock(mutex_);  // notified under the lock, as in post()
    flushing_ = true;
    cv_.notify_all();
  }

  // Runs what is queued, then joins the threads. A job posted by a job during stop() still runs.
  void stop() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& thread : threads_) {
      if (thread.joinable()) thread.join();
    }
  }

 private:
  void run() {
    std::unique_lock lock(mutex_);
    for (;;) {
      cv_.wait(lock, [this] { return stopping_ || (!jobs_.empty() && (flushing_ || jobs_.size() >= batch_)); });
      if (jobs_.empty()) return;  // stopping, and nothing left
      std::function<void()> job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      job();
      lock.lock();
    }
  }

  const std::size_t batch_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;  // guarded by mutex_
  bool flushing_ = false;                   // guarded by mutex_
  bool stopping_ = false;                   // guarded by mutex_
  std::vector<std::thread> threads_;
};

// Redirects the process's stderr (file descriptor 2) to a temporary file until finish(), which returns what was
// written. For the engine's shutdown report, which goes to stderr.
class StderrCapture {
 public:
  StderrCapture() : file_(std::tmpfile()) {
    std::fflush(stderr);
    saved_ = ::dup(2);
    if (file_ != nullptr && saved_ >= 0) ::dup2(::fileno(file_), 2);
  }
  ~StderrCapture() { (void)finish(); }
  StderrCapture(const StderrCapture&) = delete;
  StderrCapture& operator=(const StderrCapture&) = delete;

  std::string finish() {
    std::string text;
    if (saved_ < 0 || file_ == nullptr) return text;
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
    saved_ = -1;
    std::rewind(file_);
    char buffer[512];
    for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, file_)) > 0;) text.append(buffer, n);
    std::fclose(file_);
    file_ = nullptr;
    return text;
  }

 private:
  std::FILE* file_;
  int saved_ = -1;
};

// Collects what an engine's error sink (EngineOptions::error_sink) receives. Must outlive the engine it is attached to.
class SinkLog {
 public:
  struct Received {
    int id;  // the OpFailure's id; -1 for another exception type
    std::string op;
    std::string what;
    UnreportedError::When when;
  };

  // `options` with the sink set to this log.
  [[nodiscard]] EngineOptions attach(EngineOptions options) {
    options.error_sink = [this](const UnreportedError& error) {
      const int id = thrown_id([&] { std::rethrow_exception(error.error); });
      std::lock_guard lock(mutex_);
      received_.push_back(Received{id, std::string(error.op), std::string(error.what), error.when});
    };
    return options;
  }

  [[nodiscard]] std::vector<Received> received() const {
    std::lock_guard lock(mutex_);
    return received_;
  }
  // The ids received, in order.
  [[nodiscard]] std::vector<int> ids() const {
    std::vector<int> out;
    for (const Received& error : received()) out.push_back(error.id);
    return out;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<Received> received_;  // guarded by mutex_
};

// Holds a pool's worker in an op until the test opens it (bounded by meet_limit(): a broken engine fails, never hangs).
struct HeldWorker {
  std::atomic<bool> inside{false};
  std::atomic<bool> open{false};
  std::atomic<bool> timed_out{false};
  // The op's function.
  void hold() {
    // release/acquire: the test thread sees the worker inside before it pushes what must wait for it.
    inside.store(true, std::memory_order_release);
    if (!wait_until([&] { return open.load(std::memory_order_acquire); })) {
      timed_out.store(true, std::memory_order_relaxed);  // relaxed: read after the engine's wait
    }
  }
  // Pushes the holding op, mutating `held`, and returns once a worker runs it.
  void start(Engine& engine, const Var& held, const PushOptions& options = {}) {
    engine.Push([this] { hold(); }, {}, {held}, options);
    REQUIRE(wait_until([this] { return inside.load(std::memory_order_acquire); }));
  }
};

// Pushes an op that pushes `children` ops from inside itself, each on a variable of its own, calling after_child(the
// parent's variable) after each; waits until the parent has returned (so the children are left to its thread), then
// for all. Returns how many children ran nested, on the parent's thread while it ran.
inline int nested_children(Engine& engine, int children, const std::function<void(const Var&)>& after_child = {}) {
  std::atomic<int> nested{0};
  std::atomic<int> ran{0};
  std::atomic<bool> parent_done{false};
  thread_local bool in_parent = false;
  const Var parent_var = engine.NewVariable();
  engine.Push(
      [&] {
        in_parent = true;
        for (int i = 0; i < children; ++i) {
          engine.Push(
              [&] {
                if (in_parent) nested.fetch_add(1, std::memory_order_relaxed);
                ran.fetch_add(1, std::memory_order_relaxed);
              },
              {}, {engine.NewVariable()});
          if (after_child) after_child(parent_var);
        }
        in_parent = false;
        parent_done.store(true, std::memory_order_release);
      },
      {}, {parent_var});
  REQUIRE(wait_until([&] { return parent_done.load(std::memory_order_acquire); }));
  engine.WaitForAll();
  // relaxed: WaitForAll ordered the children's increments before these loads.
  CHECK(ran.load(std::memory_order_relaxed) == children);
  return nested.load(std::memory_order_relaxed);
}

}  // namespace depengine::test
