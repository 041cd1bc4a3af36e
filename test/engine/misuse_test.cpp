// Misuse of the API is an Error raised where it happens, leaving the engine unchanged (engine.h, errors.h): bad
// options, null, deleted and foreign variables, an unknown executor, a completion called twice.
#include <atomic>
#include <catch2/catch.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include <depengine/engine/engine.h>
#include <depengine/executors/threadpool/threadpool_executor.h>

#include "test/engine/test_support.h"
#include "test/executors/executor_factories.h"

namespace depengine::test {
namespace {

// Atomics: counters bumped by ops are read by the test thread after a wait (WaitForAll, WaitForVar, WaitForScope), a
// join or the engine's destruction, which orders every op's writes before the read, so they are relaxed.

TEST_CASE("bad EngineOptions are rejected", "[engine][misuse]") {
  CHECK_THROWS_AS(Engine(EngineOptions{}), Error);  // no executor
  EngineOptions null_executor;
  null_executor.executors.push_back(nullptr);
  CHECK_THROWS_AS(Engine(std::move(null_executor)), Error);
  EngineOptions some_null = inline_factory().options();
  some_null.executors.push_back(nullptr);
  CHECK_THROWS_AS(Engine(std::move(some_null)), Error);
  CHECK_THROWS_AS(Engine(inline_factory().options(0)), Error);  // max_in_flight 0
  CHECK_THROWS_AS(Engine(threadpool_factory(1).options(0)), Error);
}

// Every entry point that takes a Var, given a bad one, throws Error and pushes nothing.
template <class Check>
void for_each_var_entry_point(Engine& engine, const Var& bad, const Var& good, Check&& check) {
  check([&] { engine.Push([] {}, {bad}, {}); });
  check([&] { engine.Push([] {}, {good}, {bad}); });
  check([&] { engine.Push([] {}, {good, bad, good}, {good}); });
  check([&] { engine.PushAsync([](Completion done) { done(); }, {bad}, {good}); });
  check([&] { engine.DeleteVariable(bad); });
  check([&] { engine.DeleteVariable(bad, [] {}); });
  check([&] { engine.WaitForVar(bad); });
  check([&] { (void)engine.Version(bad); });
}

TEST_CASE("null, deleted and foreign variables are rejected, leaving the engine unchanged", "[engine][misuse]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("bad variables on " + factory.name);
      Engine engine(factory.options());
      Engine other(factory.options());
      const Var good = engine.NewVariable();
      const Var deleted = engine.NewVariable();
      engine.DeleteVariable(deleted);
      engine.WaitForAll();
      std::optional<Var> from_destroyed_engine;
      {
        Engine gone(inline_factory().options());
        from_destroyed_engine = gone.NewVariable();
      }
      const Var bad_vars[] = {Var{}, deleted, other.NewVariable(), *from_destroyed_engine};
      int wrong = 0;
      for (const Var& bad : bad_vars) {
        for_each_var_entry_point(engine, bad, good, [&](auto&& call) {
          try {
            call();
            ++wrong;  // accepted
          } catch (const Error&) {
          } catch (...) {
            ++wrong;  // the wrong exception
          }
        });
      }
      CHECK(wrong == 0);
      CHECK(Var{}.is_null());
      CHECK_FALSE(good.is_null());
      // Nothing was pushed: good is idle, at version 0, and no op ran or is in flight.
      CHECK(engine.InFlight() == 0);
      CHECK(engine.Version(good) == 0);
      engine.WaitForVar(good);
      engine.WaitForAll();
      bool ran = false;
      engine.Push([&] { ran = true; }, {good}, {good});
      engine.WaitForAll();
      CHECK(ran);
      CHECK(engine.Version(good) == 1);
    }
  }
}

// A slot's next life beside a handle of its last one, in one push: the variable is named twice, and one of the two
// handles is dead, whichever of them the lists name first (a push folds the two into one use; the fold must not keep
// the live one's and drop the dead one's). A deleted variable's slot is the next one made (the table's free list).
TEST_CASE("a push naming a slot by a dead handle and a live one is rejected, in either order", "[engine][misuse]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("dead and live handles of one slot on " + factory.name);
      Engine engine(factory.options());
      const Var last_life = engine.NewVariable();
      engine.DeleteVariable(last_life);
      engine.WaitForAll();
      const Var next_life = engine.NewVariable();
      bool ran = false;
      auto op = [&] { ran = true; };
      CHECK_THROWS_AS(engine.Push(op, {last_life}, {next_life}), Error);
      CHECK_THROWS_AS(engine.Push(op, {next_life}, {last_life}), Error);
      CHECK_THROWS_AS(engine.Push(op, {next_life, last_life}, {}), Error);
      CHECK_THROWS_AS(engine.Push(op, {}, {next_life, last_life}), Error);
      engine.WaitForAll();
      CHECK_FALSE(ran);
      CHECK(engine.InFlight() == 0);
      CHECK(engine.Version(next_life) == 0);
      engine.Push(op, {next_life}, {next_life});
      engine.WaitForAll();
      CHECK(ran);
      CHECK(engine.Version(next_life) == 1);
    }
  }
}

