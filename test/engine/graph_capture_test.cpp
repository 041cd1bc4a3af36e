// Capture (Engine::Capture, engine/graph.h): what a capture records and what it refuses.
//
// - Misuse: every Error that Capture documents, with a message naming the call, and the capture going on after a
//   refused call that the body caught; a graph larger than max_in_flight; a throwing body captures nothing; on an
//   engine with a stream executor a capture holds stream ops only; Capture from inside an op is refused.
// - Only the capturing thread's pushes are captured: pushes made by ops running during a capture (on a worker, or on
//   the capturing thread itself) are ordinary pushes, and Capturing() says where a capture is on.
//
// Scope: the CPU executors (inline, thread pools of 1 and 2 workers); the gated tests on the pools only.
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdio>
#include <string>
#include <thread>

#include <depengine/engine/engine.h>
#include <depengine/engine/fence.h>

#include "test/engine/graph_test_support.h"
#include "test/engine/trace_file.h"

namespace depengine::test {
namespace {

// Atomics: the counters here are bumped by ops and read by the test thread after a wait (WaitForAll, WaitForVar,
// WaitForScope) or a join, which orders every op's writes before the read, so they are relaxed.

using Catch::Contains;

TEST_CASE("inside a Capture, what a graph cannot hold throws Error naming the call; the capture goes on",
          "[graph][misuse]") {
  for (const auto& factory : cpu_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("refused calls inside a capture on " + factory.name);
      Engine engine(factory.options());
      const Var v = engine.NewVariable(), w = engine.NewVariable(), u = engine.NewVariable();
      const Var dead = engine.NewVariable();
      engine.DeleteVariable(dead);
      engine.WaitForAll();  // nothing in flight from here to the capture's end
      Engine stranger(factory.options());
      const Var foreign = stranger.NewVariable();
      // Already at 1: a wait on it that was wrongly accepted would return instead of hanging the test.
      Timeline reached;
      reached.signal(1, {});
      CancelScope scope;
      const std::string trace = temporary_trace_path("graph-misuse");
      engine.StartTrace(trace);
      std::atomic<int> refused_ran{0}, other_ran{0};
      int captured_ran = 0;  // written by the graph's ops, which v orders
      bool nested_body_ran = false;
      Graph other =
          engine.Capture([&] { engine.Push([&] { other_ran.fetch_add(1, std::memory_order_relaxed); }, {}, {u}); });
      REQUIRE(other.size() == 1);

      Graph graph = engine.Capture([&] {
        engine.Push([&] { ++captured_ran; }, {}, {v});
        CHECK_THAT(error_message([&] { engine.DeleteVariable(v); }), RefusedInCapture("DeleteVariable"));
        CHECK_THAT(error_message(
                       [&] { engine.DeleteVariable(v, [&] { refused_ran.fetch_add(1, std::memory_order_relaxed); }); }),
                   RefusedInCapture("DeleteVariable"));
        PushOptions waits;
        waits.wait_fences = {Fence{&reached, 1}};
        CHECK_THAT(error_message([&] {
                     engine.Push([&] { refused_ran.fetch_add(1, std::memory_order_relaxed); }, {}, {v}, waits);
                   }),
                   Contains("fence", Catch::CaseSensitive::No) && Contains("capture", Catch::CaseSensitive::No));
        PushOptions signals;
        signals.signal_fences = {Fence{&reached, 2}};
        CHECK_THAT(error_message([&] {
                     engine.Push([&] { refused_ran.fetch_add(1, std::memory_order_relaxed); }, {}, {v}, signals);
                   }),
                   Contains("fence", Catch::CaseSensitive::No) && Contains("capture", Catch::CaseSensitive::No));
        CHECK_THAT(error_message([&] { engine.WaitForVar(v); }), RefusedInCapture("WaitForVar"));
        CHECK_THAT(error_message([&] { engine.WaitForAll(); }), RefusedInCapture("WaitForAll"));
        CHECK_THAT(error_message([&] { engine.WaitForFence(Fence{&reached, 1}); }), RefusedInCapture("WaitForFence"));
        CHECK_THAT(error_message([&] { engine.WaitForScope(scope); }), RefusedInCapture("WaitForScope"));
        CHECK_THAT(error_message([&] { engine.StopTrace(); }), RefusedInCapture("StopTrace"));
        CHECK_THAT(error_message([&] { engine.Replay(other); }), RefusedInCapture("Replay"));
        CHECK_THAT(error_message([&] { (void)engine.Capture([&] { nested_body_ran = true; }); }), Contains("Capture"));
        // A push checks its arguments as usual.
        CHECK_THROWS_AS(engine.Push([&] { refused_ran.fetch_add(1, std::memory_order_relaxed); }, {}, {Var{}}), Error);
        CHECK_THROWS_AS(engine.Push([&] { refused_ran.fetch_add(1, std::memory_order_relaxed); }, {}, {dead}), Error);
        CHECK_THROWS_AS(engine.Push([&] { refused_ran.fetch_add(1, std::memory_order_relaxed); }, {}, {foreign}),
                        Error);
        CHECK_THROWS_AS(engine.Push([&] { refused_ran.fetch_add(1, std::memory_order_relaxed); }, {}, {v},
                                    {.context = {.executor = 7}}),
                        Error);
        // Each refused call captured nothing and left the capture on: this push is captured too.
        engine.Push([&] { ++captured_ran; }, {v}, {w});
      });
      CHECK(graph.size() == 2);
      CHECK(captured_ran == 0);
      CHECK_FALSE(nested_body_ran);
      CHECK(engine.InFlight() == 0);
      CHECK(scope.pending() == 0);
      CHECK_NOTHROW(engine.StopTrace());  // the trace was still on: the refused StopTrace did nothing
      std::remove(trace.c_str());

      engine.Replay(graph);
      engine.WaitForAll();
      CHECK(captured_ran == 2);
      CHECK(refused_ran.load(std::memory_order_relaxed) == 0);
      CHECK(other_ran.load(std::memory_order_relaxed) == 0);
      CHECK(engine.Version(v) == 1);  // v is alive (the refused deletions did nothing) and mutated once
      CHECK(engine.Version(w) == 1);
      CHECK(engine.Version(u) == 0);
    }
  }
}

TEST_CASE("with a stream executor a capture holds stream ops only; Capture from inside an op is refused",
          "[graph][misuse]") {
  SECTION("a CPU op inside a capture on an engine with a stream executor") {
    Watchdog watchdog("CPU op in a capture on a stream engine");
    Engine engine(mixed_options({inline_factory(), host_stream_factory()}));
    const Var v = engine.NewVariable();
    int ran = 0;
    std::string message;
    const Graph graph = engine.Capture([&] { message = error_message([&] { engine.Push([&] { ++ran; }, {}, {v}); }); });
    CHECK_THAT(message, Contains("Push inside Capture") && Contains("stream ops only"));
    CHECK(graph.empty());  // the refused push captured nothing
    // Not left capturing: a push runs.
    engine.Push([&] { ++ran; }, {}, {v});
    engine.WaitForAll();
    CHECK(ran == 1);
  }
  SECTION("from inside a running op") {
    for (const auto& factory : cpu_factories()) {
      DYNAMIC_SECTION(factory.name) {
        Watchdog watchdog("Capture inside an op on " + factory.name);
        Engine engine(factory.options());
        const Var v = engine.NewVariable();
        std::string message;
        bool body_ran = false;
        engine.Push([&] { message = error_message([&] { (void)engine.Capture([&] { body_ran = true; }); }); }, {}, {v});
        engine.WaitForAll();
        CHECK_THAT(message, Contains("Capture"));
        CHECK_FALSE(body_ran);
      }
    }
  }
}

TEST_CASE("Capture refuses a graph larger than max_in_flight; a throwing body captures nothing", "[graph][misuse]") {
  for (const auto& factory : cpu_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("Capture limits on " + factory.name);
      Engine engine(factory.options(4));
      const Var v = engine.NewVariable();
      std::atomic<int> ran{0};
      auto push_n = [&](int n) {
        for (int i = 0; i < n; ++i) engine.Push([&] { ran.fetch_add(1, std::memory_order_relaxed); }, {}, {v});
      };
      CHECK_THAT(error_message([&] { (void)engine.Capture([&] { push_n(5); }); }),
                 Contains("Capture") && Contains("max_in_flight"));
      Graph fits = engine.Capture([&] { push_n(4); });
      CHECK(fits.size() == 4);
      engine.WaitForAll();
      CHECK(ran.load(std::memory_order_relaxed) == 0);  // captured ops do not run at capture
      engine.Replay(fits);                              // admitted whole, at the bound
      engine.Replay(fits);
      engine.WaitForAll();
      CHECK(ran.load(std::memory_order_relaxed) == 8);
      CHECK(engine.Version(v) == 8);

      CHECK(thrown_id([&] {
              (void)engine.Capture([&] {
                push_n(2);
                throw OpFailure(5);
              });
            }) == 5);
      engine.WaitForAll();
      CHECK(ran.load(std::memory_order_relaxed) == 8);  // nothing of the abandoned capture ran
      CHECK(engine.InFlight() == 0);
      // Not left capturing: a push runs, and a new capture works.
      push_n(1);
      engine.WaitForAll();
      CHECK(ran.load(std::memory_order_relaxed) == 9);
      Graph again = engine.Capture([&] { push_n(1); });
      CHECK(again.size() == 1);
      engine.Replay(again);
      engine.WaitForAll();
      CHECK(ran.load(std::memory_order_relaxed) == 10);
      CHECK(engine.Version(v) == 10);
    }
  }
}

