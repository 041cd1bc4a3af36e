// Errors through variables (engine.h, "Errors" and "Waits"): a thrown exception or an error passed to a Completion
// poisons what the op mutates; dependents are skipped and pass it on; no_skip ops run; WaitForVar rethrows once and
// clears its variable; WaitForAll rethrows the first error no wait reported and clears the errors of the calling
// thread's ops; an error no wait rethrows reaches the error sink. Every test runs on every executor. The randomized
// test with several pushers and a monitor is errors_random_test.cpp.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <depengine/engine/engine.h>

#include "test/engine/test_support.h"
#include "test/executors/executor_factories.h"

namespace depengine::test {
namespace {

// Atomics: counters bumped by ops are read by the test thread after a wait (WaitForAll, WaitForVar, WaitForScope), a
// join or the engine's destruction, which orders every op's writes before the read, so they are relaxed.

// ErrorLog::kStderrLines, the default sink's limit (engine.h, EngineOptions::error_sink).
constexpr std::size_t kDefaultSinkLines = 16;

TEST_CASE("a thrown exception poisons the mutated variables; WaitForVar rethrows it once", "[engine][errors]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("thrown errors on " + factory.name);
      Engine engine(factory.options());
      const Var a = engine.NewVariable(), b = engine.NewVariable(), read_only = engine.NewVariable();
      engine.Push([] { throw OpFailure(7); }, {read_only}, {a, b});  // Push itself never throws the op's error
      CHECK(thrown_id([&] { engine.WaitForVar(a); }) == 7);
      CHECK(thrown_id([&] { engine.WaitForVar(a); }) == 0);          // once: a reads clean afterwards
      CHECK(thrown_id([&] { engine.WaitForVar(read_only); }) == 0);  // reads are not poisoned
      CHECK(thrown_id([&] { engine.WaitForVar(b); }) == 7);          // clearing a left b alone
      CHECK(thrown_id([&] { engine.WaitForVar(b); }) == 0);

      // Cleared means usable: an op on a now runs.
      bool ran = false;
      engine.Push([&] { ran = true; }, {a}, {});
      engine.WaitForVar(a);
      CHECK(ran);
      CHECK(thrown_id([&] { engine.WaitForAll(); }) == 0);  // WaitForVar reported it: nothing left to report
    }
  }
}

TEST_CASE("the op's own exception object reaches the wait, unwrapped", "[engine][errors]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("unwrapped errors on " + factory.name);
      Engine engine(factory.options());
      const Var v = engine.NewVariable();
      const std::exception_ptr error = std::make_exception_ptr(std::out_of_range("the op's own"));
      if (factory.takes_async) {
        engine.PushAsync([error](Completion done) { done(error); }, {}, {v});
      } else {
        check_async_refused(engine, v);
        // Thrown by a synchronous op instead: std::rethrow_exception throws the very object that `error` holds.
        engine.Push([error] { std::rethrow_exception(error); }, {}, {v});
      }
      std::exception_ptr caught;
      try {
        engine.WaitForVar(v);
      } catch (const std::out_of_range&) {
        caught = std::current_exception();
      }
      CHECK(caught == error);              // the very exception object, not a copy or a wrapper
      CHECK_NOTHROW(engine.WaitForAll());  // reported once, by WaitForVar
    }
  }
}

TEST_CASE("an error passed to a Completion from another thread poisons like a thrown one", "[engine][errors]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("async errors on " + factory.name);
      Engine engine(factory.options());
      if (!factory.takes_async) {  // thrown errors: the tests around this one
        check_async_refused(engine, engine.NewVariable());
        continue;
      }
      Completer completer;
      const Var a = engine.NewVariable(), b = engine.NewVariable(), c = engine.NewVariable();
      engine.PushAsync(
          [&completer](Completion done) { completer.post([done] { done(std::make_exception_ptr(OpFailure(3))); }); },
          {}, {a});
      // An async function that throws before completing completes its op with that exception.
      engine.PushAsync([](Completion) { throw OpFailure(4); }, {}, {b});
      // One that completes successfully on another thread poisons nothing.
      engine.PushAsync([&completer](Completion done) { completer.post([done] { done(); }); }, {}, {c});
      CHECK(thrown_id([&] { engine.WaitForVar(a); }) == 3);
      CHECK(thrown_id([&] { engine.WaitForVar(b); }) == 4);
      CHECK(thrown_id([&] { engine.WaitForVar(c); }) == 0);
      CHECK(thrown_id([&] { engine.WaitForAll(); }) == 0);  // both reported already
      completer.stop();
    }
  }
}