// Issue 48, item 9: a null function pointer segfaulted when the op ran, an empty std::function surfaced as
// bad_function_call at the wait.
TEST_CASE("an empty function is refused at the push, leaving the engine unchanged", "[engine][misuse]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("empty functions on " + factory.name);
      Engine engine(factory.options());
      const Var v = engine.NewVariable();
      void (*null_op)() = nullptr;
      void (*null_ctx_op)(const RunContext&) = nullptr;
      auto refused = Catch::Contains("the function is empty");
      CHECK_THROWS_WITH(engine.Push(null_op, {}, {v}), Catch::Contains("Push") && refused);
      CHECK_THROWS_WITH(engine.Push(null_ctx_op, {v}, {}), refused);
      CHECK_THROWS_WITH(engine.Push(std::function<void()>(), {}, {v}), refused);
      const std::function<void(const RunContext&)> empty_ctx;
      CHECK_THROWS_WITH(engine.Push(empty_ctx, {}, {v}), refused);
      void (*null_async)(Completion) = nullptr;
      CHECK_THROWS_WITH(engine.PushAsync(null_async, {}, {v}), Catch::Contains("PushAsync") && refused);
      CHECK_THROWS_WITH(engine.PushAsync(std::function<void(Completion)>(), {}, {v}), refused);
      CHECK_THROWS_WITH(engine.DeleteVariable(v, std::function<void()>()),
                        Catch::Contains("DeleteVariable") && refused);
      CHECK(engine.InFlight() == 0);
      // A function that is not empty, named directly or held by a std::function, is taken.
      int ran = 0;
      engine.Push(std::function<void()>([&ran] { ++ran; }), {}, {v});
      engine.WaitForVar(v);  // v was not deleted, and carries no error
      CHECK(ran == 1);
      CHECK(engine.Version(v) == 1);
    }
  }
}

TEST_CASE("an unknown executor index is rejected", "[engine][misuse]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Engine engine(factory.options());
      const Var v = engine.NewVariable();
      PushOptions bad;
      bad.context.executor = 1;
      std::atomic<int> ran{0};
      CHECK_THROWS_AS(engine.Push([&] { ran.fetch_add(1, std::memory_order_relaxed); }, {}, {v}, bad), Error);
      CHECK_THROWS_AS(engine.PushAsync(
                          [&](Completion done) {
                            ran.fetch_add(1, std::memory_order_relaxed);
                            done();
                          },
                          {v}, {}, bad),
                      Error);
      CHECK_THROWS_AS(engine.DeleteVariable(
                          v, [&] { ran.fetch_add(1, std::memory_order_relaxed); }, bad),
                      Error);
      CHECK_THROWS_AS(engine.executor(1), Error);
      CHECK_NOTHROW(engine.executor(0));
      engine.WaitForAll();
      CHECK(ran.load(std::memory_order_relaxed) == 0);
      CHECK(engine.InFlight() == 0);
      CHECK(engine.Version(v) == 0);
      engine.DeleteVariable(v);  // v survived the rejected deletion
    }
  }
}

// executor_factories.h, takes_async: an executor that takes async ops says so by not issuing ahead, and runs them;
// one that does not (a stream executor) refuses PushAsync with an Error that says why, before anything is pushed.
TEST_CASE("PushAsync is taken, or refused with Error and nothing pushed, as the executor says",
          "[engine][misuse][async]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("PushAsync taken or refused on " + factory.name);
      Engine engine(factory.options());
      CHECK(engine.executor(0).issues_ahead() == !factory.takes_async);
      const Var v = engine.NewVariable();
      std::atomic<int> ran{0};
      auto push_async = [&] {
        engine.PushAsync(
            [&ran](Completion done) {
              ran.fetch_add(1, std::memory_order_relaxed);
              done();
            },
            {}, {v});
      };
      if (factory.takes_async) {
        push_async();
        engine.WaitForVar(v);
        CHECK(ran.load(std::memory_order_relaxed) == 1);
        CHECK(engine.Version(v) == 1);
      } else {
        CHECK_THROWS_WITH(push_async(), Catch::Contains("PushAsync") && Catch::Contains("a stream executor") &&
                                            Catch::Contains("push with Push"));
        // Nothing was pushed: v is idle at version 0, and a wait finds nothing to wait for.
        CHECK(engine.InFlight() == 0);
        engine.WaitForVar(v);
        engine.WaitForAll();
        CHECK(ran.load(std::memory_order_relaxed) == 0);
        CHECK(engine.Version(v) == 0);
        // The engine and v are still usable.
        engine.Push([&ran] { ran.fetch_add(1, std::memory_order_relaxed); }, {}, {v});
        engine.WaitForVar(v);
        CHECK(ran.load(std::memory_order_relaxed) == 1);
        CHECK(engine.Version(v) == 1);
      }
    }
  }
}

