// Graphs (engine/graph.h): how a replay is ordered against the ops around it and inside itself.
//
// - Boundary precision. A replay joins each variable's queue on its own: an op pushed after a replay waits only for
//   the graph's last users of its variables (not for a slow op of the graph on another variable), and the graph's
//   first user of a variable waits only for what was pushed before on that variable.
// - Reads across the boundary run together: a graph's read joins an ordinary read that is running, and an ordinary
//   read pushed after a graph that ends in a read joins that read; a later write waits for all of them.
// - Version counts the graph's mutations, exactly inside the ops.
// - Fan-ins: an op with more predecessors than a replayed op takes directly (graph_plan.h) starts after every one.
// - Sole grants: an op that waits for one grant alone (one predecessor, or one join; graph_plan.h) runs once in every
//   replay and after that grant, whether its join is granted at the replay or later by its queue.
//
// Scope: synchronous ops on the CPU executors (inline, thread pools of 1 and 2 workers). Where a test needs an op of
// a graph to hold its thread (a gate the test thread opens; no sleeps), it runs on the pools only, or replays from a
// helper thread on the inline executor (which runs an op on the thread that makes it ready).
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <depengine/engine/engine.h>

#include "test/engine/graph_test_support.h"

namespace depengine::test {
namespace {

// Atomics: the counters here are bumped by ops and read by the test thread after a wait (WaitForAll, WaitForVar,
// WaitForScope) or a join, which orders every op's writes before the read, so they are relaxed.

// Op B of the graph holds its worker at a gate: an ordinary op pushed after the replay that uses only what op A (done)
// used runs meanwhile, and one that uses B's variable waits for B. On the pools only: a gated op on the inline
// executor holds the thread that made it ready, and ops ready at once run there in an order the test cannot choose.
TEST_CASE("after a replay, a push waits for the graph's last users of its variables only, not for the whole graph",
          "[graph][boundary]") {
  for (const auto& factory : threadpool_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("graph boundary (gated op) on " + factory.name);
      Engine engine(factory.options());
      const Var l1 = engine.NewVariable(), l2 = engine.NewVariable(), out = engine.NewVariable();
      std::uint64_t value1 = 0, value2 = 0;
      OpGate gate;
      Flag b_done;
      Graph graph = engine.Capture([&] {
        engine.Push([&] { value1 = 11; }, {}, {l1});  // A
        engine.Push(
            [&] {  // B
              gate.pass();
              value2 = 22;
              b_done.set();
            },
            {}, {l2});
      });
      REQUIRE(graph.size() == 2);
      engine.Replay(graph);
      const bool b_reached = gate.reached.wait();  // B holds a worker from here on

      Flag c_ran;
      std::uint64_t c_saw = 0;
      bool c_saw_b_done = true;
      engine.Push(
          [&] {  // C: reads what A wrote
            c_saw = value1;
            c_saw_b_done = b_done.is_set();
            c_ran.set();
          },
          {l1}, {out});
      // A thread that may run A and C where B holds the only worker (a wait runs queued work). B is running, so it
      // cannot pick B up.
      Flag waiter_threw;
      std::thread waiter([&] {
        try {
          engine.WaitForVar(out);
        } catch (...) {
          waiter_threw.set();
        }
      });
      const bool c_ran_while_b_held = c_ran.wait();

      Flag f_ran;
      std::uint64_t f_saw = 0;
      bool f_saw_b_done = false;
      engine.Push(
          [&] {  // F: uses B's variable
            f_saw = value2;
            f_saw_b_done = b_done.is_set();
            f_ran.set();
          },
          {l2}, {});
      const bool f_ran_early = f_ran.is_set();
      gate.open.set();
      waiter.join();
      engine.WaitForAll();

      CHECK(b_reached);
      CHECK(c_ran_while_b_held);
      CHECK(c_saw == 11);
      CHECK_FALSE(c_saw_b_done);
      CHECK_FALSE(f_ran_early);
      CHECK(f_saw_b_done);
      CHECK(f_saw == 22);
      CHECK_FALSE(waiter_threw.is_set());
      CHECK_FALSE(gate.timed_out.load(std::memory_order_relaxed));
    }
  }
}

// The same boundary where B is held back by its input (an ordinary op held open on z) rather than by its own
// function: no thread is held, so it runs on every executor. A push on A's variable runs at once; one on B's waits.
TEST_CASE("after a replay, a push does not wait for graph ops on other variables still waiting for their inputs",
          "[graph][boundary]") {
  for (const auto& factory : cpu_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("graph boundary (held input) on " + factory.name);
      Engine engine(factory.options());
      const Var z = engine.NewVariable(), l1 = engine.NewVariable(), l2 = engine.NewVariable();
      const Var out = engine.NewVariable();
      std::uint64_t value1 = 0, value2 = 0;
      Flag b_done, z_released;
      bool b_saw_z_released = false;
      HeldOp z_writer(engine, {}, {z});
      Graph graph = engine.Capture([&] {
        engine.Push(
            [&] {  // B, first in captured order: waits for z
              b_saw_z_released = z_released.is_set();
              value2 = 22;
              b_done.set();
            },
            {z}, {l2});
        engine.Push([&] { value1 = 11; }, {}, {l1});  // A
      });
      engine.Replay(graph);

      Flag c_ran;
      std::uint64_t c_saw = 0;
      bool c_saw_b_done = true;
      engine.Push(
          [&] {
            c_saw = value1;
            c_saw_b_done = b_done.is_set();
            c_ran.set();
          },
          {l1}, {out});
      const bool c_ran_while_b_waits = c_ran.wait();
      Flag f_ran;
      bool f_saw_b_done = false;
      std::uint64_t f_saw = 0;
      engine.Push(
          [&] {
            f_saw = value2;
            f_saw_b_done = b_done.is_set();
            f_ran.set();
          },
          {}, {l2});
      const bool f_ran_early = f_ran.is_set();
      z_released.set();
      const bool released = z_writer.release();
      engine.WaitForAll();

      CHECK(released);
      CHECK(c_ran_while_b_waits);
      CHECK(c_saw == 11);
      CHECK_FALSE(c_saw_b_done);
      CHECK_FALSE(f_ran_early);
      CHECK(f_saw_b_done);
      CHECK(f_saw == 22);
      CHECK(b_saw_z_released);
    }
  }
}