TEST_CASE("ops that use a poisoned variable are skipped and pass the error on", "[engine][errors]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("skipping on " + factory.name);
      Engine engine(factory.options());
      const Var a = engine.NewVariable(), b = engine.NewVariable(), c = engine.NewVariable(), d = engine.NewVariable();
      std::atomic<int> ran{0};
      auto count = [&ran] { ran.fetch_add(1, std::memory_order_relaxed); };
      engine.Push([] { throw OpFailure(1); }, {}, {a});
      engine.Push(count, {a}, {b});  // reads a poisoned variable: skipped, b inherits the error
      engine.Push(count, {b}, {c});  // and so on down the chain
      engine.Push(count, {}, {a});   // mutating a poisoned variable is a use as well: skipped
      engine.Push(count, {c}, {});   // mutates nothing: skipped, passes the error nowhere
      if (factory.takes_async) {
        engine.PushAsync(
            [&ran](Completion done) {
              ran.fetch_add(1, std::memory_order_relaxed);
              done();
            },
            {c}, {d});
      } else {
        check_async_refused(engine, d);
        engine.Push(count, {c}, {d});  // skipped as well
      }
      engine.Push(count, {}, {engine.NewVariable()});        // independent: runs
      CHECK(thrown_id([&] { engine.WaitForVar(d); }) == 1);  // the async op was skipped, its function never called
      CHECK(thrown_id([&] { engine.WaitForVar(c); }) == 1);
      CHECK(thrown_id([&] { engine.WaitForVar(b); }) == 1);
      CHECK(thrown_id([&] { engine.WaitForVar(a); }) == 1);
      CHECK(thrown_id([&] { engine.WaitForAll(); }) == 0);  // one error, reported (four times: once per variable)
      CHECK(ran.load(std::memory_order_relaxed) == 1);
    }
  }
}

TEST_CASE("no_skip ops run on poisoned variables, which keep their first error", "[engine][errors]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("no_skip on " + factory.name);
      Engine engine(factory.options());
      const Var a = engine.NewVariable(), b = engine.NewVariable();
      PushOptions no_skip;
      no_skip.no_skip = true;
      std::atomic<int> ran{0};
      engine.Push([] { throw OpFailure(1); }, {}, {a});
      engine.Push([&] { ran.fetch_add(1, std::memory_order_relaxed); }, {a}, {b}, no_skip);  // runs
      engine.Push([&] { ran.fetch_add(1, std::memory_order_relaxed); }, {}, {a}, no_skip);   // runs, succeeds
      engine.Push([] { throw OpFailure(2); }, {}, {a}, no_skip);  // runs, fails: a keeps error 1
      CHECK(thrown_id([&] { engine.WaitForVar(b); }) == 0);       // the no_skip op succeeded: b is clean
      CHECK(thrown_id([&] { engine.WaitForVar(a); }) == 1);
      CHECK(ran.load(std::memory_order_relaxed) == 2);
      // Error 2 was raised, and a keeps error 1: no variable carried 2, so no WaitForVar could report it.
      CHECK(thrown_id([&] { engine.WaitForAll(); }) == 2);
    }
  }
}

// Issue 17, item 7: an op's error reached the wait without the op's name.
TEST_CASE("FailedOpName names the op behind an error a wait rethrew, keeping the exception the op's own",
          "[engine][errors]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("failed op names on " + factory.name);
      Engine engine(factory.options());
      const Var loss = engine.NewVariable(), other = engine.NewVariable(), plain = engine.NewVariable();
      engine.Push([] { throw OpFailure(41); }, {}, {loss}, {.name = "loss check, step " + std::to_string(7)});
      engine.Push([] { throw OpFailure(42); }, {}, {other}, {.name = "unwaited"});
      engine.Push([] { throw OpFailure(43); }, {}, {plain});
      std::exception_ptr caught;
      try {
        engine.WaitForVar(loss);
      } catch (const OpFailure&) {  // the op's own type
        caught = std::current_exception();
      }
      REQUIRE(caught != nullptr);
      CHECK(engine.FailedOpName(caught) == std::optional<std::string>("loss check, step 7"));
      try {
        engine.WaitForVar(plain);
      } catch (const OpFailure&) {
        caught = std::current_exception();
      }
      CHECK(engine.FailedOpName(caught) == std::optional<std::string>(""));                // pushed without a name
      CHECK(engine.FailedOpName(std::make_exception_ptr(OpFailure(44))) == std::nullopt);  // not the engine's
      try {
        engine.WaitForAll();  // rethrows the one no wait reported
      } catch (const OpFailure&) {
        caught = std::current_exception();
      }
      CHECK(engine.FailedOpName(caught) == std::optional<std::string>("unwaited"));
    }
  }
}