TEST_CASE("a completion called twice throws Error and changes nothing", "[engine][misuse]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("double completion on " + factory.name);
      Engine engine(factory.options());
      if (!factory.takes_async) {  // no Completion to call
        check_async_refused(engine, engine.NewVariable());
        continue;
      }
      const Var v = engine.NewVariable();
      std::optional<Completion> kept;
      bool second_call_threw = false;
      std::atomic<bool> returned{false};
      engine.PushAsync(
          [&](Completion done) {
            done();
            try {
              done();  // a copy is the same completion
            } catch (const Error&) {
              second_call_threw = true;
            }
            kept.emplace(done);
            returned.store(true, std::memory_order_release);  // pairs with the acquire below
          },
          {}, {v});
      engine.WaitForAll();
      // The op completed at its first done(), so WaitForAll may return while the function still runs: wait for the
      // function's own return before reading what it wrote.
      REQUIRE(wait_until([&] { return returned.load(std::memory_order_acquire); }));
      CHECK(second_call_threw);
      CHECK(engine.Version(v) == 1);

      // A stale completion called later, while other async ops (perhaps in its recycled record) are in flight, must
      // complete none of them.
      std::vector<std::unique_ptr<HeldOp>> held;
      for (int i = 0; i < 8; ++i) held.push_back(std::make_unique<HeldOp>(engine, VarList{}, VarList{v}));
      REQUIRE(wait_until([&] { return held.front()->holding(); }));
      CHECK_THROWS_AS((*kept)(), Error);
      CHECK_THROWS_AS((*kept)(std::make_exception_ptr(OpFailure(1))), Error);
      CHECK(engine.Version(v) == 1);
      CHECK(engine.InFlight() == held.size());
      for (auto& op : held) REQUIRE(op->release());
      engine.WaitForAll();  // no error: the stale call's error went nowhere
      CHECK(engine.Version(v) == 1 + held.size());
    }
  }
}

// "Start the I/O, then validate and throw": the function hands its Completion to a thread and throws. The op completes
// with what it threw; the thread's one call, later, is absorbed (late_completions.h); a call after that is a second
// call. Each call runs on a thread of its own, with no handler but the test's, as the I/O's thread would.
TEST_CASE("the late completion of an op whose function threw is absorbed; a call after it still throws",
          "[engine][misuse][errors]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("late completion on " + factory.name);
      Engine engine(factory.options());
      if (!factory.takes_async) {  // no Completion to call
        check_async_refused(engine, engine.NewVariable());
        continue;
      }
      // Calls `completion` with `error` on a thread of its own: whether it threw Error.
      auto threw_on_thread = [](const Completion& completion, std::exception_ptr error = nullptr) {
        bool threw = false;
        std::thread io([&] {
          try {
            completion(error);
          } catch (const Error&) {
            threw = true;
          }
        });
        io.join();
        return threw;
      };
      const Var v = engine.NewVariable();
      std::optional<Completion> late;
      engine.PushAsync(
          [&](Completion done) {
            late.emplace(done);
            throw OpFailure(1);  // validation failed, after the I/O was started
          },
          {}, {v}, {.name = "validate"});
      CHECK(thrown_id([&] { engine.WaitForVar(v); }) == 1);
      CHECK(engine.Version(v) == 1);

      // Other async ops in flight, perhaps in the recycled record: the late call completes none of them.
      std::vector<std::unique_ptr<HeldOp>> held;
      for (int i = 0; i < 4; ++i) held.push_back(std::make_unique<HeldOp>(engine, VarList{}, VarList{v}));
      REQUIRE(wait_until([&] { return held.front()->holding(); }));
      CHECK_FALSE(threw_on_thread(*late));  // the I/O's one legitimate call
      CHECK(engine.InFlight() == held.size());
      CHECK(threw_on_thread(*late));  // a second call
      for (auto& op : held) REQUIRE(op->release());
      engine.WaitForAll();  // nothing: the late call carried no error
      CHECK(engine.Version(v) == 1 + held.size());

      // A late call that carries an error hands it on as the op's, unreported: WaitForAll rethrows it.
      engine.PushAsync(
          [&](Completion done) {
            late.emplace(done);
            throw OpFailure(2);
          },
          {}, {v}, {.name = "validate again"});
      CHECK(thrown_id([&] { engine.WaitForVar(v); }) == 2);
      CHECK_FALSE(threw_on_thread(*late, std::make_exception_ptr(OpFailure(3))));
      std::exception_ptr reported;
      try {
        engine.WaitForAll();
      } catch (...) {
        reported = std::current_exception();
      }
      CHECK(thrown_id([&] { std::rethrow_exception(reported); }) == 3);
      CHECK(engine.FailedOpName(reported) == "validate again");

      // A function that completes and then throws: its error is WaitForAll's, and a further call is a second call.
      engine.PushAsync(
          [&](Completion done) {
            late.emplace(done);
            done();
            throw OpFailure(4);
          },
          {}, {v});
      CHECK(thrown_id([&] { engine.WaitForAll(); }) == 4);
      CHECK(threw_on_thread(*late));
    }
  }
}