// An op running while the test thread captures pushes an op: that push is not captured (it is the op's, not the
// capturing thread's), and runs once as an ordinary op. On the pools: the pushing op must run during the capture.
TEST_CASE("pushes made by ops running during a capture are not captured", "[graph][nested]") {
  for (const auto& factory : threadpool_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("pushes from ops during a capture on " + factory.name);
      Engine engine(factory.options());
      const Var a = engine.NewVariable(), b = engine.NewVariable();
      OpGate gate;
      Flag pushed;
      std::atomic<int> child_ran{0}, captured_ran{0};
      engine.Push(
          [&] {
            gate.pass();
            engine.Push([&] { child_ran.fetch_add(1, std::memory_order_relaxed); }, {}, {a});
            pushed.set();
          },
          {}, {engine.NewVariable()});
      bool reached = false, child_pushed = false;
      Graph graph = engine.Capture([&] {
        reached = gate.reached.wait();
        gate.open.set();
        child_pushed = pushed.wait();
        engine.Push([&] { captured_ran.fetch_add(1, std::memory_order_relaxed); }, {}, {b});
      });
      engine.WaitForAll();
      CHECK(reached);
      CHECK(child_pushed);
      CHECK(graph.size() == 1);
      CHECK(child_ran.load(std::memory_order_relaxed) == 1);
      CHECK(captured_ran.load(std::memory_order_relaxed) == 0);
      engine.Replay(graph);
      engine.WaitForAll();
      CHECK(child_ran.load(std::memory_order_relaxed) == 1);
      CHECK(captured_ran.load(std::memory_order_relaxed) == 1);
    }
  }
}

