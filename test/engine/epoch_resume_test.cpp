// Resuming after a cancel (engine/cancel_scope.h, "Abort an epoch, start the next"): a training loop whose epoch is
// cancelled half way starts the next epoch clean, with and without replay, on every executor of executor_factories.h
// (graphs of stream ops included: their ops may be captured with a scope). Engine::ClearErrors is ordered like a
// mutation of each variable it names; ReplayOptions::scope puts a replay's ops in the scope it names.
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <stdexcept>
#include <string>

#include <depengine/engine/engine.h>

#include "test/engine/test_support.h"
#include "test/executors/executor_factories.h"

namespace depengine::test {
namespace {

using Catch::Contains;

// The error of a forward pass that finds a NaN.
struct NanError : std::runtime_error {
  NanError() : std::runtime_error("forward: NaN in the activations") {}
};

// A reduced training step: forward reads w and mutates act, backward reads act and w and mutates grad, update reads
// grad and mutates w, counting the updates. The forward of step `nan_at` (RunContext::replay, or the step's number
// when pushed) finds a NaN: it cancels the epoch, then throws.
struct TrainingLoop {
  Engine& engine;
  Var w = engine.NewVariable(), act = engine.NewVariable(), grad = engine.NewVariable();
  std::atomic<int> updates{0};

  void push_step(const CancelScope* epoch, std::int64_t step, std::int64_t nan_at) {
    engine.Push(
        [cancel = *epoch, step, nan_at](const RunContext& ctx) mutable {
          const std::int64_t k = ctx.replay >= 0 ? ctx.replay : step;
          if (k == nan_at) {
            cancel.Cancel();
            throw NanError();
          }
        },
        {w}, {act}, {.name = "forward", .scope = epoch});
    engine.Push([] {}, {act, w}, {grad}, {.name = "backward", .scope = epoch});
    // relaxed: a count, read after a wait that orders every update before it.
    engine.Push([this] { updates.fetch_add(1, std::memory_order_relaxed); }, {grad}, {w},
                {.name = "update", .scope = epoch});
  }
  [[nodiscard]] Graph capture(const CancelScope* epoch, std::int64_t nan_at) {
    return engine.Capture([&] { push_step(epoch, -1, nan_at); });
  }
  [[nodiscard]] int updated() const { return updates.load(std::memory_order_relaxed); }  // relaxed: as above
  // The recipe's clear (cancel_scope.h, "Abort an epoch, start the next").
  void clear() { engine.ClearErrors({w, act, grad}); }
};

constexpr int kEpoch = 50, kNanAt = 37, kNext = 10;

// Recorded graphs. On an executor that records work (CUDA, HIP: StreamFacet::records_work) only the first replay of a
// graph calls its functions, and later ones launch what it recorded (graph.h), so a NaN found at replay kNanAt and
// updates counted on the host cannot happen there. The replay tests skip such executors; the pushed epochs and
// ClearErrors run on them, and test/executors/stream/stream_graph_test.cpp covers recorded graphs.

// Epoch 1: kEpoch replays of a step captured with `first`, whose forward finds a NaN at replay kNanAt and cancels it.
void cancelled_epoch(Engine& engine, TrainingLoop& loop, const Graph& step, const CancelScope& first) {
  for (int k = 0; k < kEpoch; ++k) engine.Replay(step);
  engine.WaitForScope(first);
  CHECK(first.cancelled());
  CHECK(first.pending() == 0);
  CHECK(loop.updated() == kNanAt);  // the updates of the replays before the NaN, none after
}

TEST_CASE("after a cancelled epoch, a fresh capture with a fresh scope runs every update", "[engine][cancel][epoch]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("epoch resume, fresh capture, on " + factory.name);
      Engine engine(factory.options());
      if (const StreamFacet* s = engine.executor(0).stream_facet(); s != nullptr && s->records_work()) {
        continue;  // see "Recorded graphs" above
      }
      TrainingLoop loop{engine};
      CancelScope first;
      {
        const Graph step = loop.capture(&first, kNanAt);
        cancelled_epoch(engine, loop, step, first);
      }
      loop.clear();
      CancelScope second;
      const Graph step = loop.capture(&second, -1);
      for (int k = 0; k < kNext; ++k) engine.Replay(step);
      engine.WaitForScope(second);
      CHECK(loop.updated() == kNanAt + kNext);
      CHECK_NOTHROW(engine.WaitForVar(loop.w));  // not the old Cancelled
      CHECK_NOTHROW(engine.WaitForVar(loop.act));
    }
  }
}

