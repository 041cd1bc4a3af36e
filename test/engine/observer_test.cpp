// Observers (engine/observer.h): every op pushed or replayed is told ready, started (if it runs) and ended exactly
// once each, in that order, with its outcome; executor threads are told as they enter and leave a pool. Every test runs
// on every executor of executor_factories.h (inline, the pools, host streams) unless it says otherwise.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <depengine/engine/engine.h>
#include <depengine/engine/observer.h>

#include "test/engine/test_support.h"
#include "test/executors/executor_factories.h"

namespace depengine::test {
namespace {

// Records every event under a lock and checks, as each arrives, that it is the next one its op may have: ready first,
// then started (unless the op did not run), then ended, each once. A broken rule becomes a line in `violations`.
class RecordingObserver final : public Observer {
 public:
  struct Life {
    std::string name;
    std::int64_t replay = -1;
    int readies = 0, starts = 0, ends = 0;
    std::int64_t pushed_at = 0, ready_at = 0, started_at = 0, ended_at = 0;
    OpOutcome outcome = OpOutcome::kRan;
    bool had_error = false;
    bool on_stream = false;
  };

  void OnReady(const OpEvent& op) noexcept override {
    const std::lock_guard lock(mutex_);
    Life& life = lives_[op.id];
    if (life.readies != 0 || life.starts != 0 || life.ends != 0) violation(op, "ready again, or after start or end");
    ++life.readies;
    life.name = std::string(op.name);
    life.replay = op.replay;
    life.pushed_at = op.pushed_at;
    life.ready_at = op.ready_at;
    if (op.pushed_at == 0 || op.ready_at < op.pushed_at) violation(op, "ready before its push");
  }
  void OnStart(const OpEvent& op) noexcept override {
    const std::lock_guard lock(mutex_);
    Life& life = lives_[op.id];
    if (life.readies != 1 || life.starts != 0 || life.ends != 0) violation(op, "start not after one ready");
    ++life.starts;
    life.started_at = op.started_at;
    life.on_stream = !op.stream.is_null();
    if (op.ready_at != life.ready_at || op.started_at < op.ready_at) violation(op, "started before ready");
  }
  void OnEnd(const OpEvent& op) noexcept override {
    const std::lock_guard lock(mutex_);
    Life& life = lives_[op.id];
    if (life.readies != 1 || life.ends != 0) violation(op, "end not after one ready");
    const bool ran = op.outcome == OpOutcome::kRan || op.outcome == OpOutcome::kFailed;
    if (ran != (life.starts == 1)) violation(op, "ran without a start, or started and did not run");
    if ((op.outcome == OpOutcome::kRan) == (op.error != nullptr)) violation(op, "an error iff it did not run clean");
    if (op.ended_at < (ran ? op.started_at : op.ready_at) || (ran && op.started_at != life.started_at)) {
      violation(op, "ended before it started");
    }
    ++life.ends;
    life.ended_at = op.ended_at;
    life.outcome = op.outcome;
    life.had_error = op.error != nullptr;
  }
  void OnThreadStart(const ThreadEvent& thread) noexcept override {
    const std::lock_guard lock(mutex_);
    int& inside = threads_[std::this_thread::get_id()];
    if (inside != 0) violations_.push_back("a thread started twice without stopping");
    ++inside;
    ++thread_starts_;
    if ((thread.executor_name == "threadpool") != (thread.worker >= 0))
      violations_.push_back("a pool thread with no worker, or a worker elsewhere");
    if (thread.worker < 0) ++non_worker_starts_;
  }
  void OnThreadStop(const ThreadEvent& /*thread*/) noexcept override {
    const std::lock_guard lock(mutex_);
    int& inside = threads_[std::this_thread::get_id()];
    if (inside != 1) violations_.push_back("a thread stopped without starting");
    --inside;
  }

  // Read after the engine is quiescent (WaitForAll or its destruction).
  [[nodiscard]] std::map<std::uint64_t, Life> lives() const {
    const std::lock_guard lock(mutex_);
    return lives_;
  }
  [[nodiscard]] std::vector<std::string> violations() const {
    const std::lock_guard lock(mutex_);
    return violations_;
  }
  [[nodiscard]] int thread_starts() const {
    const std::lock_guard lock(mutex_);
    return thread_starts_;
  }
  [[nodiscard]] int non_worker_starts() const {
    const std::lock_guard lock(mutex_);
    return non_worker_starts_;
  }
  // Threads started and not stopped.
  [[nodiscard]] int threads_inside() const {
    const std::lock_guard lock(mutex_);
    int inside = 0;
    for (const auto& [id, count] : threads_) inside += count;
    return inside;
  }