// The same on the capturing thread itself: a Completion the body calls completes an op whose successor, on the inline
// executor, runs there and then (inline_executor.h). That successor is an op running meanwhile, not the body: it runs
// now, and what it pushes is an ordinary push, not captured. (On the pools it runs on a worker.)
TEST_CASE("an op that runs on the capturing thread during the capture pushes ordinary ops", "[graph][nested]") {
  for (const auto& factory : cpu_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("ops run by the capturing thread on " + factory.name);
      Engine engine(factory.options());
      const Var v = engine.NewVariable(), w = engine.NewVariable(), c = engine.NewVariable();
      std::atomic<int> parent_ran{0}, child_ran{0}, captured_ran{0};
      HeldOp held(engine, {}, {v});
      engine.Push(
          [&] {
            parent_ran.fetch_add(1, std::memory_order_relaxed);
            engine.Push([&] { child_ran.fetch_add(1, std::memory_order_relaxed); }, {}, {w});
          },
          {v}, {});
      bool released = false;
      Graph graph = engine.Capture([&] {
        released = held.release();  // on the inline executor the parent runs here, inside the body
        engine.Push([&] { captured_ran.fetch_add(1, std::memory_order_relaxed); }, {}, {c});
      });
      engine.WaitForAll();
      CHECK(released);
      CHECK(parent_ran.load(std::memory_order_relaxed) == 1);
      CHECK(child_ran.load(std::memory_order_relaxed) == 1);
      CHECK(graph.size() == 1);
      CHECK(captured_ran.load(std::memory_order_relaxed) == 0);
      engine.Replay(graph);
      engine.WaitForAll();
      CHECK(parent_ran.load(std::memory_order_relaxed) == 1);
      CHECK(child_ran.load(std::memory_order_relaxed) == 1);
      CHECK(captured_ran.load(std::memory_order_relaxed) == 1);
    }
  }
}

TEST_CASE("Capturing() is true on the capturing thread inside the body only", "[graph][capturing]") {
  for (const auto& factory : threadpool_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("Capturing() on " + factory.name);
      Engine engine(factory.options());
      Engine other(factory.options());
      const Var v = engine.NewVariable();
      CHECK_FALSE(engine.Capturing());
      bool inside = false, other_engine = true, other_thread = true;
      Flag op_done;
      std::atomic<bool> in_op{true};
      Graph graph = engine.Capture([&] {
        inside = engine.Capturing();
        other_engine = other.Capturing();
        std::thread([&] { other_thread = engine.Capturing(); }).join();
        // An op running on a worker meanwhile (a push from another thread, which is not captured).
        std::thread([&] {
          engine.Push(
              [&] {
                // relaxed: op_done's release publishes it.
                in_op.store(engine.Capturing(), std::memory_order_relaxed);
                op_done.set();
              },
              {}, {engine.NewVariable()});
        }).join();
        (void)op_done.wait();
        engine.Push([] {}, {}, {v});
      });
      CHECK(inside);
      CHECK_FALSE(other_engine);
      CHECK_FALSE(other_thread);
      CHECK(op_done.is_set());
      CHECK_FALSE(in_op.load(std::memory_order_relaxed));  // relaxed: op_done.wait()'s acquire ordered the store
      CHECK_FALSE(engine.Capturing());
      CHECK(graph.size() == 1);
      try {
        (void)engine.Capture([&] { throw OpFailure(1); });
      } catch (const OpFailure&) {
      }
      CHECK_FALSE(engine.Capturing());  // an abandoned capture is over too
      engine.WaitForAll();
    }
  }
}

}  // namespace
}  // namespace depengine::test