// Issue 17, item 7: a no_skip op could not tell that it ran despite an input error; issue 48, item 9: nor which input.
TEST_CASE("a no_skip op sees its inputs' error and the variable carrying it in its RunContext; other ops see none",
          "[engine][errors]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("input_error on " + factory.name);
      Engine engine(factory.options());
      const Var bad = engine.NewVariable(), good = engine.NewVariable(), out = engine.NewVariable();
      engine.Push([] { throw OpFailure(31); }, {}, {bad});
      int seen_bad = -2, seen_good = -2, seen_plain = -2;
      auto seen = [](const RunContext& ctx) {
        return ctx.input_error == nullptr ? 0 : thrown_id([&] { std::rethrow_exception(*ctx.input_error); });
      };
      Var bad_var, good_var, plain_var;
      engine.Push(
          [&](const RunContext& ctx) {
            seen_bad = seen(ctx);
            bad_var = ctx.input_error_var;
          },
          {good, bad}, {out}, {.no_skip = true});
      engine.Push(
          [&](const RunContext& ctx) {
            seen_good = seen(ctx);
            good_var = ctx.input_error_var;
          },
          {good}, {out}, {.no_skip = true});
      engine.Push(
          [&](const RunContext& ctx) {
            seen_plain = seen(ctx);
            plain_var = ctx.input_error_var;
          },
          {good}, {out});
      CHECK_NOTHROW(engine.WaitForVar(out));
      CHECK(seen_bad == 31);
      CHECK(bad_var == bad);
      CHECK(seen_good == 0);
      CHECK(good_var.is_null());
      CHECK(seen_plain == 0);
      CHECK(plain_var.is_null());
      CHECK(thrown_id([&] { engine.WaitForVar(bad); }) == 31);
    }
  }
}

TEST_CASE("a variable keeps the first error attached to it until a wait clears it", "[engine][errors]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("first error on " + factory.name);
      Engine engine(factory.options());
      const Var a = engine.NewVariable(), b = engine.NewVariable();
      PushOptions no_skip;
      no_skip.no_skip = true;
      engine.Push([] { throw OpFailure(1); }, {}, {a});
      engine.Push([] {}, {}, {a}, no_skip);                          // a success does not clear it
      engine.Push([] { throw OpFailure(2); }, {}, {a, b}, no_skip);  // a later error does not replace it
      CHECK(thrown_id([&] { engine.WaitForVar(a); }) == 1);
      CHECK(thrown_id([&] { engine.WaitForVar(b); }) == 2);

      // An async op keeps its first error: the completion's, not the exception thrown after it.
      if (factory.takes_async) {
        engine.PushAsync(
            [](Completion done) {
              done(std::make_exception_ptr(OpFailure(5)));
              throw OpFailure(6);
            },
            {}, {a});
        CHECK(thrown_id([&] { engine.WaitForVar(a); }) == 5);
        CHECK(thrown_id([&] { engine.WaitForAll(); }) == 6);  // raised too, and reported by nothing else
      } else {
        check_async_refused(engine, a);
      }
      CHECK(thrown_id([&] { engine.WaitForAll(); }) == 0);
    }
  }
}

TEST_CASE("WaitForAll rethrows the first error raised, sinks the others and clears every variable",
          "[engine][errors]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("WaitForAll errors on " + factory.name);
      SinkLog sunk;
      Engine engine(sunk.attach(factory.options()));
      const Var a = engine.NewVariable(), b = engine.NewVariable(), c = engine.NewVariable();
      PushOptions no_skip;
      no_skip.no_skip = true;
      engine.Push([] { throw OpFailure(1); }, {}, {a, c});
      engine.Push([] { throw OpFailure(2); }, {c}, {b}, no_skip);  // ordered after the first by c
      CHECK(thrown_id([&] { engine.WaitForAll(); }) == 1);
      CHECK(sunk.ids() == std::vector<int>{2});              // cleared without being rethrown: the sink's
      CHECK(thrown_id([&] { engine.WaitForAll(); }) == 0);   // reported once
      CHECK(thrown_id([&] { engine.WaitForVar(a); }) == 0);  // every variable cleared
      CHECK(thrown_id([&] { engine.WaitForVar(b); }) == 0);
      CHECK(thrown_id([&] { engine.WaitForVar(c); }) == 0);
      std::atomic<int> ran{0};
      engine.Push([&] { ran.fetch_add(1, std::memory_order_relaxed); }, {a, b, c}, {a});  // no longer skipped
      engine.WaitForAll();
      CHECK(ran.load(std::memory_order_relaxed) == 1);
    }
  }
}