 private:
  void violation(const OpEvent& op, const char* what) {
    violations_.push_back("op " + std::to_string(op.id) + " '" + std::string(op.name) + "': " + what);
  }

  mutable std::mutex mutex_;
  std::map<std::uint64_t, Life> lives_;     // guarded by mutex_
  std::map<std::thread::id, int> threads_;  // guarded by mutex_
  std::vector<std::string> violations_;     // guarded by mutex_
  int thread_starts_ = 0;                   // guarded by mutex_
  int non_worker_starts_ = 0;               // guarded by mutex_
};

// Every op seen had all its events: one ready, one end.
void require_complete(const RecordingObserver& observer) {
  std::vector<std::string> incomplete;
  for (const auto& [id, life] : observer.lives()) {
    if (life.readies != 1 || life.ends != 1) incomplete.push_back(std::to_string(id) + " '" + life.name + "'");
  }
  CAPTURE(incomplete);
  REQUIRE(incomplete.empty());
  const std::vector<std::string> violations = observer.violations();
  CAPTURE(violations);
  REQUIRE(violations.empty());
}

std::size_t count_outcome(const std::map<std::uint64_t, RecordingObserver::Life>& lives, OpOutcome outcome) {
  return static_cast<std::size_t>(
      std::count_if(lives.begin(), lives.end(), [&](const auto& entry) { return entry.second.outcome == outcome; }));
}

TEST_CASE("an observer sees every op's ready and start and end once each in order", "[engine][observer]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("observer events on " + factory.name);
      RecordingObserver observer;
      EngineOptions options = factory.options();
      options.observers.push_back(&observer);
      std::size_t pushed = 0;
      {
        Engine engine(std::move(options));
        std::vector<Var> vars;
        for (int i = 0; i < 8; ++i) vars.push_back(engine.NewVariable());
        std::mt19937 random(7);
        for (int i = 0; i < 400; ++i) {
          const Var a = vars[random() % vars.size()], b = vars[random() % vars.size()];
          const std::string name = "op" + std::to_string(i % 5);
          if (factory.takes_async && i % 3 == 0) {
            engine.PushAsync([](Completion done) { done(); }, {a}, {b}, {.name = name});
          } else {
            engine.Push([] {}, {a}, {b}, {.name = name});
          }
          ++pushed;
        }
        engine.DeleteVariable(vars.back());
        ++pushed;
        engine.WaitForAll();
        // Every op ended before WaitForAll returned.
        REQUIRE(observer.lives().size() == pushed);
        require_complete(observer);
      }
      const auto lives = observer.lives();
      REQUIRE(lives.size() == pushed);
      REQUIRE(count_outcome(lives, OpOutcome::kRan) == pushed);
      for (const auto& [id, life] : lives) {
        REQUIRE(life.replay == -1);
        REQUIRE(life.on_stream == !factory.takes_async);  // the stream executor's ops are issued on streams
      }
    }
  }
}

TEST_CASE("an observer is told which ops failed or were skipped or cancelled", "[engine][observer]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("observer outcomes on " + factory.name);
      RecordingObserver observer;
      EngineOptions options = factory.options();
      options.observers.push_back(&observer);
      Engine engine(std::move(options));
      const Var bad = engine.NewVariable(), after = engine.NewVariable(), held = engine.NewVariable();
      engine.Push([] { throw std::runtime_error("boom"); }, {}, {bad}, {.name = "fails"});
      engine.Push([] {}, {bad}, {after}, {.name = "skipped"});
      CancelScope scope;
      HeldOp hold(engine, {}, {held});
      for (int i = 0; i < 5; ++i) engine.Push([] {}, {}, {held}, {.name = "cancelled", .scope = &scope});
      scope.Cancel();
      REQUIRE(hold.release());
      REQUIRE_THROWS(engine.WaitForAll());
      require_complete(observer);
      std::map<std::string, std::map<OpOutcome, int>> by_name;
      for (const auto& [id, life] : observer.lives()) {
        ++by_name[life.name][life.outcome];
        if (life.outcome != OpOutcome::kRan) REQUIRE(life.had_error);
      }
      REQUIRE(by_name["fails"][OpOutcome::kFailed] == 1);
      REQUIRE(by_name["skipped"][OpOutcome::kSkipped] == 1);
      REQUIRE(by_name["cancelled"][OpOutcome::kCancelled] == 5);
    }
  }
}

