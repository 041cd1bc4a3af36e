#include <catch2/catch.hpp>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include <depengine/support/spinlock.h>

namespace {

using depengine::support::Spinlock;

TEST_CASE("Spinlock: try_acquire takes a free lock in one attempt and fails on a held one; is_locked tells which",
          "[support]") {
  Spinlock lock;
  CHECK_FALSE(lock.is_locked());
  REQUIRE(lock.try_acquire());
  CHECK(lock.is_locked());
  CHECK_FALSE(lock.try_acquire());
  CHECK_FALSE(lock.try_lock());
  lock.unlock();
  CHECK_FALSE(lock.is_locked());
  REQUIRE(lock.try_lock());
  CHECK_FALSE(lock.try_acquire());
  lock.unlock();
}

// Threads increment a plain counter under the lock, taking it with lock() or try_acquire() in turn: no increment is
// lost, and TSAN checks that each holder sees the previous one's writes.
TEST_CASE("Spinlock: lock() and try_acquire() exclude each other", "[support][concurrency]") {
  constexpr int kThreads = 3;
  constexpr int kIncrements = 20000;
  Spinlock lock;
  std::uint64_t counter = 0;  // plain: guarded by lock
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kIncrements; ++i) {
        if ((i + t) % 2 == 0) {
          while (!lock.try_acquire()) std::this_thread::yield();
        } else {
          lock.lock();
        }
        ++counter;
        lock.unlock();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  const std::lock_guard guard(lock);
  CHECK(counter == std::uint64_t{kThreads} * kIncrements);
}

}  // namespace
