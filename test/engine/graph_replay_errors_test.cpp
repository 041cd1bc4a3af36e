// Graphs (engine/graph.h): errors, refusals and cancellation in replays.
//
// - Errors: an op failing in one replay only (RunContext::replay) skips its dependents in the graph, poisons what it
//   mutates (WaitForVar rethrows it, FailedOpName names it), runs no_skip ops with RunContext::input_error, and the
//   next replay runs clean; an error at the graph's inputs skips the graph's readers and flows on.
// - Replay's refusals: an empty graph, another engine's graph, a graph naming a deleted variable, each an Error naming
//   Replay, with nothing of the refused replay run.
// - Cancellation: ops captured with a CancelScope are counted, cancelled and waited for in every replay; the graph
//   keeps the scope alive.
//
// Scope: the CPU executors (inline, thread pools of 1 and 2 workers).
#include <atomic>
#include <catch2/catch.hpp>
#include <cstddef>
#include <exception>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <depengine/engine/engine.h>

#include "test/engine/graph_test_support.h"

namespace depengine::test {
namespace {

// Atomics: the counters here are bumped by ops and read by the test thread after a wait (WaitForAll, WaitForVar,
// WaitForScope) or a join, which orders every op's writes before the read, so they are relaxed.

using Catch::Contains;

TEST_CASE("an op failing in one replay skips its dependents in the graph; the next replay runs clean",
          "[graph][errors]") {
  for (const auto& factory : cpu_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("errors inside a replay on " + factory.name);
      Engine engine(factory.options());
      const Var a = engine.NewVariable(), b = engine.NewVariable(), c = engine.NewVariable();
      const Var d = engine.NewVariable(), e = engine.NewVariable(), f = engine.NewVariable();
      constexpr std::size_t kReplays = 5;
      std::atomic<int> ran_b{0}, ran_c{0}, ran_e{0}, ran_after{0};
      std::vector<int> no_skip_saw(kReplays, -2);  // per replay: the id of the input error the no_skip op saw; 0: none
      std::vector<int> no_skip_var(kReplays, -2);  // per replay: 1 if it named `a` as the variable carrying it; 0: none
      std::vector<std::string> names(kReplays);
      ReplayIndex slot(kReplays);
      Graph graph = engine.Capture([&] {
        engine.Push(
            [](const RunContext& ctx) {
              if (ctx.replay == 1 || ctx.replay == 3) throw OpFailure(100 + static_cast<int>(ctx.replay));
            },
            {}, {a}, {.name = "graph thrower"});
        engine.Push([&] { ran_b.fetch_add(1, std::memory_order_relaxed); }, {a}, {b});
        engine.Push([&] { ran_c.fetch_add(1, std::memory_order_relaxed); }, {b}, {c});
        engine.Push(
            [&](const RunContext& ctx) {
              if (const auto k = slot(ctx)) {
                no_skip_saw[*k] =
                    ctx.input_error == nullptr ? 0 : thrown_id([&] { std::rethrow_exception(*ctx.input_error); });
                no_skip_var[*k] = ctx.input_error_var == a ? 1 : ctx.input_error_var.is_null() ? 0 : -1;
              }
            },
            {a}, {d}, {.no_skip = true});
        engine.Push(
            [&](const RunContext& ctx) {
              ran_e.fetch_add(1, std::memory_order_relaxed);
              if (const auto k = slot(ctx)) names[*k] = std::string(ctx.name);
            },
            {}, {e}, {.name = "independent"});
      });
      REQUIRE(graph.size() == 5);

      engine.Replay(graph);  // replay 0: clean
      CHECK(thrown_id([&] { engine.WaitForAll(); }) == 0);
      CHECK(ran_b.load(std::memory_order_relaxed) == 1);
      CHECK(ran_c.load(std::memory_order_relaxed) == 1);

      engine.Replay(graph);  // replay 1: the first op throws
      engine.Push([&] { ran_after.fetch_add(1, std::memory_order_relaxed); }, {c},
                  {f});  // behind a poisoned variable: skipped, passes it on
      int id = 0;
      std::exception_ptr caught;
      try {
        engine.WaitForVar(a);
      } catch (const OpFailure& failure) {
        id = failure.id;
        caught = std::current_exception();
      } catch (...) {
        id = -1;
      }
      CHECK(id == 101);
      CHECK(engine.FailedOpName(caught) == std::optional<std::string>("graph thrower"));
      CHECK(thrown_id([&] { engine.WaitForVar(b); }) == 101);
      CHECK(thrown_id([&] { engine.WaitForVar(c); }) == 101);
      CHECK(thrown_id([&] { engine.WaitForVar(f); }) == 101);
      CHECK(thrown_id([&] { engine.WaitForVar(d); }) == 0);  // the no_skip op succeeded
      CHECK(thrown_id([&] { engine.WaitForVar(e); }) == 0);
      CHECK(thrown_id([&] { engine.WaitForAll(); }) == 0);  // every error was reported by a WaitForVar
      CHECK(ran_b.load(std::memory_order_relaxed) == 1);
      CHECK(ran_c.load(std::memory_order_relaxed) == 1);
      CHECK(ran_after.load(std::memory_order_relaxed) == 0);
      CHECK(ran_e.load(std::memory_order_relaxed) == 2);

      engine.Replay(graph);  // replay 2: the waits cleared every error
      CHECK(thrown_id([&] { engine.WaitForAll(); }) == 0);
      CHECK(ran_b.load(std::memory_order_relaxed) == 2);
      CHECK(ran_c.load(std::memory_order_relaxed) == 2);
      CHECK(ran_e.load(std::memory_order_relaxed) == 3);

      // Replay 3 fails again, and no WaitForVar reports it: WaitForAll does, as the replaying thread's error, and
      // clears what it poisoned, so replay 4 runs clean.
      engine.Replay(graph);
      CHECK(thrown_id([&] { engine.WaitForAll(); }) == 103);
      CHECK(ran_b.load(std::memory_order_relaxed) == 2);
      CHECK(ran_c.load(std::memory_order_relaxed) == 2);
      engine.Replay(graph);
      CHECK(thrown_id([&] { engine.WaitForAll(); }) == 0);
      CHECK(ran_b.load(std::memory_order_relaxed) == 3);
      CHECK(ran_c.load(std::memory_order_relaxed) == 3);
      CHECK(ran_e.load(std::memory_order_relaxed) == 5);
      CHECK(no_skip_saw == std::vector<int>{0, 101, 0, 103, 0});
      CHECK(no_skip_var == std::vector<int>{0, 1, 0, 1, 0});
      CHECK(names == std::vector<std::string>(kReplays, "independent"));
      CHECK(slot.out_of_range() == 0);
    }
  }
}

TEST_CASE("an error at a graph's inputs skips the graph's readers of it and flows on", "[graph][errors]") {
  for (const auto& factory : cpu_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("errors at a graph's inputs on " + factory.name);
      Engine engine(factory.options());
      const Var x = engine.NewVariable(), y = engine.NewVariable(), z = engine.NewVariable();
      const Var w = engine.NewVariable();
      const Var n = engine.NewVariable();
      std::atomic<int> ran0{0}, ran1{0}, ran2{0};
      std::vector<int> no_skip_saw;  // per replay: the id of the input error the no_skip op saw; 0: none
      Graph graph = engine.Capture([&] {
        engine.Push([&] { ran0.fetch_add(1, std::memory_order_relaxed); }, {x}, {y});
        engine.Push([&] { ran1.fetch_add(1, std::memory_order_relaxed); }, {y}, {z});
        engine.Push([&] { ran2.fetch_add(1, std::memory_order_relaxed); }, {}, {w});
        engine.Push(
            [&](const RunContext& ctx) {
              no_skip_saw.push_back(
                  ctx.input_error == nullptr ? 0 : thrown_id([&] { std::rethrow_exception(*ctx.input_error); }));
            },
            {x}, {n}, {.no_skip = true});
      });
      engine.Push([] { throw OpFailure(9); }, {}, {x});
      engine.Replay(graph);
      CHECK(thrown_id([&] { engine.WaitForVar(z); }) == 9);
      CHECK(thrown_id([&] { engine.WaitForVar(y); }) == 9);
      CHECK(thrown_id([&] { engine.WaitForVar(x); }) == 9);
      CHECK(thrown_id([&] { engine.WaitForVar(w); }) == 0);
      CHECK(thrown_id([&] { engine.WaitForVar(n); }) == 0);  // the no_skip op ran, and succeeded
      CHECK(thrown_id([&] { engine.WaitForAll(); }) == 0);
      CHECK(ran0.load(std::memory_order_relaxed) == 0);
      CHECK(ran1.load(std::memory_order_relaxed) == 0);
      CHECK(ran2.load(std::memory_order_relaxed) == 1);

      engine.Replay(graph);  // inputs clean again
      CHECK(thrown_id([&] { engine.WaitForAll(); }) == 0);
      CHECK(ran0.load(std::memory_order_relaxed) == 1);
      CHECK(ran1.load(std::memory_order_relaxed) == 1);
      CHECK(ran2.load(std::memory_order_relaxed) == 2);
      CHECK(no_skip_saw == std::vector<int>{9, 0});
    }
  }
}