// The other direction: an ordinary op on x is held open; a replay whose op E uses x and op D uses only y runs D at
// once (whichever of the two was captured first), and E only once the x op has completed.
TEST_CASE("a graph's first user of a variable waits only for earlier pushes on that variable", "[graph][boundary]") {
  for (const auto& factory : cpu_factories()) {
    DYNAMIC_SECTION(factory.name) {
      for (const bool e_first : {true, false}) {
        CAPTURE(e_first);
        Watchdog watchdog("graph first users on " + factory.name);
        Engine engine(factory.options());
        const Var x = engine.NewVariable(), y = engine.NewVariable();
        Flag x_released, d_ran, e_ran;
        bool e_saw_x_released = false;
        HeldOp x_op(engine, {}, {x});
        auto push_d = [&] { engine.Push([&] { d_ran.set(); }, {}, {y}); };
        auto push_e = [&] {
          engine.Push(
              [&] {
                e_saw_x_released = x_released.is_set();
                e_ran.set();
              },
              {x}, {x});
        };
        Graph graph = engine.Capture([&] {
          if (e_first) push_e();
          push_d();
          if (!e_first) push_e();
        });
        engine.Replay(graph);
        const bool d_ran_while_x_held = d_ran.wait();
        const bool e_ran_early = e_ran.is_set();
        x_released.set();
        const bool released = x_op.release();
        engine.WaitForAll();

        CHECK(released);
        CHECK(d_ran_while_x_held);
        CHECK_FALSE(e_ran_early);
        CHECK(e_ran.is_set());
        CHECK(e_saw_x_released);
      }
    }
  }
}