TEST_CASE("an observer sees every op of every replay, numbered by its replay", "[engine][observer][graph]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("observer replays on " + factory.name);
      RecordingObserver observer;
      EngineOptions options = factory.options();
      options.observers.push_back(&observer);
      Engine engine(std::move(options));
      const Var x = engine.NewVariable(), y = engine.NewVariable(), z = engine.NewVariable();
      constexpr int kReplays = 6;
      const Graph graph = engine.Capture([&] {
        engine.Push([] {}, {}, {x}, {.name = "produce"});
        engine.Push([] {}, {x}, {y}, {.name = "left"});
        engine.Push([] {}, {x}, {z}, {.name = "right"});
        engine.Push([] {}, {y, z}, {x}, {.name = "join"});
      });
      REQUIRE(observer.lives().empty());  // captured pushes are not ops
      for (int r = 0; r < kReplays; ++r) {
        engine.Push([] {}, {x}, {}, {.name = "between"});
        engine.Replay(graph);
      }
      engine.WaitForAll();
      require_complete(observer);
      const auto lives = observer.lives();
      std::map<std::string, int> count;
      std::map<std::int64_t, int> per_replay;
      for (const auto& [id, life] : lives) {
        ++count[life.name];
        REQUIRE(life.outcome == OpOutcome::kRan);
        if (life.replay >= 0) ++per_replay[life.replay];
      }
      REQUIRE(count["between"] == kReplays);
      if (factory.takes_async) {  // CPU ops: each replay's four ops, numbered 0 to kReplays - 1
        REQUIRE(lives.size() == static_cast<std::size_t>(kReplays * 5));
        for (const char* name : {"produce", "left", "right", "join"}) REQUIRE(count[name] == kReplays);
        REQUIRE(per_replay.size() == static_cast<std::size_t>(kReplays));
        for (const auto& [replay, ops] : per_replay) REQUIRE(ops == 4);
      } else {  // a graph of stream ops is replayed as one pushed op (graph.h)
        REQUIRE(lives.size() == static_cast<std::size_t>(kReplays * 2));
      }
    }
  }
}

TEST_CASE("replayed ops that an error or a cancellation stops are reported so", "[engine][observer][graph]") {
  Watchdog watchdog("observer replay outcomes");
  RecordingObserver observer;
  EngineOptions options = threadpool_factory(2).options();
  options.observers.push_back(&observer);
  Engine engine(std::move(options));
  const Var x = engine.NewVariable(), y = engine.NewVariable();
  const Graph graph = engine.Capture([&] {
    engine.Push(
        [](const RunContext& ctx) {
          if (ctx.replay == 1) throw std::runtime_error("replay 1");
        },
        {}, {x}, {.name = "first"});
    engine.Push([] {}, {x}, {y}, {.name = "second"});
  });
  engine.Replay(graph);
  engine.Replay(graph);
  REQUIRE_THROWS(engine.WaitForAll());
  CancelScope scope;
  scope.Cancel();
  engine.Replay(graph, {.scope = &scope});
  try {
    engine.WaitForAll();
  } catch (const Cancelled&) {  // the scope's error, raised by its first cancelled op
  }
  require_complete(observer);
  std::map<std::int64_t, std::map<std::string, OpOutcome>> outcome;
  for (const auto& [id, life] : observer.lives()) outcome[life.replay][life.name] = life.outcome;
  REQUIRE(outcome[0]["first"] == OpOutcome::kRan);
  REQUIRE(outcome[0]["second"] == OpOutcome::kRan);
  REQUIRE(outcome[1]["first"] == OpOutcome::kFailed);
  REQUIRE(outcome[1]["second"] == OpOutcome::kSkipped);
  REQUIRE(outcome[2]["first"] == OpOutcome::kCancelled);
  REQUIRE(outcome[2]["second"] == OpOutcome::kCancelled);
}

TEST_CASE("an observer is told of the pool's threads on those threads", "[engine][observer][threadpool]") {
  Watchdog watchdog("observer threads");
  RecordingObserver observer;
  {
    EngineOptions options = threadpool_factory(2).options();
    options.observers.push_back(&observer);
    Engine engine(std::move(options));
    const Var v = engine.NewVariable();
    for (int i = 0; i < 100; ++i) {
      engine.Push([] {}, {}, {v});
    }
    engine.WaitForAll();
  }
  // A drainer was started (the first push), and the pool's stop() waited for it: it ran on a thread in the arena.
  REQUIRE(observer.thread_starts() > 0);
  REQUIRE(observer.violations().empty());
}