TEST_CASE("an error of an op that mutates nothing still reaches WaitForAll", "[engine][errors]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("unattached errors on " + factory.name);
      SinkLog sunk;
      Engine engine(sunk.attach(factory.options()));
      const Var a = engine.NewVariable();
      engine.Push([] { throw OpFailure(8); }, {a}, {});
      engine.Push([] { throw OpFailure(9); }, {}, {});
      CHECK(thrown_id([&] { engine.WaitForVar(a); }) == 0);  // nothing attached to a read
      const int first = thrown_id([&] { engine.WaitForAll(); });
      CHECK((first == 8 || first == 9));                  // unordered ops: either may be first
      CHECK(sunk.ids() == std::vector<int>{17 - first});  // and the other is the sink's
      CHECK(thrown_id([&] { engine.WaitForAll(); }) == 0);
    }
  }
}

TEST_CASE("WaitForVar clears only its variable, and an error a wait reported is not WaitForAll's again",
          "[engine][errors]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("clearing on " + factory.name);
      SinkLog sunk;
      Engine engine(sunk.attach(factory.options()));
      const Var a = engine.NewVariable(), b = engine.NewVariable();
      engine.Push([] { throw OpFailure(1); }, {}, {a});
      engine.Push([] { throw OpFailure(2); }, {a}, {b}, PushOptions{.no_skip = true});
      CHECK(thrown_id([&] { engine.WaitForVar(a); }) == 1);
      std::atomic<int> ran{0};
      engine.Push([&] { ran.fetch_add(1, std::memory_order_relaxed); }, {b}, {});  // b is still poisoned: skipped
      CHECK(thrown_id([&] { engine.WaitForVar(b); }) == 2);
      CHECK(ran.load(std::memory_order_relaxed) == 0);
      CHECK(thrown_id([&] { engine.WaitForAll(); }) == 0);
      CHECK(sunk.ids().empty());
    }
  }
}

// The first scenario: WaitForAll used to rethrow E1 again, and E2 was never reported.
TEST_CASE("WaitForAll rethrows an error raised after a WaitForVar reported another (a deleter's)", "[engine][errors]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("deleter errors on " + factory.name);
      SinkLog sunk;
      Engine engine(sunk.attach(factory.options()));
      const Var x = engine.NewVariable();
      engine.Push([] { throw OpFailure(1); }, {}, {x});
      CHECK(thrown_id([&] { engine.WaitForVar(x); }) == 1);
      engine.DeleteVariable(engine.NewVariable(), [] { throw OpFailure(2); });
      CHECK(thrown_id([&] { engine.WaitForAll(); }) == 2);
      CHECK(thrown_id([&] { engine.WaitForAll(); }) == 0);
      CHECK(sunk.ids().empty());
    }
  }
}

// The second and third scenarios: one error of two reported by a wait, or none.
TEST_CASE("every error no wait reported reaches the error sink at destruction, with its op's name",
          "[engine][errors][shutdown]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("sink at shutdown on " + factory.name);
      for (const bool wait_first : {false, true}) {
        CAPTURE(wait_first);
        SinkLog sunk;
        {
          Engine engine(sunk.attach(factory.options()));
          const Var x = engine.NewVariable(), y = engine.NewVariable(), z = engine.NewVariable();
          engine.Push([] { throw OpFailure(1); }, {}, {x}, {.name = "first"});
          engine.Push([] { throw OpFailure(2); }, {}, {y}, {.name = "second op, with a name longer than forty chars"});
          engine.Push([] { throw OpFailure(3); }, {}, {z});
          if (wait_first) CHECK(thrown_id([&] { engine.WaitForVar(x); }) == 1);
        }
        std::vector<SinkLog::Received> received = sunk.received();
        std::sort(received.begin(), received.end(), [](const auto& l, const auto& r) { return l.id < r.id; });
        REQUIRE(received.size() == (wait_first ? 2U : 3U));
        const std::size_t at = wait_first ? 0 : 1;
        if (!wait_first) CHECK((received[0].id == 1 && received[0].op == "first"));
        CHECK(received[at].id == 2);
        CHECK(received[at].op == "second op, with a name longer than forty chars");
        CHECK(received[at].what == "op failure 2");
        CHECK((received[at + 1].id == 3 && received[at + 1].op.empty()));
        for (const auto& error : received) CHECK(error.when == UnreportedError::When::kAtShutdown);
      }
    }
  }
}