TEST_CASE("after a cancelled epoch, the same graph replayed with the next epoch's scope runs every update",
          "[engine][cancel][epoch]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("epoch resume, same graph, on " + factory.name);
      Engine engine(factory.options());
      if (const StreamFacet* s = engine.executor(0).stream_facet(); s != nullptr && s->records_work()) {
        continue;  // see "Recorded graphs" above
      }
      TrainingLoop loop{engine};
      CancelScope first;
      const Graph step = loop.capture(&first, kNanAt);
      cancelled_epoch(engine, loop, step, first);
      loop.clear();
      // The replays of epoch 2 from kEpoch on: past kNanAt, so the captured forward finds no NaN.
      CancelScope second;
      for (int k = 0; k < kNext; ++k) engine.Replay(step, {.scope = &second});
      engine.WaitForScope(second);
      CHECK(second.pending() == 0);
      CHECK_FALSE(second.cancelled());
      CHECK(loop.updated() == kNanAt + kNext);
      CHECK_NOTHROW(engine.WaitForVar(loop.w));
      // Without options a replay keeps the captured scope, which stays cancelled: nothing runs.
      engine.Replay(step);
      engine.WaitForScope(first);
      CHECK(loop.updated() == kNanAt + kNext);
      CHECK_THROWS_AS(engine.WaitForVar(loop.w), Cancelled);
    }
  }
}

TEST_CASE("after a cancelled epoch of pushed steps, the next epoch's pushes run every update",
          "[engine][cancel][epoch]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("epoch resume, pushed, on " + factory.name);
      Engine engine(factory.options());
      TrainingLoop loop{engine};
      CancelScope first;
      for (int k = 0; k < kEpoch; ++k) loop.push_step(&first, k, kNanAt);
      loop.clear();  // before the epoch has finished: ordered after its ops all the same
      CancelScope second;
      for (int k = 0; k < kNext; ++k) loop.push_step(&second, k, -1);
      engine.WaitForScope(second);
      engine.WaitForScope(first);
      CHECK(first.cancelled());
      CHECK(loop.updated() == kNanAt + kNext);
      CHECK_NOTHROW(engine.WaitForVar(loop.w));
      CHECK_NOTHROW(engine.WaitForVar(loop.grad));
    }
  }
}

TEST_CASE("ClearErrors is ordered as a mutation: it clears what ops pushed before leave, not what later ones do",
          "[engine][cancel][epoch]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("ClearErrors ordering on " + factory.name);
      Engine engine(factory.options());
      const Var v = engine.NewVariable(), out = engine.NewVariable();
      HeldOp held(engine, {}, {v}, {.name = "held"});
      engine.ClearErrors({v});  // returns at once: the held op is still in flight
      std::atomic<int> ran{0};
      // relaxed: a count, read after WaitForVar(out) orders the op before.
      engine.Push([&ran] { ran.fetch_add(1, std::memory_order_relaxed); }, {v}, {out}, {.name = "reader"});
      REQUIRE(held.release(std::make_exception_ptr(NanError())));  // fails after the clear was pushed
      CHECK_NOTHROW(engine.WaitForVar(out));
      CHECK(ran.load(std::memory_order_relaxed) == 1);  // relaxed: ordered by the wait above
      CHECK_NOTHROW(engine.WaitForVar(v));
      CHECK_NOTHROW(engine.WaitForAll());  // cleared errors count as reported
      const std::uint64_t version = engine.Version(v);
      engine.ClearErrors({v, v});  // a clean variable, named twice: nothing happens, the version stays
      engine.Push([] { throw NanError(); }, {}, {v}, {.name = "after the clear"});
      CHECK_THROWS_AS(engine.WaitForVar(v), NanError);  // pushed after: not cleared
      CHECK(engine.Version(v) == version + 1);
    }
  }
}

