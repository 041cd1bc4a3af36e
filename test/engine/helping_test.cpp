// Helping pushes (EngineOptions::help_above): a push or replay from a thread outside every engine's ops that finds
// more than help_above ops in flight runs queued ops on its own thread first.
//
// What is checked, and why each check would catch a broken implementation:
// - With the only worker held, ops ready at their push queue for it, and the pushes that follow (of ops that wait
//   behind the held one, or of more ready ones) run those queued ops on the pushing thread, before the worker is free:
//   at most help_above of them are left queued. With helping off (the default), none runs there. A helping push that
//   never looked, or looked at a stale count, would leave them all queued.
// - A replay helps as a push does.
// - A push from inside an op never helps, of this engine or another: it would run an op nested in the pushing one.
// - An engine with a stream executor ignores the option: its pushing thread sets the devices' pace.
// - help_above of max_in_flight or more is refused with an error naming it.
// The engine's contract with helping on is checked by the randomized oracles, which also run on helping pools
// (executor_factories.h, helping_factory(): randsum_test.cpp, errors_random_test.cpp, accumulate_random_test.cpp).
#include <atomic>
#include <catch2/catch.hpp>
#include <cstddef>
#include <thread>

#include <depengine/engine/engine.h>

#include "test/engine/test_support.h"
#include "test/executors/executor_factories.h"
#include "test/test_support.h"

namespace depengine::test {
namespace {

// Atomics: counters bumped by ops are read by the test thread after WaitForAll, which orders every op's writes before
// the read, or while the only worker is held, when only the test thread runs ops; so they are relaxed.

constexpr std::size_t kHelpAbove = 16;

EngineOptions helping_options(std::size_t help_above) {
  EngineOptions options = threadpool_factory(1).options();
  options.help_above = help_above;
  return options;
}

// Counts the ops that ran on the thread that made it, and elsewhere.
struct Sites {
  const std::thread::id pusher = std::this_thread::get_id();
  std::atomic<int> here{0};
  std::atomic<int> elsewhere{0};
  void record() { (std::this_thread::get_id() == pusher ? here : elsewhere).fetch_add(1, std::memory_order_relaxed); }
  [[nodiscard]] int ran() const {
    return here.load(std::memory_order_relaxed) + elsewhere.load(std::memory_order_relaxed);
  }
};

// With the engine's first executor (a pool of 1 worker) held, pushes `pairs` times an op ready at its push (a variable
// of its own), recorded in `sites`, then, if `waiting`, an op that waits behind the holder (it reads `held`). Returns
// how many of the ready ops ran before the holder was opened.
int push_pairs(Engine& engine, Sites& sites, int pairs, bool waiting, const PushOptions& options = {}) {
  HeldWorker holder;
  const Var held = engine.NewVariable();
  holder.start(engine, held, options);
  for (int i = 0; i < pairs; ++i) {
    engine.Push([&sites] { sites.record(); }, {}, {engine.NewVariable()}, options);
    if (waiting) engine.Push([] {}, {held}, {}, options);
  }
  const int before_open = sites.ran();
  holder.open.store(true, std::memory_order_release);  // before the wait, which would otherwise help with the holder
  engine.WaitForAll();
  CHECK_FALSE(holder.timed_out.load(std::memory_order_relaxed));
  CHECK(sites.ran() == pairs);
  return before_open;
}

}  // namespace

TEST_CASE("helping: pushes far ahead of a held worker run its queued ops on the pushing thread", "[engine][helping]") {
  Watchdog watchdog("helping pushes");
  constexpr int kPairs = 200;
  SECTION("help_above 16") {
    Engine engine(helping_options(kHelpAbove));
    Sites sites;
    const int before_open = push_pairs(engine, sites, kPairs, true);
    // Each push of a waiting op past the bound runs what is queued: at most help_above ready ops are left for the
    // worker, and all that ran before it was free ran here.
    CHECK(before_open >= kPairs - static_cast<int>(kHelpAbove));
    CHECK(sites.here.load(std::memory_order_relaxed) >= before_open);
  }
  SECTION("off, the default") {
    Engine engine(threadpool_factory(1).options());
    Sites sites;
    CHECK(push_pairs(engine, sites, kPairs, true) == 0);
  }
}

TEST_CASE("helping: pushes of ops ready at their push help too", "[engine][helping]") {
  Watchdog watchdog("helping, ready pushes");
  Engine engine(helping_options(kHelpAbove));
  Sites sites;
  constexpr int kReady = 200;
  CHECK(push_pairs(engine, sites, kReady, false) >= kReady - static_cast<int>(kHelpAbove));
  CHECK(sites.here.load(std::memory_order_relaxed) >= kReady - static_cast<int>(kHelpAbove));
}

TEST_CASE("helping: a replay far ahead of the workers helps as a push does", "[engine][helping][replay]") {
  Watchdog watchdog("helping replay");
  Engine engine(helping_options(kHelpAbove));
  HeldWorker holder;
  const Var held = engine.NewVariable();
  const Graph step = engine.Capture([&] { engine.Push([] {}, {held}, {}); });
  holder.start(engine, held);
  Sites sites;
  constexpr int kReady = 100;
  // Queued for the held worker by pushes that never help: made from inside an op of another engine (inline, so on
  // this thread).
  Engine other(inline_factory().options());
  other.Push(
      [&] {
        for (int i = 0; i < kReady; ++i) engine.Push([&sites] { sites.record(); }, {}, {engine.NewVariable()});
      },
      {}, {other.NewVariable()});
  CHECK(sites.ran() == 0);
  engine.Replay(step);  // its op waits behind the holder; the count is far past the bound
  CHECK(sites.here.load(std::memory_order_relaxed) >= kReady - static_cast<int>(kHelpAbove));
  holder.open.store(true, std::memory_order_release);
  engine.WaitForAll();
  CHECK_FALSE(holder.timed_out.load(std::memory_order_relaxed));
  CHECK(sites.ran() == kReady);
}

TEST_CASE("helping: a push from inside an op never helps", "[engine][helping][nested]") {
  Watchdog watchdog("helping nested pushes");
  Engine engine(helping_options(kHelpAbove));
  // After each child, one that waits for the parent: a push that would help, were it outside.
  CHECK(nested_children(engine, 200, [&](const Var& parent) { engine.Push([] {}, {parent}, {}); }) == 0);
}

TEST_CASE("helping: an engine with a stream executor ignores help_above", "[engine][helping][streams]") {
  Watchdog watchdog("helping beside streams");
  EngineOptions options = mixed_options({threadpool_factory(1), host_stream_factory()});
  options.help_above = kHelpAbove;
  Engine engine(std::move(options));
  Sites sites;
  CHECK(push_pairs(engine, sites, 200, true, PushOptions{.context = {.executor = 0}}) == 0);
}

TEST_CASE("helping: help_above of max_in_flight or more is refused", "[engine][helping][misuse]") {
  for (const std::size_t help_above : {std::size_t{100}, std::size_t{1000}}) {
    EngineOptions options = threadpool_factory(1).options(100);
    options.help_above = help_above;
    CHECK_THROWS_WITH(Engine(std::move(options)), Catch::Contains("help_above (" + std::to_string(help_above) + ")") &&
                                                      Catch::Contains("max_in_flight (100)"));
  }
  EngineOptions under = threadpool_factory(1).options(100);
  under.help_above = 99;
  CHECK_NOTHROW(Engine(std::move(under)));
}

}  // namespace depengine::test