TEST_CASE("Replay refuses an empty graph, another engine's graph and a graph naming a deleted variable",
          "[graph][misuse]") {
  for (const auto& factory : cpu_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("Replay refusals on " + factory.name);
      Engine engine(factory.options());
      Engine other(factory.options());
      std::atomic<int> ran{0};
      auto count = [&ran] { ran.fetch_add(1, std::memory_order_relaxed); };

      const Graph empty;
      CHECK(empty.empty());
      CHECK(empty.size() == 0);
      CHECK_THAT(error_message([&] { engine.Replay(empty); }), Contains("Replay"));
      // A capture of nothing is an empty graph (or refused at capture).
      Graph nothing;
      try {
        nothing = engine.Capture([] {});
      } catch (const Error&) {
      }
      CHECK(nothing.empty());
      CHECK_THAT(error_message([&] { engine.Replay(nothing); }), Contains("Replay"));

      const Var theirs_var = other.NewVariable();
      Graph theirs = other.Capture([&] { other.Push(count, {}, {theirs_var}); });
      CHECK_THAT(error_message([&] { engine.Replay(theirs); }), Contains("Replay"));

      const Var keep = engine.NewVariable(), doomed = engine.NewVariable();
      Graph graph = engine.Capture([&] {
        engine.Push(count, {}, {keep});
        engine.Push(count, {keep}, {doomed});
      });
      engine.Replay(graph);
      engine.WaitForAll();
      CHECK(ran.load(std::memory_order_relaxed) == 2);
      engine.DeleteVariable(doomed);
      CHECK_THAT(error_message([&] { engine.Replay(graph); }), Contains("Replay"));
      // New variables may take the deleted one's slot: the graph still names a dead variable.
      std::vector<Var> fresh;
      for (int i = 0; i < 4; ++i) fresh.push_back(engine.NewVariable());
      CHECK_THAT(error_message([&] { engine.Replay(graph); }), Contains("Replay"));
      engine.WaitForAll();
      other.WaitForAll();
      CHECK(ran.load(std::memory_order_relaxed) == 2);  // nothing of a refused replay ran
      CHECK(engine.Version(keep) == 1);
      CHECK(other.Version(theirs_var) == 0);
      CHECK(engine.InFlight() == 0);
    }
  }
}

