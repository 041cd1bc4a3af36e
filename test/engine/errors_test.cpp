// Errors through variables (engine.h, "Errors" and "Waits"): a thrown exception or an error passed to a Completion
// poisons what the op mutates; dependents are skipped and pass it on; no_skip ops run; WaitForVar rethrows once and
// clears its variable; WaitForAll rethrows the first error and clears every variable. Every test runs on every
// executor.
#include <atomic>
#include <catch2/catch.hpp>
#include <exception>
#include <stdexcept>
#include <vector>

#include "engine/engine.h"
#include "test/engine/test_support.h"
#include "test/executors/executor_factories.h"

namespace depengine::test {
namespace {

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
      CHECK(thrown_id([&] { engine.WaitForAll(); }) == 7);  // the first error since the last WaitForAll
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
      CHECK(caught == error);  // the very exception object, not a copy or a wrapper
      // WaitForAll reports it too: it is the first error since the last WaitForAll.
      CHECK_THROWS_AS(engine.WaitForAll(), std::out_of_range);
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
      CHECK(thrown_id([&] { engine.WaitForAll(); }) != 0);
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
      CHECK(thrown_id([&] { engine.WaitForAll(); }) == 1);
      CHECK(ran.load() == 1);
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
      CHECK(ran.load() == 2);
      CHECK(thrown_id([&] { engine.WaitForAll(); }) == 1);
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
      } else {
        check_async_refused(engine, a);
      }
      (void)thrown_id([&] { engine.WaitForAll(); });
    }
  }
}

TEST_CASE("WaitForAll rethrows the first error raised and clears every variable", "[engine][errors]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("WaitForAll errors on " + factory.name);
      Engine engine(factory.options());
      const Var a = engine.NewVariable(), b = engine.NewVariable(), c = engine.NewVariable();
      PushOptions no_skip;
      no_skip.no_skip = true;
      engine.Push([] { throw OpFailure(1); }, {}, {a, c});
      engine.Push([] { throw OpFailure(2); }, {c}, {b}, no_skip);  // ordered after the first by c
      CHECK(thrown_id([&] { engine.WaitForAll(); }) == 1);
      CHECK(thrown_id([&] { engine.WaitForAll(); }) == 0);   // reported once
      CHECK(thrown_id([&] { engine.WaitForVar(a); }) == 0);  // every variable cleared
      CHECK(thrown_id([&] { engine.WaitForVar(b); }) == 0);
      CHECK(thrown_id([&] { engine.WaitForVar(c); }) == 0);
      std::atomic<int> ran{0};
      engine.Push([&] { ran.fetch_add(1, std::memory_order_relaxed); }, {a, b, c}, {a});  // no longer skipped
      engine.WaitForAll();
      CHECK(ran.load() == 1);
    }
  }
}

TEST_CASE("an error of an op that mutates nothing still reaches WaitForAll", "[engine][errors]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("unattached errors on " + factory.name);
      Engine engine(factory.options());
      const Var a = engine.NewVariable();
      engine.Push([] { throw OpFailure(8); }, {a}, {});
      engine.Push([] { throw OpFailure(9); }, {}, {});
      CHECK(thrown_id([&] { engine.WaitForVar(a); }) == 0);  // nothing attached to a read
      const int first = thrown_id([&] { engine.WaitForAll(); });
      CHECK((first == 8 || first == 9));  // unordered ops: either may be first
      CHECK(thrown_id([&] { engine.WaitForAll(); }) == 0);
    }
  }
}

TEST_CASE("WaitForVar clears only its variable; an error it reported is still WaitForAll's first", "[engine][errors]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("clearing on " + factory.name);
      Engine engine(factory.options());
      const Var a = engine.NewVariable(), b = engine.NewVariable();
      engine.Push([] { throw OpFailure(1); }, {}, {a});
      engine.Push([] { throw OpFailure(2); }, {a}, {b}, PushOptions{.no_skip = true});
      CHECK(thrown_id([&] { engine.WaitForVar(a); }) == 1);
      std::atomic<int> ran{0};
      engine.Push([&] { ran.fetch_add(1, std::memory_order_relaxed); }, {b}, {});  // b is still poisoned: skipped
      CHECK(thrown_id([&] { engine.WaitForVar(b); }) == 2);
      CHECK(ran.load() == 0);
      // WaitForAll reports the first error raised since the last WaitForAll, even one WaitForVar reported.
      CHECK(thrown_id([&] { engine.WaitForAll(); }) == 1);
    }
  }
}

}  // namespace
}  // namespace depengine::test
