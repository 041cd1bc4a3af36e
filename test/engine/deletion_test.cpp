// DeleteVariable (engine.h, "Deletion"): the deleter runs exactly once, after every op pushed on the variable before
// it, whatever error the variable carries; every copy of the handle is dead from the call; the variable's slot is
// reused cleanly. Every test runs on every executor.
#include <atomic>
#include <catch2/catch.hpp>
#include <memory>
#include <thread>
#include <vector>

#include <depengine/engine/engine.h>

#include "test/engine/test_support.h"
#include "test/executors/executor_factories.h"

namespace depengine::test {
namespace {

// Atomics: counters bumped by ops are read by the test thread after a wait (WaitForAll, WaitForVar, WaitForScope), a
// join or the engine's destruction, which orders every op's writes before the read, so they are relaxed.

TEST_CASE("the deleter runs once, after every earlier op on the variable", "[engine][deletion]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("deletion order on " + factory.name);
      Engine engine(factory.options());
      const Var v = engine.NewVariable(), other = engine.NewVariable();
      std::atomic<int> completed{0};
      auto count = [&completed] { completed.fetch_add(1, std::memory_order_relaxed); };
      HeldOp held_read(engine, {v}, {});  // running reads hold the deletion back too
      engine.Push(count, {v}, {});
      engine.Push(count, {v}, {other});
      HeldOp held_write(engine, {other}, {v});
      engine.Push(count, {}, {v});
      std::atomic<int> deleter_runs{0};
      int completed_at_deletion = -1;
      engine.DeleteVariable(v, [&] {
        deleter_runs.fetch_add(1, std::memory_order_relaxed);
        completed_at_deletion = completed.load(std::memory_order_relaxed);
      });
      CHECK(deleter_runs.load(std::memory_order_relaxed) == 0);
      // The held ops are counted just before they complete.
      completed.fetch_add(1, std::memory_order_relaxed);
      REQUIRE(held_read.release());
      completed.fetch_add(1, std::memory_order_relaxed);
      REQUIRE(held_write.release());
      engine.WaitForAll();
      CHECK(deleter_runs.load(std::memory_order_relaxed) == 1);
      CHECK(completed_at_deletion == 5);
    }
  }
}

TEST_CASE("every copy of a deleted variable is dead", "[engine][deletion][misuse]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("dead handles on " + factory.name);
      Engine engine(factory.options());
      const Var v = engine.NewVariable();
      const Var copy = v;
      const Var alive = engine.NewVariable();
      HeldOp held(engine, {}, {v});  // the deletion is still pending when the copies are used
      engine.DeleteVariable(v);
      CHECK_THROWS_AS(engine.Push([] {}, {copy}, {}), Error);
      CHECK_THROWS_AS(engine.Push([] {}, {alive}, {copy}), Error);
      CHECK_THROWS_AS(engine.PushAsync([](Completion done) { done(); }, {}, {copy}), Error);
      CHECK_THROWS_AS(engine.WaitForVar(copy), Error);
      CHECK_THROWS_AS((void)engine.Version(copy), Error);
      CHECK_THROWS_AS(engine.DeleteVariable(copy), Error);
      REQUIRE(held.release());
      engine.WaitForAll();
      CHECK_THROWS_AS(engine.Push([] {}, {v}, {}), Error);
      // The failed pushes left nothing behind: alive is idle and unchanged.
      CHECK(engine.InFlight() == 0);
      CHECK(engine.Version(alive) == 0);
      engine.WaitForVar(alive);
    }
  }
}

TEST_CASE("the deleter runs even when the variable carries an error, which is not lost", "[engine][deletion]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("deleting a poisoned variable on " + factory.name);
      Engine engine(factory.options());
      const Var v = engine.NewVariable();
      engine.Push([] { throw OpFailure(1); }, {}, {v});
      std::atomic<int> deleter_runs{0};
      engine.DeleteVariable(v, [&] { deleter_runs.fetch_add(1, std::memory_order_relaxed); });
      CHECK(thrown_id([&] { engine.WaitForAll(); }) == 1);
      CHECK(deleter_runs.load(std::memory_order_relaxed) == 1);
    }
  }
}

TEST_CASE("a deleter that throws is reported by WaitForAll", "[engine][deletion][errors]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("throwing deleter on " + factory.name);
      Engine engine(factory.options());
      engine.DeleteVariable(engine.NewVariable(), [] { throw OpFailure(4); });
      CHECK(thrown_id([&] { engine.WaitForAll(); }) == 4);
    }
  }
}

// The slot of a deleted variable is recycled. The new variable must start as NewVariable promises (version 0, no
// error), and the old handle must stay dead although it points at the same slot.
TEST_CASE("a variable made after a deletion starts at version 0 with no error", "[engine][deletion][version]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("recycled variables on " + factory.name);
      Engine engine(factory.options());
      std::vector<Var> old;
      for (int i = 0; i < 4; ++i) {
        const Var v = engine.NewVariable();
        engine.Push([] {}, {}, {v});
        engine.Push([] {}, {}, {v});
        engine.Push([] { throw OpFailure(1); }, {}, {v});
        engine.DeleteVariable(v);
        old.push_back(v);
      }
      CHECK(thrown_id([&] { engine.WaitForAll(); }) == 1);
      for (int i = 0; i < 4; ++i) {
        const Var fresh = engine.NewVariable();
        CHECK(engine.Version(fresh) == 0);
        CHECK(thrown_id([&] { engine.WaitForVar(fresh); }) == 0);
        bool ran = false;
        engine.Push([&] { ran = true; }, {fresh}, {});
        engine.WaitForVar(fresh);
        CHECK(ran);
      }
      for (const Var& v : old) CHECK_THROWS_AS(engine.Push([] {}, {v}, {}), Error);
    }
  }
}

// Variables made, used and deleted by two threads at once while their ops run: each deleter runs once, after its own
// variable's ops, and recycled slots never mix two variables up.
TEST_CASE("variables created and deleted concurrently with their ops", "[engine][deletion][concurrency]") {
  const int rounds = static_cast<int>(sized(2000, 150, 500));
  constexpr int kOpsPerVar = 4;
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("concurrent deletion on " + factory.name);
      Engine engine(factory.options());
      const Var shared = engine.NewVariable();
      struct Slot {
        int ops_done = 0;  // written by the variable's ops, which the engine serialises
        int ops_at_deletion = -1;
        std::atomic<int> deleter_runs{0};
      };
      std::vector<std::unique_ptr<Slot>> slots;
      for (int i = 0; i < 2 * rounds; ++i) slots.push_back(std::make_unique<Slot>());
      auto worker = [&](int first) {
        for (int r = 0; r < rounds; ++r) {
          Slot* slot = slots[static_cast<std::size_t>(first + r)].get();
          const Var v = engine.NewVariable();
          for (int k = 0; k < kOpsPerVar; ++k) engine.Push([slot] { ++slot->ops_done; }, {shared}, {v});
          engine.DeleteVariable(v, [slot] {
            slot->ops_at_deletion = slot->ops_done;
            slot->deleter_runs.fetch_add(1, std::memory_order_relaxed);
          });
        }
      };
      std::thread other(worker, rounds);
      worker(0);
      other.join();
      engine.WaitForAll();
      int wrong = 0;
      for (const auto& slot : slots) {
        if (slot->deleter_runs.load(std::memory_order_relaxed) != 1 || slot->ops_at_deletion != kOpsPerVar) ++wrong;
      }
      CHECK(wrong == 0);
    }
  }
}

}  // namespace
}  // namespace depengine::test
