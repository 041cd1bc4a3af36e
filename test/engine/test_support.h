// Helpers shared by the engine and executor tests: sizes scaled for sanitizers, seeds for randomized tests, a
// watchdog that turns a hang into a failure, bounded waits, and ways to hold an op open or complete it elsewhere.
//
// Nothing here sleeps to wait for another thread: waits spin (yielding) on a condition with a deadline, and a
// deadline that expires is a test failure, never a reason to carry on.
#pragma once

#include <unistd.h>

#include <atomic>
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
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "engine/engine.h"

#ifndef DEPENGINE_SANITIZER
#define DEPENGINE_SANITIZER ""
#endif

namespace depengine::test {

// "thread", "address" or "" (set by depengine_test() in cmake/depengine.cmake).
inline constexpr std::string_view kSanitizer = DEPENGINE_SANITIZER;

// A workload size: `release` normally, smaller under a sanitizer so that the whole suite stays within its budget
// (DESIGN: about 20 s in release, 60 s under TSAN on 2 cores).
[[nodiscard]] constexpr std::size_t sized(std::size_t release, std::size_t under_tsan, std::size_t under_asan) {
  if (kSanitizer == "thread") return under_tsan;
  if (kSanitizer == "address") return under_asan;
  return release;
}

// How long anything may take before the test calls it a hang. Generous: a sanitizer on 2 loaded cores is slow.
[[nodiscard]] inline std::chrono::seconds hang_limit() {
  return kSanitizer.empty() ? std::chrono::seconds(30) : std::chrono::seconds(120);
}

// How long a thread waits for another to reach a point (a rendezvous, a flag) before the test fails.
[[nodiscard]] inline std::chrono::seconds meet_limit() { return std::chrono::seconds(10); }

// The seeds a randomized test runs with: DEPENGINE_TEST_SEED (one fixed seed, to rerun a failure) or else
// DEPENGINE_TEST_REPEAT fresh ones (default 3). Tests CAPTURE the seed, so a failure prints it.
[[nodiscard]] inline std::vector<std::uint64_t> test_seeds() {
  if (const char* fixed = std::getenv("DEPENGINE_TEST_SEED"); fixed != nullptr && *fixed != '\0') {
    return {std::strtoull(fixed, nullptr, 0)};
  }
  std::size_t repeat = 3;
  if (const char* count = std::getenv("DEPENGINE_TEST_REPEAT"); count != nullptr && *count != '\0') {
    repeat = std::strtoull(count, nullptr, 10);
  }
  std::random_device device;
  std::vector<std::uint64_t> seeds;
  for (std::size_t i = 0; i < repeat; ++i) seeds.push_back((std::uint64_t{device()} << 32) | device());
  return seeds;
}

// A 64-bit mix (splitmix64's finaliser over a combination): any change of either input or of the order in which
// values are folded changes the result, so a misordered op changes every value computed after it.
[[nodiscard]] constexpr std::uint64_t mix(std::uint64_t a, std::uint64_t b) noexcept {
  std::uint64_t z = a * 0x9e3779b97f4a7c15ULL + b + 0x632be59bd9b4e019ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Spins (yielding) until pred() holds or `limit` passes; returns whether pred() held.
template <class Pred>
[[nodiscard]] bool wait_until(Pred&& pred, std::chrono::nanoseconds limit = meet_limit()) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

// Fails the process if the scope it guards has not ended within `limit`: a deadlock becomes a failed test with a
// message rather than a CI job that hangs. Construct it first thing in a test case (Catch2 assertions stay on the
// test's thread; the watchdog only watches). note() adds context (a seed) to the message.
class Watchdog {
 public:
  explicit Watchdog(std::string what, std::chrono::seconds limit = hang_limit())
      : what_(std::move(what)), thread_([this, limit] { watch(limit); }) {}
  ~Watchdog() {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void note(std::string context) {
    std::lock_guard lock(mutex_);
    context_ = std::move(context);
  }

 private:
  void watch(std::chrono::seconds limit) {
    std::unique_lock lock(mutex_);
    if (cv_.wait_for(lock, limit, [this] { return done_; })) return;
    std::fprintf(stderr, "\nFAILED (hang): '%s' did not finish within %lld s; a deadlock or a lost wake-up. %s\n",
                 what_.c_str(), static_cast<long long>(limit.count()), context_.c_str());
    std::fflush(stderr);
    std::abort();
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;    // guarded by mutex_
  std::string what_;     // immutable
  std::string context_;  // guarded by mutex_
  std::thread thread_;   // last: starts once the fields above exist
};

// `parties` threads meet: each arrive_and_wait() returns true once all have arrived, or false after meet_limit().
// Used to observe that ops run at the same time (a std::latch has no timed wait, and an untimed one would hang a
// test whose ops wrongly run one after the other).
class Rendezvous {
 public:
  explicit Rendezvous(int parties) : parties_(parties) {}

  [[nodiscard]] bool arrive_and_wait() {
    // acq_rel/acquire: everything each party did before arriving is visible to all once they have met.
    arrived_.fetch_add(1, std::memory_order_acq_rel);
    return wait_until([this] { return arrived_.load(std::memory_order_acquire) >= parties_; });
  }

 private:
  const int parties_;
  std::atomic<int> arrived_{0};
};

// An asynchronous op held open: pushed with PushAsync, it keeps its Completion until release() calls it. Everything
// queued behind it waits, on every executor, and no thread blocks meanwhile.
class HeldOp {
 public:
  HeldOp(Engine& engine, VarList reads, VarList mutates, const PushOptions& options = {})
      : state_(std::make_shared<State>()) {
    engine.PushAsync(
        [state = state_](Completion done) {
          state->done.emplace(done);
          // release: pairs with the acquire in started(), publishing `done`.
          state->started.store(true, std::memory_order_release);
        },
        reads, mutates, options);
  }

  // Whether the op's function has run (so the op holds what it uses and waits for release()).
  [[nodiscard]] bool started() const { return state_->started.load(std::memory_order_acquire); }

  // Completes the op (with `error`, if given) once its function has run. Returns false if it never ran within
  // meet_limit() (an engine bug, or a test that held an op behind a poisoned variable, which is skipped).
  [[nodiscard]] bool release(std::exception_ptr error = nullptr) {
    if (!wait_until([this] { return started(); })) return false;
    (*state_->done)(std::move(error));
    return true;
  }

 private:
  struct State {
    std::optional<Completion> done;  // written by the op's function before `started`
    std::atomic<bool> started{false};
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

  void post(std::function<void()> job) {
    {
      std::lock_guard lock(mutex_);
      jobs_.push_back(std::move(job));
    }
    cv_.notify_one();
  }

  // From now on, run jobs as they come, whatever the batch size.
  void flush() {
    {
      std::lock_guard lock(mutex_);
      flushing_ = true;
    }
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

// An exception type of the tests' own, so a test can tell the op's exception from anything the engine raises.
struct OpFailure : std::runtime_error {
  explicit OpFailure(int failure_id) : std::runtime_error("op failure " + std::to_string(failure_id)), id(failure_id) {}
  int id;
};

// Burns a little time inside an op, to widen the window in which a misordered op would overlap it. Not a wait.
inline void linger(int rounds = 64) {
  std::atomic<int> sink{0};
  // relaxed: the loop only burns time; the atomic keeps the compiler from removing it.
  for (int i = 0; i < rounds; ++i) sink.fetch_add(1, std::memory_order_relaxed);
}

// The id of the OpFailure that `fn` throws, -1 if it throws something else, 0 if it returns.
template <class Fn>
[[nodiscard]] int thrown_id(Fn&& fn) {
  try {
    fn();
  } catch (const OpFailure& failure) {
    return failure.id;
  } catch (...) {
    return -1;
  }
  return 0;
}

}  // namespace depengine::test