TEST_CASE("a graph's read of a variable runs beside an earlier ordinary read; a later write waits for both",
          "[graph][boundary][reads]") {
  for (const auto& factory : cpu_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("graph reads beside ordinary reads on " + factory.name);
      Engine engine(factory.options());
      const Var v = engine.NewVariable(), out = engine.NewVariable();
      std::uint64_t value = 0;
      engine.Push([&] { value = 5; }, {}, {v});
      HeldOp reader(engine, {v}, {});  // an ordinary read of v, held open
      Flag g_ran, reader_released, w_ran;
      std::uint64_t g_saw = 0;
      Graph graph = engine.Capture([&] {
        engine.Push(
            [&] {
              g_saw = value;
              g_ran.set();
            },
            {v}, {out});
      });
      engine.Replay(graph);
      const bool graph_read_ran_beside = g_ran.wait();
      bool w_saw_reader_released = false, w_saw_graph_read = false;
      engine.Push(
          [&] {
            w_saw_reader_released = reader_released.is_set();
            w_saw_graph_read = g_ran.is_set();
            value = 6;
            w_ran.set();
          },
          {}, {v});
      const bool write_ran_early = w_ran.is_set();
      reader_released.set();
      const bool released = reader.release();
      engine.WaitForAll();

      CHECK(released);
      CHECK(graph_read_ran_beside);
      CHECK(g_saw == 5);
      CHECK_FALSE(write_ran_early);
      CHECK(w_saw_reader_released);
      CHECK(w_saw_graph_read);
      CHECK(value == 6);
    }
  }
}

// The graph writes v, then reads it at a gate. An ordinary read pushed after the replay runs while the graph's
// trailing read is held; an ordinary write waits for it. The replay is made on a helper thread: on the inline
// executor it runs the graph's ops, and the trailing read holds that thread.
TEST_CASE("an ordinary read after a graph ending in a read of a variable runs beside it; a write waits",
          "[graph][boundary][reads]") {
  for (const auto& factory : cpu_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("reads after a graph's trailing read on " + factory.name);
      Engine engine(factory.options());
      const Var v = engine.NewVariable(), r_out = engine.NewVariable(), r2_out = engine.NewVariable();
      std::uint64_t value = 0;
      std::uint64_t r_saw = 0;
      OpGate gate;
      Graph graph = engine.Capture([&] {
        engine.Push([&](const RunContext& ctx) { value = 7 + static_cast<std::uint64_t>(ctx.replay); }, {}, {v});
        engine.Push(
            [&] {
              r_saw = value;
              gate.pass();
            },
            {v}, {r_out});
      });
      Flag replay_threw;
      std::thread replayer([&] {
        try {
          engine.Replay(graph);
        } catch (...) {
          replay_threw.set();
        }
      });
      const bool r_reached = gate.reached.wait();

      Flag r2_ran;
      std::uint64_t r2_saw = 0;
      engine.Push(
          [&] {
            r2_saw = value;
            r2_ran.set();
          },
          {v}, {r2_out});
      // A thread that may run the read where the graph's read holds the only worker.
      Flag waiter_threw;
      std::thread waiter([&] {
        try {
          engine.WaitForVar(r2_out);
        } catch (...) {
          waiter_threw.set();
        }
      });
      const bool read_ran_beside = r2_ran.wait();
      waiter.join();

      Flag w2_ran;
      bool w2_saw_gate_open = false;
      engine.Push(
          [&] {
            w2_saw_gate_open = gate.open.is_set();
            value = 100;
            w2_ran.set();
          },
          {}, {v});
      const bool write_ran_early = w2_ran.is_set();
      gate.open.set();
      replayer.join();
      engine.WaitForAll();

      CHECK(r_reached);
      CHECK(read_ran_beside);
      CHECK(r_saw == 7);
      CHECK(r2_saw == 7);
      CHECK_FALSE(write_ran_early);
      CHECK(w2_saw_gate_open);
      CHECK(value == 100);
      CHECK_FALSE(replay_threw.is_set());
      CHECK_FALSE(waiter_threw.is_set());
      CHECK_FALSE(gate.timed_out.load(std::memory_order_relaxed));
    }
  }
}