TEST_CASE("an observer is told of a stream executor's completion thread, once, on it", "[engine][observer][stream]") {
  Watchdog watchdog("observer stream thread");
  RecordingObserver observer;
  {
    EngineOptions options = host_stream_factory().options();
    options.observers.push_back(&observer);
    Engine engine(std::move(options));
    const Var v = engine.NewVariable();
    for (int i = 0; i < 20; ++i) engine.Push([] {}, {}, {v});
    engine.WaitForAll();  // the ops completed on the completion thread, which was told first
    CHECK(observer.non_worker_starts() == 1);
    CHECK(observer.threads_inside() == 1);
  }
  CHECK(observer.non_worker_starts() == 1);
  CHECK(observer.threads_inside() == 0);  // stopped, on the thread that started, before the engine was gone
  REQUIRE(observer.violations().empty());
}

TEST_CASE("ops pushed from several threads at once are each observed once", "[engine][observer][random]") {
  // Once: Catch runs the body again for each section, whose names must not change between runs.
  static const std::vector<std::uint64_t> seeds = test_seeds();
  for (const std::uint64_t seed : seeds) {
    for (const ExecutorFactory& factory : {threadpool_factory(2), work_first_factory(2), inline_factory()}) {
      DYNAMIC_SECTION(factory.name << " seed " << seed) {
        CAPTURE(seed);
        Watchdog watchdog("observer random on " + factory.name);
        RecordingObserver observer;
        EngineOptions options = factory.options();
        options.observers.push_back(&observer);
        options.error_sink = [](const UnreportedError&) {};  // the failures below, beyond the one a wait reports
        constexpr int kThreads = 3;
        const int per_thread = static_cast<int>(sized(2000, 400, 600));
        {
          Engine engine(std::move(options));
          std::vector<Var> vars;
          for (int i = 0; i < 6; ++i) vars.push_back(engine.NewVariable());
          // Failing ops mutate `failing` alone; ops that read it are skipped once one has failed.
          const Var failing = engine.NewVariable(), downstream = engine.NewVariable();
          std::vector<std::thread> pushers;
          for (int t = 0; t < kThreads; ++t) {
            pushers.emplace_back([&, t] {
              std::mt19937_64 random(seed + static_cast<std::uint64_t>(t));
              for (int i = 0; i < per_thread; ++i) {
                const Var a = vars[random() % vars.size()], b = vars[random() % vars.size()];
                const auto kind = random() % 100;
                if (kind < 2) {
                  engine.Push([] { throw std::runtime_error("random failure"); }, {}, {failing}, {.name = "fail"});
                } else if (kind < 6) {
                  engine.Push([] {}, {failing}, {downstream}, {.name = "after failing"});
                } else if (kind < 50) {
                  engine.PushAsync([](Completion done) { done(); }, {a}, {b}, {.name = "async"});
                } else {
                  engine.Push([] {}, {a}, {}, {.name = "read"});
                }
              }
            });
          }
          for (std::thread& pusher : pushers) pusher.join();
          try {
            engine.WaitForAll();
          } catch (const std::runtime_error&) {  // expected: the random failures
          }
        }
        require_complete(observer);
        const auto lives = observer.lives();
        REQUIRE(lives.size() == static_cast<std::size_t>(kThreads * per_thread));
        REQUIRE(count_outcome(lives, OpOutcome::kRan) + count_outcome(lives, OpOutcome::kFailed) +
                    count_outcome(lives, OpOutcome::kSkipped) ==
                lives.size());
      }
    }
  }
}

// Counts events and checks that their times are 0: it asks for none, and no other observer of its engine does.
class UntimedObserver final : public Observer {
 public:
  void OnReady(const OpEvent& op) noexcept override { note(op); }
  void OnStart(const OpEvent& op) noexcept override { note(op); }
  void OnEnd(const OpEvent& op) noexcept override { note(op); }
  void OnThreadStart(const ThreadEvent& /*thread*/) noexcept override {}
  void OnThreadStop(const ThreadEvent& /*thread*/) noexcept override {}
  [[nodiscard]] bool Timed() const noexcept override { return false; }

  std::atomic<int> events{0}, timed{0};  // read after the engine is gone, which ordered every event before

 private:
  void note(const OpEvent& op) {
    events.fetch_add(1, std::memory_order_relaxed);  // relaxed: see above
    if (op.pushed_at != 0 || op.ready_at != 0 || op.started_at != 0 || op.ended_at != 0) {
      timed.fetch_add(1, std::memory_order_relaxed);  // relaxed: see above
    }
  }
};