TEST_CASE("the default error sink writes every unreported error to stderr, naming its op, then counts the rest",
          "[engine][errors][shutdown]") {
  const ExecutorFactory& factory = executor_factories().front();
  Watchdog watchdog("default sink");
  StderrCapture capture;
  {
    Engine engine(factory.options());
    engine.Push([] { throw OpFailure(101); }, {}, {engine.NewVariable()}, {.name = "loss check"});
    engine.Push([] { throw 42; }, {}, {engine.NewVariable()}, {.name = "int thrower"});
    for (int i = 0; i < 20; ++i) engine.Push([i] { throw OpFailure(200 + i); }, {}, {});
  }
  const std::string text = capture.finish();
  CHECK_THAT(text, Catch::Contains("op 'loss check' failed") && Catch::Contains("op failure 101"));
  CHECK_THAT(text, Catch::Contains("op 'int thrower' failed") && Catch::Contains("not derived from std::exception"));
  CHECK(std::count(text.begin(), text.end(), '\n') == static_cast<long>(kDefaultSinkLines + 1));
  CHECK_THAT(text, Catch::Contains("6 more errors"));
}

TEST_CASE("an exception of a type the engine cannot print still reaches the sink, named as such",
          "[engine][errors][shutdown]") {
  const ExecutorFactory& factory = executor_factories().front();
  Watchdog watchdog("non-std exception");
  SinkLog sunk;
  {
    Engine engine(sunk.attach(factory.options()));
    engine.Push([] { throw 42; }, {}, {engine.NewVariable()}, {.name = "int thrower"});
  }
  const std::vector<SinkLog::Received> received = sunk.received();
  REQUIRE(received.size() == 1);
  CHECK(received[0].id == -1);
  CHECK(received[0].op == "int thrower");
  CHECK_THAT(received[0].what, Catch::Contains("not derived from std::exception"));
}

// The fifth scenario: WaitForAll returned between the completion and the throw, and the next WaitForAll got
// the error instead of its own.
TEST_CASE("an async op that throws after completing is in flight until it returns: its error is this WaitForAll's",
          "[engine][errors][waits]") {
  for (const auto& factory : executor_factories()) {
    if (!factory.takes_async) continue;
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("throw after completion on " + factory.name);
      Engine engine(factory.options());
      const Var v = engine.NewVariable();
      for (int round = 1; round <= 30; ++round) {
        CAPTURE(round);
        engine.PushAsync(
            [round](Completion done) {
              done();
              linger(256);  // a cleanup that takes a little while, then fails
              throw OpFailure(round);
            },
            {}, {v});
        CHECK(thrown_id([&] { engine.WaitForAll(); }) == round);
        CHECK(thrown_id([&] { engine.WaitForVar(v); }) == 0);  // it completed successfully: v is clean
      }
    }
  }
}

// The rule for several threads: a WaitForAll clears the errors of its own thread's ops only.
TEST_CASE("one thread's WaitForAll reports another thread's error without taking it from that thread's WaitForVar",
          "[engine][errors][concurrency]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("errors across threads on " + factory.name);
      SinkLog sunk;
      Engine engine(sunk.attach(factory.options()));
      const Var mine = engine.NewVariable(), theirs = engine.NewVariable();
      engine.Push([] { throw OpFailure(1); }, {}, {mine});
      std::thread([&] {
        CHECK(thrown_id([&] { engine.WaitForAll(); }) == 1);  // reported to the other thread, not cleared
        engine.Push([] { throw OpFailure(2); }, {}, {theirs});
        CHECK(thrown_id([&] { engine.WaitForAll(); }) == 2);  // its own: cleared
        CHECK(thrown_id([&] { engine.WaitForVar(theirs); }) == 0);
      }).join();
      CHECK(thrown_id([&] { engine.WaitForVar(mine); }) == 1);  // still there for the thread that pushed the op
      CHECK(thrown_id([&] { engine.WaitForAll(); }) == 0);
      CHECK(sunk.ids().empty());
    }
  }
}

TEST_CASE("an op pushed from inside an op belongs to the thread that pushed the outer op", "[engine][errors]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("nested owners on " + factory.name);
      Engine engine(factory.options());
      const Var outer = engine.NewVariable(), inner = engine.NewVariable();
      engine.Push([&engine, inner] { engine.Push([] { throw OpFailure(4); }, {}, {inner}); }, {}, {outer});
      CHECK(thrown_id([&] { engine.WaitForAll(); }) == 4);
      CHECK(thrown_id([&] { engine.WaitForVar(inner); }) == 0);  // cleared by this thread's WaitForAll
    }
  }
}

}  // namespace
}  // namespace depengine::test