TEST_CASE("ClearErrors refuses a dead variable, pushing nothing, and a call inside a Capture",
          "[engine][cancel][epoch][misuse]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("ClearErrors misuse on " + factory.name);
      Engine engine(factory.options());
      const Var v = engine.NewVariable(), dead = engine.NewVariable();
      engine.Push([] { throw NanError(); }, {}, {v});
      engine.DeleteVariable(dead);
      CHECK_THAT(error_message([&] { engine.ClearErrors({v, dead}); }), Contains("ClearErrors"));
      CHECK_THROWS_AS(engine.WaitForVar(v), NanError);  // v was not cleared: the call pushed nothing
      std::string message;
      (void)engine.Capture([&] { message = error_message([&] { engine.ClearErrors({v}); }); });
      CHECK_THAT(message, Contains("ClearErrors") && Contains("Capture"));
    }
  }
}

TEST_CASE("a replay's scope counts its ops, cancels them and reaches RunContext::cancelled()",
          "[engine][cancel][epoch]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("replay scope on " + factory.name);
      Engine engine(factory.options());
      if (const StreamFacet* s = engine.executor(0).stream_facet(); s != nullptr && s->records_work()) {
        continue;  // see "Recorded graphs" above
      }
      const Var v = engine.NewVariable(), w = engine.NewVariable();
      std::atomic<int> ran{0};
      std::atomic<bool> saw_scope{false};
      // Captured without a scope; a graph of stream ops is one op per replay.
      const Graph step = engine.Capture([&] {
        engine.Push(
            [&](const RunContext& ctx) {
              // relaxed: read after a wait that orders this op before it.
              saw_scope.store(ctx.scope != nullptr, std::memory_order_relaxed);
              ran.fetch_add(1, std::memory_order_relaxed);
            },
            {}, {v});
        // relaxed: as above.
        engine.Push([&] { ran.fetch_add(1, std::memory_order_relaxed); }, {v}, {w});
      });
      const std::uint32_t ops = engine.executor(0).issues_ahead() ? 1 : 2;

      CancelScope live;
      engine.Replay(step, {.scope = &live});
      engine.WaitForScope(live);
      CHECK(ran.load(std::memory_order_relaxed) == 2);  // relaxed: ordered by WaitForScope
      CHECK(saw_scope.load(std::memory_order_relaxed));

      CancelScope cancelled;
      HeldOp held(engine, {}, {v}, {.name = "held"});  // the replay's ops wait for it
      engine.Replay(step, {.scope = &cancelled});
      CHECK(cancelled.pending() == ops);
      cancelled.Cancel();
      REQUIRE(held.release());
      engine.WaitForScope(cancelled);
      CHECK(ran.load(std::memory_order_relaxed) == 2);  // relaxed: as above; cancelled before they started
      CHECK_THROWS_AS(engine.WaitForVar(w), Cancelled);
      engine.ClearErrors({v, w});
      engine.Replay(step);  // no scope: none
      CHECK_NOTHROW(engine.WaitForVar(w));
      CHECK(ran.load(std::memory_order_relaxed) == 4);  // relaxed: as above
      CHECK_FALSE(saw_scope.load(std::memory_order_relaxed));
      CHECK_NOTHROW(engine.WaitForAll());  // the Cancelled of the replay was reported (WaitForVar) and cleared
    }
  }
}

}  // namespace
}  // namespace depengine::test