TEST_CASE("an engine whose observers ask for no times reads no clock", "[engine][observer]") {
  UntimedObserver observer;
  {
    EngineOptions options = threadpool_factory(2).options();
    options.observers.push_back(&observer);
    Engine engine(std::move(options));
    const Var v = engine.NewVariable();
    for (int i = 0; i < 50; ++i) engine.Push([] {}, {}, {v});
  }
  REQUIRE(observer.events.load(std::memory_order_relaxed) == 150);  // relaxed: the engine's destruction ordered them
  REQUIRE(observer.timed.load(std::memory_order_relaxed) == 0);
}

// An event's times are steady_clock's, on its scale (the engine may read the time-stamp counter, event_clock.h): each
// op of a chain, spinning 200 us on steady_clock, is pushed, ready, started and ended within steady_clock reads taken
// around the whole chain, runs at least its spin, and is ready no earlier than its predecessor ended (on a CPU
// executor).
TEST_CASE("the times in events are steady_clock's", "[engine][observer][clock]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("event times on " + factory.name);
      RecordingObserver observer;
      EngineOptions options = factory.options();
      options.observers.push_back(&observer);
      constexpr int kOps = 20;
      constexpr std::int64_t kSpin = 200'000;  // ns
      // The counter's conversion may be off steady_clock by a microsecond and a few parts in 10^5 of the engine's
      // age (event_clock.h, kRateError): a millisecond is far beyond that and far below the chain's 4 ms.
      constexpr std::int64_t kSlack = 1'000'000;
      const auto steady_now = [] {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count();
      };
      std::int64_t before = 0, after = 0;
      {
        Engine engine(std::move(options));
        const Var v = engine.NewVariable();
        before = steady_now();
        for (int i = 0; i < kOps; ++i) {
          engine.Push(
              [&] {
                const std::int64_t start = steady_now();
                while (steady_now() - start < kSpin) {
                }
              },
              {}, {v}, {.name = "spin"});
        }
        engine.WaitForAll();
        after = steady_now();
        require_complete(observer);
      }
      const auto lives = observer.lives();
      REQUIRE(lives.size() == kOps);
      std::int64_t previous_end = 0;
      for (const auto& [id, life] : lives) {
        if (life.name != "spin") continue;
        INFO("op " << id << " pushed " << life.pushed_at << " ready " << life.ready_at << " started " << life.started_at
                   << " ended " << life.ended_at << "; steady_clock " << before << " to " << after);
        REQUIRE(life.pushed_at >= before - kSlack);
        REQUIRE(life.pushed_at <= life.ready_at);
        REQUIRE(life.ready_at <= life.started_at);
        REQUIRE(life.started_at <= life.ended_at);
        REQUIRE(life.ended_at <= after + kSlack);
        REQUIRE(life.ended_at - life.started_at >= kSpin - kSlack / 100);  // its spin, on steady_clock's scale
        // Ids follow the pushes: the chain's order. (A stream op is ready once its predecessor is issued.)
        if (factory.runs_after_completion) REQUIRE(life.ready_at >= previous_end);
        previous_end = life.ended_at;
      }
    }
  }
}

TEST_CASE("a null observer is refused", "[engine][observer]") {
  EngineOptions options = inline_factory().options();
  options.observers.push_back(nullptr);
  REQUIRE(error_message([&] { Engine engine(std::move(options)); }) == "EngineOptions::observers[0] is null");
}

TEST_CASE("an accumulation that waited for the group's token is ready once", "[engine][observer][accumulate]") {
  for (const auto& factory : executor_factories()) {
    if (!factory.takes_async) continue;  // a stream executor refuses accumulations (and async ops)
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("observer and accumulate token on " + factory.name);
      RecordingObserver observer;
      EngineOptions options = factory.options();
      options.observers.push_back(&observer);
      Engine engine(std::move(options));
      const Var sum = engine.NewVariable();
      // The first member keeps the token until its Completion is called, so the second, granted with it, finds the
      // token taken, parks on the group and is routed again when the token is handed to it.
      std::promise<Completion> first;
      engine.PushAccumulateAsync([&](Completion done) { first.set_value(std::move(done)); }, {}, {}, {sum},
                                 {.name = "holds the token"});
      Completion done = first.get_future().get();
      std::atomic<bool> second_ran{false};
      engine.PushAccumulate([&] { second_ran.store(true, std::memory_order_relaxed); }, {}, {}, {sum},
                            {.name = "waits for the token"});
      REQUIRE_FALSE(second_ran.load(std::memory_order_relaxed));  // relaxed: only whether it ran yet; it cannot
      done();
      engine.WaitForAll();
      REQUIRE(second_ran.load(std::memory_order_relaxed));  // relaxed: WaitForAll ordered it
      require_complete(observer);
    }
  }
}

}  // namespace
}  // namespace depengine::test