// Ops captured with a CancelScope belong to it in every replay (before, capture refused them): WaitForScope waits for
// each replay's ops, Cancel() completes those not started with Cancelled, without running (the error flows on to what
// they mutate), and a running op sees RunContext::cancelled(). The graph keeps the scope alive.
TEST_CASE("ops captured with a CancelScope are counted, cancelled and waited for in every replay", "[graph][cancel]") {
  for (const auto& factory : cpu_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("scoped replays on " + factory.name);
      Engine engine(factory.options());
      const Var v = engine.NewVariable(), w = engine.NewVariable();
      std::optional<CancelScope> scope(std::in_place);
      std::atomic<int> ran{0};
      // An async op too: it counts out when its Completion and its function are both done, or, cancelled, at once.
      Graph graph = engine.Capture([&] {
        engine.Push([&] { ran.fetch_add(1, std::memory_order_relaxed); }, {}, {v},
                    {.name = "scoped a", .scope = &*scope});
        engine.Push([&] { ran.fetch_add(1, std::memory_order_relaxed); }, {v}, {w},
                    {.name = "scoped b", .scope = &*scope});
        engine.PushAsync(
            [&](Completion done) {
              ran.fetch_add(1, std::memory_order_relaxed);
              done();
            },
            {w}, {}, {.name = "scoped async c", .scope = &*scope});
      });
      CHECK(scope->pending() == 0);  // captured, not pushed

      engine.Replay(graph);
      engine.WaitForScope(*scope);
      CHECK(ran.load(std::memory_order_relaxed) == 3);
      CHECK(scope->pending() == 0);

      HeldOp held(engine, {}, {v}, {.name = "held"});  // the next replay's ops wait for it
      engine.Replay(graph);
      CHECK(scope->pending() == 3);
      scope->Cancel();
      REQUIRE(held.release());
      engine.WaitForScope(*scope);
      CHECK(ran.load(std::memory_order_relaxed) == 3);  // cancelled before they started: none ran
      CHECK_THROWS_AS(engine.WaitForVar(v), Cancelled);
      CHECK_THROWS_AS(engine.WaitForVar(w), Cancelled);

      // Every handle gone, the graph still names the scope: its replays run cancelled, and nothing is freed early
      // (ASan).
      scope.reset();
      engine.Replay(graph);
      CHECK_THROWS_AS(engine.WaitForVar(w), Cancelled);
      try {
        engine.WaitForAll();
      } catch (const Cancelled&) {  // an error of the cancelled ops that no wait above reported
      }
      CHECK(ran.load(std::memory_order_relaxed) == 3);

      if (factory.workers == 0) continue;  // below, an op runs until the test thread cancels: a pool's worker runs it
      CancelScope running;
      std::atomic<bool> started{false}, saw_cancel{false};
      Graph polling = engine.Capture([&] {
        engine.Push(
            [&](const RunContext& ctx) {
              started.store(true, std::memory_order_release);  // pairs with the acquire below
              while (!ctx.cancelled()) std::this_thread::yield();
              saw_cancel.store(true, std::memory_order_relaxed);
            },
            {}, {v}, {.name = "polls", .scope = &running});
      });
      engine.Replay(polling);
      REQUIRE(wait_until([&] { return started.load(std::memory_order_acquire); }));
      running.Cancel();
      engine.WaitForScope(running);
      CHECK(saw_cancel.load(std::memory_order_relaxed));
      CHECK_NOTHROW(engine.WaitForVar(v));  // it ran: a running op finishes, with no error of its own
    }
  }
}

}  // namespace
}  // namespace depengine::test