TEST_CASE("Version counts every replayed mutation, exactly inside the ops", "[graph][version]") {
  constexpr std::size_t kReplays = 10;
  constexpr std::size_t kOps = 5;
  for (const auto& factory : cpu_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("graph versions on " + factory.name);
      Engine engine(factory.options());
      const Var v = engine.NewVariable(), other = engine.NewVariable();
      engine.Push([] {}, {}, {v});
      engine.WaitForVar(v);
      REQUIRE(engine.Version(v) == 1);
      std::vector<std::uint64_t> seen(kReplays * kOps, 0);  // per replay and op, written by that op
      ReplayIndex slot(kReplays);
      auto record = [&](const RunContext& ctx, std::size_t op) {
        if (const auto k = slot(ctx)) seen[*k * kOps + op] = engine.Version(v);
      };
      Graph graph = engine.Capture([&] {
        engine.Push([&](const RunContext& ctx) { record(ctx, 0); }, {}, {v});       // mutation 1
        engine.Push([&](const RunContext& ctx) { record(ctx, 1); }, {v}, {});       // a read
        engine.Push([&](const RunContext& ctx) { record(ctx, 2); }, {other}, {v});  // mutation 2
        engine.Push([&](const RunContext& ctx) { record(ctx, 3); }, {v}, {v});      // mutation 3
        engine.Push([&](const RunContext& ctx) { record(ctx, 4); }, {v}, {});       // a read after the last
      });
      for (std::size_t k = 0; k < kReplays; ++k) engine.Replay(graph);
      engine.WaitForAll();
      CHECK(engine.Version(v) == 1 + 3 * kReplays);
      CHECK(engine.Version(other) == 0);  // only read
      std::vector<std::uint64_t> expected;
      for (std::uint64_t k = 0; k < kReplays; ++k) {
        // Versions before each op's own mutation completes: 1 + 3k before the first, then one more per mutation.
        expected.insert(expected.end(), {1 + 3 * k, 2 + 3 * k, 2 + 3 * k, 3 + 3 * k, 4 + 3 * k});
      }
      CHECK(seen == expected);
      CHECK(slot.out_of_range() == 0);
      engine.Push([] {}, {}, {v});
      engine.WaitForVar(v);
      CHECK(engine.Version(v) == 2 + 3 * kReplays);
    }
  }
}

// A replayed op with more than 16 predecessors takes their grants through relays of 8 (graph_plan.h, Fan-ins): it must
// still start only after every one of them, in every replay, whether they reach it through one variable (a writer after
// N readers) or through many (a reader of 40 variables, each written by its own op). A relay that granted early, or a
// count left wrong for the next replay, shows as a writer that saw fewer readers, or a reader that saw a stale value.
TEST_CASE("an op with many predecessors in a graph starts after every one of them, in every replay",
          "[graph][fan-in]") {
  constexpr std::size_t kReplays = 20;
  constexpr std::size_t kSources = 40;
  for (const auto& factory : cpu_factories()) {
    for (const std::size_t readers : {std::size_t{16}, std::size_t{17}, std::size_t{100}}) {
      DYNAMIC_SECTION(factory.name << ", " << readers << " readers") {
        Watchdog watchdog("graph fan-in on " + factory.name);
        Engine engine(factory.options());
        const Var x = engine.NewVariable();
        std::vector<Var> sources;
        for (std::size_t i = 0; i < kSources; ++i) sources.push_back(engine.NewVariable());
        std::int64_t x_value = -1;                              // x's data: the replay that last wrote it
        std::vector<std::int64_t> source_values(kSources, -1);  // each source's data: likewise
        std::vector<std::atomic<std::size_t>> reads(kReplays);  // per replay: readers of x that saw it right
        std::vector<std::size_t> reads_seen(kReplays, 0);       // per replay: what the writer after them counted
        std::vector<std::size_t> sources_right(kReplays, 0);    // per replay: sources the fan-in reader saw right
        ReplayIndex replay_of(kReplays);
        Graph graph = engine.Capture([&] {
          engine.Push(
              [&](const RunContext& ctx) {
                if (auto k = replay_of(ctx)) x_value = static_cast<std::int64_t>(*k);
              },
              {}, {x});
          for (std::size_t r = 0; r < readers; ++r) {
            engine.Push(
                [&](const RunContext& ctx) {
                  // relaxed: the writer after the readers reads it, ordered after every one of them by x.
                  if (auto k = replay_of(ctx); k && x_value == static_cast<std::int64_t>(*k)) {
                    reads[*k].fetch_add(1, std::memory_order_relaxed);
                  }
                },
                {x}, {});
          }
          engine.Push(
              [&](const RunContext& ctx) {
                if (auto k = replay_of(ctx)) reads_seen[*k] = reads[*k].load(std::memory_order_relaxed);
              },
              {}, {x});
          for (std::size_t i = 0; i < kSources; ++i) {
            engine.Push(
                [&, i](const RunContext& ctx) {
                  if (auto k = replay_of(ctx)) source_values[i] = static_cast<std::int64_t>(*k);
                },
                {}, {sources[i]});
          }
          engine.Push(
              [&](const RunContext& ctx) {
                if (auto k = replay_of(ctx)) {
                  sources_right[*k] = static_cast<std::size_t>(
                      std::count(source_values.begin(), source_values.end(), static_cast<std::int64_t>(*k)));
                }
              },
              sources, {});
        });
        for (std::size_t k = 0; k < kReplays; ++k) engine.Replay(graph);
        engine.WaitForAll();
        CHECK(replay_of.out_of_range() == 0);
        CHECK(reads_seen == std::vector<std::size_t>(kReplays, readers));
        CHECK(sources_right == std::vector<std::size_t>(kReplays, kSources));
      }
    }
  }
}

