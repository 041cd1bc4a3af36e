// MemoryPool (memory/memory_pool.h): the order in which acquire reuses blocks (dominated, complete,
// try-before-you-fence with exactly the waits it adds, fresh), taint, size classes and alignment, the limit (refusal,
// trimming, the too-large error, forward progress of jobs that fit only one at a time), misuse, a device source over
// the host stream backend, and concurrent acquire/release checked for double hand-outs.
//
// Frontiers here name two or three queue axes whose completion a Tracker records, as the stream executor's would.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include <depengine/executors/host_stream/host_stream_backend.h>
#include <depengine/memory/memory_pool.h>

#include "test/test_support.h"

namespace depengine {
namespace {

// Atomics: counts of what the threads found are read by the test thread after it has joined them, which orders them,
// so those reads are relaxed.

using test::sized;
using test::test_seeds;
using test::Watchdog;

const Axis kA = Axis::make(0, 0, AxisDomain::kQueue, 1);
const Axis kB = Axis::make(0, 0, AxisDomain::kQueue, 2);
const Axis kC = Axis::make(0, 0, AxisDomain::kQueue, 3);

struct Fixture {
  Tracker tracker;
  Fixture() {
    for (const Axis axis : {kA, kB, kC}) tracker.register_axis(axis);
  }
};

// A wait callback that records what it was asked to wait for.
struct WaitLog {
  std::vector<DeathFrontier> calls;
  static void record(void* self, const DeathFrontier& entries) {
    static_cast<WaitLog*>(self)->calls.push_back(entries);
  }
  [[nodiscard]] AcquireView view(const StreamKnowledge* knowledge, const Tracker* tracker) {
    return AcquireView{knowledge, tracker, &WaitLog::record, this};
  }
};

std::unique_ptr<MemoryPool> host_pool(MemoryPoolOptions options = {}) {
  return std::make_unique<MemoryPool>(std::make_unique<HostBlockSource>(), std::move(options));
}

TEST_CASE("MemoryPool: a death frontier recorded at issue lets a stream that dominates it reuse the block at once",
          "[memory]") {
  Fixture f;
  auto pool = host_pool();
  WaitLog waits;
  const PoolBlock first = pool->acquire(1000, 8, {}).value();
  CHECK(first.bytes == 1024);
  CHECK(pool->stats().fresh_allocations == 1);
  // Its last user was issued as epoch 5 of stream A (not complete: the tracker is at 0). The next op on A knows A:5
  // (FIFO), as does a stream that has waited for it.
  pool->release(first, DeathFrontier{{kA, 5}});
  const StreamKnowledge on_a{{kA, 5}};
  const PoolBlock again = pool->acquire(1000, 8, waits.view(&on_a, &f.tracker)).value();
  CHECK(again.data == first.data);
  const MemoryPoolStats stats = pool->stats();
  CHECK(stats.reuse_dominated == 1);
  CHECK(stats.waits_added == 0);
  CHECK(stats.fresh_allocations == 1);
  CHECK(waits.calls.empty());
  pool->release(again, {});
}

TEST_CASE("MemoryPool: a stale block is passed over for a fresh one, and reused once the tracker shows it complete",
          "[memory]") {
  Fixture f;
  auto pool = host_pool();
  const PoolBlock block = pool->acquire(300, 8, {}).value();
  pool->release(block, DeathFrontier{{kA, 5}});
  f.tracker.advance(kA, 4);
  // A host acquirer knows nothing and cannot wait on a device: the block's user may still run.
  const AcquireView host{nullptr, &f.tracker};
  const PoolBlock fresh = pool->acquire(300, 8, host).value();
  CHECK(fresh.data != block.data);
  CHECK(pool->stats().fresh_allocations == 2);
  f.tracker.advance(kA, 5);
  const PoolBlock reused = pool->acquire(300, 8, host).value();
  CHECK(reused.data == block.data);
  CHECK(pool->stats().reuse_complete == 1);
  pool->release(fresh, {});
  pool->release(reused, {});
}

TEST_CASE("MemoryPool: try before you fence adds exactly the waits the acquirer does not already imply", "[memory]") {
  Fixture f;
  auto pool = host_pool({.max_fence_waits = 1});
  WaitLog waits;
  const PoolBlock block = pool->acquire(256, 8, {}).value();
  // Users on A (epoch 5), B (7) and C (2). The acquirer knows A:6; C:2 has completed; B:7 is all it must wait for.
  pool->release(block, DeathFrontier{{kA, 5}, {kB, 7}, {kC, 2}});
  f.tracker.advance(kC, 2);
  const StreamKnowledge knows{{kA, 6}};
  const PoolBlock reused = pool->acquire(256, 8, waits.view(&knows, &f.tracker)).value();
  CHECK(reused.data == block.data);
  REQUIRE(waits.calls.size() == 1);
  CHECK(waits.calls[0] == DeathFrontier{{kB, 7}});
  CHECK(pool->stats().reuse_with_waits == 1);
  CHECK(pool->stats().waits_added == 1);

  // Two waits are more than max_fence_waits (1): a fresh block instead, and no wait.
  pool->release(reused, DeathFrontier{{kA, 9}, {kB, 9}});
  waits.calls.clear();
  const PoolBlock fresh = pool->acquire(256, 8, waits.view(&knows, &f.tracker)).value();
  CHECK(fresh.data != block.data);
  CHECK(waits.calls.empty());
  pool->release(fresh, {});
}

TEST_CASE("MemoryPool: a block freed on stream A and acquired on stream B costs one wait, or none if B knows A",
          "[memory]") {
  Fixture f;
  auto pool = host_pool();
  WaitLog waits;
  const PoolBlock block = pool->acquire(4096, 64, {}).value();
  pool->release(block, DeathFrontier{{kA, 3}});
  const StreamKnowledge b_alone{{kB, 10}};
  const PoolBlock on_b = pool->acquire(4096, 64, waits.view(&b_alone, &f.tracker)).value();
  CHECK(on_b.data == block.data);
  REQUIRE(waits.calls.size() == 1);
  CHECK(waits.calls[0] == DeathFrontier{{kA, 3}});

  pool->release(on_b, DeathFrontier{{kA, 3}, {kB, 11}});
  waits.calls.clear();
  const StreamKnowledge b_knows_a{{kA, 3}, {kB, 11}};
  const PoolBlock again = pool->acquire(4096, 64, waits.view(&b_knows_a, &f.tracker)).value();
  CHECK(again.data == block.data);
  CHECK(waits.calls.empty());
  CHECK(pool->stats().waits_added == 1);
  CHECK(pool->stats().reuse_dominated == 1);
  pool->release(again, {});
}

TEST_CASE("MemoryPool: a tainted block is never handed out until the owner reclaims it", "[memory]") {
  Fixture f;
  auto pool = host_pool();
  WaitLog waits;
  const PoolBlock block = pool->acquire(512, 8, {}).value();
  DeathFrontier lost{{kA, 1}};
  lost.mark_tainted();  // its users did not fit: some are not named
  pool->release(block, lost);
  CHECK(pool->stats().tainted_blocks == 1);
  f.tracker.advance(kA, 100);
  const StreamKnowledge knows_all{{kA, 100}, {kB, 100}, {kC, 100}};
  const PoolBlock other = pool->acquire(512, 8, waits.view(&knows_all, &f.tracker)).value();
  CHECK(other.data != block.data);  // not dominated, not complete, no waits can cover it
  CHECK(waits.calls.empty());
  pool->reclaim_tainted();
  CHECK(pool->stats().tainted_blocks == 0);
  const PoolBlock reclaimed = pool->acquire(512, 8, {}).value();
  CHECK(reclaimed.data == block.data);
  pool->release(other, {});
  pool->release(reclaimed, {});
}

TEST_CASE("MemoryPool: size classes, alignment, and misuse", "[memory]") {
  auto pool = host_pool();
  const PoolBlock tiny = pool->acquire(1, 1, {}).value();
  CHECK(tiny.bytes == 256);
  const PoolBlock aligned = pool->acquire(100, 4096, {}).value();
  CHECK(aligned.bytes == 4096);
  CHECK(reinterpret_cast<std::uintptr_t>(aligned.data) % 4096 == 0);
  const PoolBlock odd = pool->acquire(5000, 16, {}).value();
  CHECK(odd.bytes == 8192);
  CHECK(reinterpret_cast<std::uintptr_t>(odd.data) % 8192 == 0);
  std::memset(odd.data, 0xab, odd.bytes);  // the whole block is usable (ASAN checks)
  CHECK_THROWS_AS((void)pool->acquire(0, 8, {}), std::invalid_argument);
  CHECK_THROWS_WITH((void)pool->acquire(64, 3, {}), Catch::Contains("alignment 3"));
  CHECK_THROWS_AS(pool->release(PoolBlock{nullptr, 256}, {}), std::invalid_argument);
  CHECK_THROWS_AS(pool->release(PoolBlock{tiny.data, 300}, {}), std::invalid_argument);
  CHECK_THROWS_WITH(pool->release(PoolBlock{tiny.data, 1 << 20}, {}), Catch::Contains("more bytes"));
  const MemoryPoolStats stats = pool->stats();
  CHECK(stats.bytes_in_use == 256 + 4096 + 8192);
  CHECK(stats.peak_bytes_in_use == stats.bytes_in_use);
  for (const PoolBlock& b : {tiny, aligned, odd}) pool->release(b, {});
  CHECK(pool->stats().bytes_in_use == 0);
  CHECK(pool->stats().bytes_held == 256 + 4096 + 8192);
}

TEST_CASE(
    "MemoryPool: a bounded pool refuses what does not fit, trims complete blocks to make room, and rejects "
    "requests larger than its limit",
    "[memory]") {
  Fixture f;
  auto pool = host_pool({.name = "small", .limit = 2048});
  const AcquireView host{nullptr, &f.tracker};
  CHECK_THROWS_WITH((void)pool->acquire(4096, 8, host),
                    Catch::Contains("memory pool 'small'") && Catch::Contains("larger than the pool's limit"));
  const PoolBlock a = pool->acquire(1024, 8, host).value();
  const PoolBlock b = pool->acquire(1024, 8, host).value();
  CHECK_FALSE(pool->acquire(1024, 8, host).has_value());  // 2048 held: no room
  CHECK(pool->stats().refused == 1);
  pool->release(a, DeathFrontier{{kA, 1}});  // its user has not completed
  CHECK_FALSE(pool->acquire(1024, 8, host).has_value());
  f.tracker.advance(kA, 1);
  const PoolBlock c = pool->acquire(1024, 8, host).value();  // now complete: reused
  CHECK(c.data == a.data);

  // Room for a 2048-byte block only by trimming both 1024-byte blocks once they are free and complete.
  pool->release(b, {});
  pool->release(c, DeathFrontier{{kB, 4}});
  CHECK_FALSE(pool->acquire(2048, 8, host).has_value());  // c's user still runs: nothing is trimmed
  CHECK(pool->stats().trimmed == 0);
  f.tracker.advance(kB, 4);
  const PoolBlock big = pool->acquire(2048, 8, host).value();
  CHECK(big.bytes == 2048);
  CHECK(pool->stats().trimmed == 2);
  CHECK(pool->stats().bytes_held == 2048);
  CHECK(pool->stats().peak_bytes_held == 2048);
  pool->release(big, {});
}

TEST_CASE("MemoryPool: two jobs that fit only one at a time run one after the other", "[memory]") {
  // The seed's example scaled down: jobs of 400 KiB in a 512 KiB pool. The second is refused until the first is done
  // with its block, then reuses it; neither fails.
  Fixture f;
  auto pool = host_pool({.limit = 512 * 1024});
  const AcquireView host{nullptr, &f.tracker};
  const PoolBlock first = pool->acquire(400 * 1024, 64, host).value();
  CHECK_FALSE(pool->acquire(400 * 1024, 64, host).has_value());
  pool->release(first, DeathFrontier{{kA, 1}});
  f.tracker.advance(kA, 1);
  const PoolBlock second = pool->acquire(400 * 1024, 64, host).value();
  CHECK(second.data == first.data);
  CHECK(pool->stats().peak_bytes_held == 512 * 1024);
  pool->release(second, {});
}

// Records what a reservation was granted.
struct Reservation : ReserveWaiter {
  Reservation() noexcept : ReserveWaiter(&granted) {}
  static void granted(ReserveWaiter& self, const PoolBlock& block, const DeathFrontier& death,
                      std::exception_ptr error) noexcept {
    auto& r = static_cast<Reservation&>(self);
    r.block = block;
    r.death = death;
    r.error = std::move(error);
    ++r.calls;
  }
  PoolBlock block;
  DeathFrontier death;
  std::exception_ptr error;
  int calls = 0;
};

TEST_CASE(
    "MemoryPool: reservations are granted at once, or queued and served first-fit by releases and by "
    "completions",
    "[memory]") {
  Fixture f;
  MemoryPool pool(std::make_unique<HostBlockSource>(), {.limit = 2048, .tracker = &f.tracker});
  Reservation a, b, big, small;
  pool.reserve(1024, 8, a);
  pool.reserve(1024, 8, b);
  REQUIRE(a.calls == 1);
  REQUIRE(b.calls == 1);
  CHECK(pool.stats().fresh_allocations == 2);
  CHECK_THROWS_AS(pool.reserve(4096, 8, big), std::length_error);  // larger than the limit: nothing queued
  pool.reserve(2048, 8, big);                                      // no room: queued
  pool.reserve(1024, 8, small);                                    // no room either: queued behind it
  CHECK(big.calls == 0);
  CHECK(small.calls == 0);
  CHECK(pool.stats().reservations_queued == 2);

  // A release serves the queue first-fit: the 1024-byte request takes the freed block, whose users still run (its
  // holder waits for the death frontier handed with it), and passes the 2048-byte one, which does not fit.
  pool.release(a.block, DeathFrontier{{kA, 3}});
  REQUIRE(small.calls == 1);
  CHECK(small.block.data == a.block.data);
  CHECK(small.death == DeathFrontier{{kA, 3}});
  CHECK(big.calls == 0);
  CHECK(pool.stats().reuse_reserved == 1);

  // Room for 2048 bytes needs both 1024-byte blocks trimmed: one is free and complete, the other's users still run,
  // so the queue waits on the tracker for them and is served on the thread that completes them.
  pool.release(small.block, {});
  pool.release(b.block, DeathFrontier{{kB, 2}});
  CHECK(big.calls == 0);
  f.tracker.advance(kB, 2);
  REQUIRE(big.calls == 1);
  CHECK(big.error == nullptr);
  CHECK(big.block.bytes == 2048);
  CHECK(big.death.empty());
  const MemoryPoolStats stats = pool.stats();
  CHECK(stats.trimmed == 2);
  CHECK(stats.bytes_held == 2048);
  CHECK(stats.peak_bytes_held == 2048);
  pool.release(big.block, {});
}

// A reservation is granted before its holder's stream is known (the newest free block, whatever its users); settle()
// then trades it for a free block of its class that the stream already follows, so a bounded pool reuses with no
// synchronisation as acquire() does. Before settle(), every bounded allocation waited for its reserved block's users.
TEST_CASE("MemoryPool: settle trades a reserved block for a free one the holder's stream follows", "[memory]") {
  Fixture f;
  MemoryPool pool(std::make_unique<HostBlockSource>(), {.limit = 4096, .tracker = &f.tracker});
  Reservation first, second, held;
  pool.reserve(1024, 8, first);
  pool.reserve(1024, 8, second);
  REQUIRE(first.calls == 1);
  REQUIRE(second.calls == 1);
  pool.release(first.block, DeathFrontier{{kA, 3}});   // last used on stream A
  pool.release(second.block, DeathFrontier{{kB, 5}});  // on stream B: the newest, so the one reserved next
  pool.reserve(1024, 8, held);
  REQUIRE(held.calls == 1);
  REQUIRE(held.block.data == second.block.data);
  CHECK(held.death == DeathFrontier{{kB, 5}});

  // The holder's op is issued on stream A, which knows A's epoch 3 and nothing of B: it takes the block A freed.
  const StreamKnowledge on_a{{kA, 3}};
  DeathFrontier death = held.death;
  const PoolBlock settled = pool.settle(held.block, death, AcquireView{&on_a, &f.tracker});
  CHECK(settled.data == first.block.data);
  CHECK(settled.bytes == 1024);
  CHECK(death.empty());  // nothing left to wait for
  MemoryPoolStats stats = pool.stats();
  CHECK(stats.settled_swapped == 1);
  CHECK(stats.settled_dominated == 1);
  CHECK(stats.bytes_in_use == 1024);

  // The reserved block went back with its own death frontier: a stream that knows B reuses it with no wait.
  const StreamKnowledge on_b{{kB, 5}};
  WaitLog waits;
  const PoolBlock other = pool.acquire(1024, 8, waits.view(&on_b, &f.tracker)).value();
  CHECK(other.data == second.block.data);
  CHECK(waits.calls.empty());

  // A holder whose stream follows neither, with no free block left to trade for, keeps its block and its wait; one
  // whose reserved block is followed keeps it and has nothing to wait for.
  pool.release(other, DeathFrontier{{kB, 6}});
  Reservation last;
  pool.reserve(1024, 8, last);
  REQUIRE(last.calls == 1);
  const StreamKnowledge on_c{{kC, 1}};
  DeathFrontier kept_death = last.death;
  CHECK(pool.settle(last.block, kept_death, AcquireView{&on_c, &f.tracker}).data == last.block.data);
  CHECK(kept_death == DeathFrontier{{kB, 6}});
  DeathFrontier followed = DeathFrontier{{kB, 6}};
  const StreamKnowledge knows_b6{{kB, 6}};
  CHECK(pool.settle(last.block, followed, AcquireView{&knows_b6, &f.tracker}).data == last.block.data);
  stats = pool.stats();
  CHECK(stats.settled_swapped == 1);
  CHECK(stats.settled_dominated == 2);
  pool.release(settled, {});
  pool.release(last.block, {});
}

TEST_CASE("MemoryPool: a wait callback that throws gives the block back", "[memory]") {
  Fixture f;
  auto pool = host_pool();
  const PoolBlock block = pool->acquire(256, 8, {}).value();
  pool->release(block, DeathFrontier{{kA, 2}});
  const AcquireView failing{nullptr, &f.tracker,
                            [](void*, const DeathFrontier&) { throw std::runtime_error("device wait failed"); },
                            nullptr};
  CHECK_THROWS_WITH((void)pool->acquire(256, 8, failing), "device wait failed");
  CHECK(pool->stats().bytes_in_use == 0);
  f.tracker.advance(kA, 2);
  CHECK(pool->acquire(256, 8, AcquireView{nullptr, &f.tracker})->data == block.data);  // still there, still reusable
  pool->release(block, {});
}

TEST_CASE("MemoryPool: a device source over the host stream backend", "[memory]") {
  HostStreamBackend backend(HostStreamOptions{.devices = 2});
  MemoryPool pool(std::make_unique<DeviceBlockSource>(backend, 1), {.name = "device 1"});
  const PoolBlock block = pool.acquire(10000, 256, {}).value();
  CHECK(block.bytes == 16384);
  CHECK(reinterpret_cast<std::uintptr_t>(block.data) % 256 == 0);
  CHECK_THROWS_AS((void)pool.acquire(64, 512, {}), std::invalid_argument);  // above the backend's 256
  pool.release(block, {});
}

TEST_CASE("MemoryPool: concurrent acquire and release never hand one block to two users", "[memory][random]") {
  // Each thread is a "stream": it stamps every block it holds with its id, checks the stamp before releasing it with a
  // death frontier of its own axis, and advances its axis on the tracker now and then (its work completing). A block
  // handed to two holders at once shows up as an overwritten stamp.
  constexpr int kThreads = 4;
  const int rounds = static_cast<int>(sized(20000, 2000, 4000));
  for (const std::uint64_t seed : test_seeds()) {
    CAPTURE(seed);
    Watchdog watchdog("concurrent pool");
    Tracker tracker;
    std::vector<Axis> axes;
    for (int t = 0; t < kThreads; ++t)
      axes.push_back(tracker.register_axis(Axis::make(0, 0, AxisDomain::kQueue, 100 + t)).axis());
    auto pool = host_pool({.limit = 64 * 1024});
    std::atomic<int> overwritten{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        std::mt19937_64 rng(seed + static_cast<std::uint64_t>(t));
        std::uint64_t epoch = 0;
        StreamKnowledge knows;
        std::vector<PoolBlock> held;
        for (int r = 0; r < rounds; ++r) {
          if (held.size() < 4 && rng() % 2 == 0) {
            const AcquireView view{&knows, &tracker};
            if (std::optional<PoolBlock> block = pool->acquire(256 << (rng() % 4), 8, view)) {
              std::memset(block->data, t + 1, block->bytes);
              held.push_back(*block);
            }
          } else if (!held.empty()) {
            const PoolBlock block = held.back();
            held.pop_back();
            const auto* bytes = static_cast<const unsigned char*>(block.data);
            if (std::any_of(bytes, bytes + block.bytes, [t](unsigned char b) { return b != t + 1; })) {
              overwritten.fetch_add(1, std::memory_order_relaxed);
            }
            knows.insert_or_raise(axes[t], ++epoch);
            pool->release(block, DeathFrontier{{axes[t], epoch}});
          }
          if (rng() % 8 == 0) tracker.advance(axes[t], epoch);  // this stream's work so far has completed
        }
        for (const PoolBlock& block : held) pool->release(block, {});
        tracker.advance(axes[t], epoch);
      });
    }
    for (auto& thread : threads) thread.join();
    CHECK(overwritten.load(std::memory_order_relaxed) == 0);
    const MemoryPoolStats stats = pool->stats();
    CHECK(stats.bytes_in_use == 0);
    CHECK(stats.peak_bytes_held <= 64 * 1024);
    CHECK(stats.reuse_dominated + stats.reuse_complete > 0);
  }
}

}  // namespace
}  // namespace depengine