TEST_CASE("a late completion after its engine is destroyed is absorbed", "[engine][misuse][errors]") {
  std::optional<Completion> late;
  {
    Engine engine(threadpool_factory(1).options());
    const Var v = engine.NewVariable();
    engine.PushAsync(
        [&](Completion done) {
          late.emplace(done);
          throw OpFailure(1);
        },
        {}, {v});
    CHECK(thrown_id([&] { engine.WaitForVar(v); }) == 1);
  }
  bool threw = false;
  std::thread io([&] {
    try {
      (*late)();
    } catch (const Error&) {
      threw = true;
    }
  });
  io.join();
  CHECK_FALSE(threw);
}

TEST_CASE("of two threads completing the same op at once, exactly one succeeds", "[engine][misuse][concurrency]") {
  const int rounds = static_cast<int>(sized(300, 40, 100));
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("racing completions on " + factory.name);
      Engine engine(factory.options());
      if (!factory.takes_async) {  // no Completion to call
        check_async_refused(engine, engine.NewVariable());
        continue;
      }
      const Var v = engine.NewVariable();
      std::atomic<int> successor_runs{0}, errors{0}, successes{0};
      for (int r = 0; r < rounds; ++r) {
        std::atomic<bool> caught{false};
        std::optional<Completion> racing;
        engine.PushAsync(
            [&](Completion completion) {
              racing.emplace(completion);
              caught.store(true, std::memory_order_release);  // release: pairs with the acquire below
            },
            {}, {v});
        engine.Push([&] { successor_runs.fetch_add(1, std::memory_order_relaxed); }, {v}, {});
        REQUIRE(wait_until([&] { return caught.load(std::memory_order_acquire); }));
        Rendezvous start(2);
        auto call = [&] {
          (void)start.arrive_and_wait();
          try {
            (*racing)();
            successes.fetch_add(1, std::memory_order_relaxed);
          } catch (const Error&) {
            errors.fetch_add(1, std::memory_order_relaxed);
          }
        };
        std::thread other(call);
        call();
        other.join();
        engine.WaitForVar(v);
      }
      CHECK(successes.load(std::memory_order_relaxed) == rounds);
      CHECK(errors.load(std::memory_order_relaxed) == rounds);
      CHECK(successor_runs.load(std::memory_order_relaxed) == rounds);
      CHECK(engine.Version(v) == static_cast<std::uint64_t>(rounds));
    }
  }
}

TEST_CASE("DEPENGINE_ENGINE_TYPE=NaiveEngine runs every CPU op inline; an unknown type is refused",
          "[engine][misuse][environment]") {
  {
    const ScopedEnv env("DEPENGINE_ENGINE_TYPE", "NaiveEngine");
    EngineOptions options;
    options.executors.push_back(std::make_unique<ThreadPoolExecutor>(ThreadPoolOptions{.workers = 2}));
    Engine engine(std::move(options));
    CHECK(engine.executor(0).name() == "inline");
    std::thread::id ran_on;
    engine.Push([&ran_on] { ran_on = std::this_thread::get_id(); }, {}, {engine.NewVariable()});
    CHECK(ran_on == std::this_thread::get_id());  // before Push returned, on the pushing thread
  }
  const ScopedEnv env("DEPENGINE_ENGINE_TYPE", "FastEngine");
  CHECK_THROWS_WITH(Engine(executor_factories().front().options()),
                    Catch::Contains("DEPENGINE_ENGINE_TYPE='FastEngine': expected NaiveEngine or ThreadedEngine"));
}

}  // namespace
}  // namespace depengine::test