// The count of such an op is never taken down, nor restored: were it counted in one replay and not restored, the next
// replay would never run it (and the watchdog would fail the test). On the pools only: the later grants come from a
// gated writer, which holds a worker.
TEST_CASE("an op that waits for one grant alone runs once in every replay, its join granted at the replay or later",
          "[graph][sole]") {
  constexpr std::size_t kReplays = 8;
  for (const auto& factory : threadpool_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("sole grants on " + factory.name);
      Engine engine(factory.options());
      const Var a = engine.NewVariable(), b = engine.NewVariable();
      // Per replay: how often each op ran, and the replay whose write of b its reader saw.
      std::vector<std::atomic<int>> read_a(kReplays), wrote_b(kReplays), read_b(kReplays);
      std::vector<std::int64_t> b_seen(kReplays, -2);
      std::int64_t b_data = -1;  // b's data: the replay that last wrote it
      ReplayIndex replay_of(kReplays);
      const Graph graph = engine.Capture([&] {
        engine.Push(  // granted by a's head join alone
            [&](const RunContext& ctx) {
              if (auto k = replay_of(ctx)) read_a[*k].fetch_add(1, std::memory_order_relaxed);
            },
            {a}, {});
        engine.Push(  // granted by b's middle join alone
            [&](const RunContext& ctx) {
              if (auto k = replay_of(ctx)) {
                wrote_b[*k].fetch_add(1, std::memory_order_relaxed);
                b_data = static_cast<std::int64_t>(*k);
              }
            },
            {}, {b});
        engine.Push(  // granted by the writer of b alone
            [&](const RunContext& ctx) {
              if (auto k = replay_of(ctx)) {
                read_b[*k].fetch_add(1, std::memory_order_relaxed);
                b_seen[*k] = b_data;
              }
            },
            {b}, {});
      });
      REQUIRE(graph.size() == 3);
      std::vector<std::unique_ptr<OpGate>> gates;  // alive until the gated ops have run
      std::vector<bool> waited_for_gate;
      for (std::size_t k = 0; k < kReplays; ++k) {
        if (k % 2 == 0) {
          engine.WaitForAll();  // a and b free: the replay's joins are granted as it appends them
          engine.Replay(graph);
          continue;
        }
        // a and b held by a writer at a gate: the joins wait in their queues, and are granted when it completes.
        OpGate& gate = *gates.emplace_back(std::make_unique<OpGate>());
        engine.Push([&gate] { gate.pass(); }, {}, {a, b});
        REQUIRE(gate.reached.wait());
        engine.Replay(graph);
        waited_for_gate.push_back(read_a[k].load(std::memory_order_relaxed) == 0 &&
                                  wrote_b[k].load(std::memory_order_relaxed) == 0);
        gate.open.set();
      }
      engine.WaitForAll();
      CHECK(replay_of.out_of_range() == 0);
      CHECK(waited_for_gate == std::vector<bool>(kReplays / 2, true));
      for (std::size_t k = 0; k < kReplays; ++k) {
        INFO("replay " << k);
        CHECK(read_a[k].load(std::memory_order_relaxed) == 1);
        CHECK(wrote_b[k].load(std::memory_order_relaxed) == 1);
        CHECK(read_b[k].load(std::memory_order_relaxed) == 1);
        CHECK(b_seen[k] == static_cast<std::int64_t>(k));
      }
      for (const auto& gate : gates) CHECK_FALSE(gate->timed_out.load(std::memory_order_relaxed));
    }
  }
}

}  // namespace
}  // namespace depengine::test
