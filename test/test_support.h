// Helpers shared by every test, with no dependency on the engine (so the frontier library's and the stream backends'
// tests can use them): workload sizes scaled for sanitizers, seeds for randomized tests, a watchdog that turns a hang
// into a failure, bounded waits, and a timed rendezvous.
//
// Nothing here sleeps to wait for another thread: waits spin (yielding) on a condition with a deadline, and a deadline
// that expires is a test failure, never a reason to carry on.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

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
[[nodiscard]] inline std::chrono::seconds meet_limit() {
  return kSanitizer.empty() ? std::chrono::seconds(10) : std::chrono::seconds(60);
}

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

// Burns a little time inside an op or a racing thread, to widen the window in which a misordering would show.
// Not a wait.
inline void linger(int rounds = 64) {
  std::atomic<int> sink{0};
  // relaxed: the loop only burns time; the atomic keeps the compiler from removing it.
  for (int i = 0; i < rounds; ++i) sink.fetch_add(1, std::memory_order_relaxed);
}

// Sets an environment variable for the scope's lifetime (the engine reads its switches when an engine or executor is
// made), and unsets it after. The tests run one at a time, so no other thread reads the environment meanwhile.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~ScopedEnv() { ::unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

// An exception type of the tests' own, so a test can tell the op's exception from anything the engine raises.
struct OpFailure : std::runtime_error {
  explicit OpFailure(int failure_id) : std::runtime_error("op failure " + std::to_string(failure_id)), id(failure_id) {}
  int id;
};

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
