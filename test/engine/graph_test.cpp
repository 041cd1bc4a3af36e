// Graphs (engine/graph.h; Engine::Capture and Engine::Replay in engine.h): a step of pushes captured once and replayed
// many times must behave exactly as if its ops were pushed again, in captured order, at the replay.
//
// What is checked, and why each check would catch a broken implementation:
//
// - Randomized oracle. Random graphs over 12 variables (ops reading 0 to 4 variables and mutating 1 or 2, with bodies
//   that fold their id, RunContext::replay and what they read into what they write) are captured once, while other
//   ops are in flight, and replayed 20 times, interleaved with ordinary pushes from the capturing thread and, in a
//   second mode, with ordinary pushes from a second thread on the same variables. Every op instance records what it
//   observed (order_oracle.h); a total order must explain the run, and a serial execution in that order (and, with
//   one pusher, in program order) must reproduce every value bit for bit. A replay misordered against its
//   neighbours, a dependency inside the graph lost, a wrong RunContext::replay, a captured op run at capture, or an op
//   run twice or never, all change the values.
// - Boundary precision. A replay joins each variable's queue on its own: an op pushed after a replay waits only for
//   the graph's last users of its variables (not for a slow op of the graph on another variable), and the graph's
//   first user of a variable waits only for what was pushed before on that variable.
// - Reads across the boundary run together: a graph's read joins an ordinary read that is running, and an ordinary
//   read pushed after a graph that ends in a read joins that read; a later write waits for all of them.
// - Errors: an op failing in one replay only (RunContext::replay) skips its dependents in the graph, poisons what it
//   mutates (WaitForVar rethrows it, FailedOpName names it), runs no_skip ops with RunContext::input_error, and the
//   next replay runs clean; an error at the graph's inputs skips the graph's readers and flows on.
// - Version counts the graph's mutations, exactly inside the ops.
// - Misuse: every Error that Capture and Replay document, with a message naming the call, and the capture going on
//   after a refused call that the body caught.
// - Back-pressure: a replay is admitted whole (never more than max_in_flight ops in flight), replays of one graph from
//   two threads at once, 100 in a row without waits.
// - Lifetime: a Graph destroyed while replays of it are queued or running (ASan checks the ops' functions stay alive).
// - Nested pushes: an op of a replay may push; what it pushes is an ordinary op (RunContext::replay == -1) ordered as
//   any push from inside an op; a replay from inside an op does not wait for the bound; pushes made by ops running
//   during a capture (on a worker, or on the capturing thread itself) are not captured, and Capturing() says where a
//   capture is on.
// - Replayed ops keep their push options (executor, name), appear in traces named with their replay (with arrows
//   among the ops of one replay), and show in InFlightReport while they wait.
//
// Scope: synchronous ops on the CPU executors (inline, thread pools of 1 and 2 workers). Where a test needs an op of
// a graph to hold its thread (a gate the test thread opens; no sleeps), it runs on the pools only, or replays from a
// helper thread on the inline executor (which runs an op on the thread that makes it ready).
//
// Seeds: DEPENGINE_TEST_SEED reruns one; DEPENGINE_TEST_REPEAT sets how many fresh ones (default 3).
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cctype>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <depengine/engine/engine.h>
#include <depengine/engine/fence.h>

#include "test/engine/order_oracle.h"
#include "test/engine/test_support.h"
#include "test/engine/trace_file.h"
#include "test/executors/executor_factories.h"

namespace depengine::test {
namespace {

using Catch::Contains;

// The executors that graphs support in this step: the CPU ones.
std::vector<ExecutorFactory> cpu_factories() {
  return {inline_factory(), threadpool_factory(1), threadpool_factory(2)};
}

// A flag one thread sets and another waits for (bounded: meet_limit()).
struct Flag {
  std::atomic<bool> value{false};
  // release/acquire: what the setter did before set() is visible to whoever sees the flag set.
  void set() { value.store(true, std::memory_order_release); }
  [[nodiscard]] bool is_set() const { return value.load(std::memory_order_acquire); }
  [[nodiscard]] bool wait() const {
    return wait_until([this] { return is_set(); });
  }
};

// A gate an op's function stops at until the test thread opens it: the op holds its thread and its variables
// meanwhile. It never waits longer than meet_limit() (then it records the timeout and goes on), so a test whose engine
// misbehaves fails instead of hanging.
struct Gate {
  Flag reached;
  Flag open;
  std::atomic<bool> timed_out{false};
  void pass() {
    reached.set();
    if (!open.wait()) timed_out.store(true);
  }
};

// Matches the message of a call refused inside a capture: it names the call (`what`, case-sensitive) and says why
// ("capture", in any case). A class of its own: Catch's && keeps pointers to its operands, so a combination cannot be
// returned from a helper.
class RefusedInCapture : public Catch::MatcherBase<std::string> {
 public:
  explicit RefusedInCapture(std::string what) : what_(std::move(what)) {}
  bool match(const std::string& message) const override {
    std::string lower = message;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
    return message.find(what_) != std::string::npos && lower.find("capture") != std::string::npos;
  }
  std::string describe() const override { return "names \"" + what_ + "\" and says \"capture\""; }

 private:
  std::string what_;
};

// Raises `peak` to `value` if larger.
void raise(std::atomic<std::size_t>& peak, std::size_t value) {
  // relaxed: a running maximum, read after the engine's wait.
  std::size_t seen = peak.load(std::memory_order_relaxed);
  while (value > seen && !peak.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

// The replay an op runs in (RunContext::replay), as an index below `count`: none for an op outside that range (an
// ordinary push, or a replay past the count), which is counted for the test to check (out_of_range() == 0).
class ReplayIndex {
 public:
  explicit ReplayIndex(std::size_t count) : count_(count) {}
  [[nodiscard]] std::optional<std::size_t> operator()(const RunContext& ctx) {
    if (ctx.replay < 0 || static_cast<std::size_t>(ctx.replay) >= count_) {
      out_of_range_.fetch_add(1);
      return std::nullopt;
    }
    return static_cast<std::size_t>(ctx.replay);
  }
  [[nodiscard]] int out_of_range() const { return out_of_range_.load(); }

 private:
  const std::size_t count_;
  std::atomic<int> out_of_range_{0};
};

std::vector<Var> vars_of(const std::vector<std::uint32_t>& indices, const std::vector<Var>& vars) {
  std::vector<Var> out;
  for (std::uint32_t index : indices) out.push_back(vars[index]);
  return out;
}

// A random op: reads 0 to 4 variables, mutates 1 or 2 (a variable may be named twice, or read and mutated).
OpSpec random_op(std::mt19937_64& rng, std::uint32_t num_vars) {
  OpSpec op;
  const std::size_t reads = rng() % 5;
  const std::size_t mutates = 1 + rng() % 2;
  for (std::size_t r = 0; r < reads; ++r) op.reads.push_back(static_cast<std::uint32_t>(rng() % num_vars));
  for (std::size_t m = 0; m < mutates; ++m) op.mutates.push_back(static_cast<std::uint32_t>(rng() % num_vars));
  return op;
}

// The body of every op of the randomized tests: folds the op's id, the replay that runs it (RunContext::replay; -1
// for a pushed op) and what it reads, in list order, into every variable it mutates. Returns the fold.
std::uint64_t run_op(const OpSpec& op, std::uint64_t id, std::int64_t replay, std::vector<std::uint64_t>& values) {
  std::uint64_t h = mix(id, static_cast<std::uint64_t>(replay + 2) * 1000);
  for (std::uint32_t var : op.reads) h = mix(h, values[var]);
  for (std::uint32_t var : op.mutates) h = mix(h, values[var]);
  for (std::size_t j = 0; j < op.mutates.size(); ++j) values[op.mutates[j]] = mix(h, values[op.mutates[j]] + j);
  return h;
}

std::vector<std::uint64_t> initial_values(std::uint64_t seed, std::uint32_t num_vars) {
  std::vector<std::uint64_t> values(num_vars);
  for (std::uint32_t v = 0; v < num_vars; ++v) values[v] = mix(seed, v + 1);
  return values;
}

// ---------------------------------------------------------------------------------------------------------------------
// 1. The randomized oracle: captured once, replayed 20 times among ordinary pushes from one or two threads.

constexpr std::uint32_t kOracleVars = 12;

// Pusher 0 pushes `prefix`, captures `graph` (with `prefix` possibly still in flight, and pusher 1 pushing), then
// runs `steps`: a replay of the graph, or a push. Pusher 1 (with two pushers) pushes `other` meanwhile, on the same
// variables. The oracle sees every op instance: pusher 0's program is the prefix, then each step (a replay as the
// graph's ops, in captured order), and pusher 1's program is `other`.
struct GraphWorkload {
  std::vector<OpSpec> graph;
  std::vector<OpSpec> prefix;
  struct Step {
    bool replay = false;
    OpSpec op;  // a push's op
  };
  std::vector<Step> steps;
  std::vector<OpSpec> other;

  // Derived: the oracle's programs, and per op id what ran it.
  std::vector<std::vector<OpSpec>> programs;
  std::vector<std::size_t> replay_base;  // per replay k: the id of its first op (ids of one replay are consecutive)
  std::vector<std::int64_t> replay_of;   // per id: the replay that runs it; -1 for a push
  std::vector<const OpSpec*> spec_of;    // per id
};

GraphWorkload generate_graph_workload(std::uint64_t seed, int pushers, std::size_t graph_ops, std::size_t replays,
                                      std::size_t other_ops) {
  std::mt19937_64 rng(seed);
  GraphWorkload w;
  for (std::size_t i = 0; i < graph_ops; ++i) w.graph.push_back(random_op(rng, kOracleVars));
  for (std::size_t i = 0; i < 8; ++i) w.prefix.push_back(random_op(rng, kOracleVars));
  for (std::size_t k = 0; k < replays; ++k) {
    const std::size_t pushes = rng() % 6;
    for (std::size_t i = 0; i < pushes; ++i) w.steps.push_back({false, random_op(rng, kOracleVars)});
    w.steps.push_back({true, {}});
  }
  for (std::size_t i = 0; i < 3; ++i) w.steps.push_back({false, random_op(rng, kOracleVars)});
  if (pushers > 1) {
    for (std::size_t i = 0; i < other_ops; ++i) w.other.push_back(random_op(rng, kOracleVars));
  }

  std::vector<OpSpec>& first = w.programs.emplace_back();
  std::vector<std::int64_t> replay_of_first;
  for (const OpSpec& op : w.prefix) {
    first.push_back(op);
    replay_of_first.push_back(-1);
  }
  std::int64_t k = 0;
  for (const GraphWorkload::Step& step : w.steps) {
    if (!step.replay) {
      first.push_back(step.op);
      replay_of_first.push_back(-1);
      continue;
    }
    w.replay_base.push_back(first.size());  // pusher 0's ids come first (order_oracle.h)
    for (const OpSpec& op : w.graph) {
      first.push_back(op);
      replay_of_first.push_back(k);
    }
    ++k;
  }
  w.replay_of = replay_of_first;
  if (pushers > 1) {
    w.programs.push_back(w.other);
    w.replay_of.insert(w.replay_of.end(), w.other.size(), -1);
  }
  for (const auto& program : w.programs) {
    for (const OpSpec& op : program) w.spec_of.push_back(&op);
  }
  return w;
}

struct GraphOutcome {
  std::vector<std::uint64_t> values;  // every variable's final value
  std::vector<std::uint64_t> folds;   // per op id
  std::vector<std::uint32_t> runs;    // per op id: how many times it ran
  std::size_t graph_size = 0;
  std::size_t ran_at_capture = 0;  // captured ops that ran as pushed ops (RunContext::replay == -1)
  std::size_t bad_replay = 0;      // captured ops that ran with a RunContext::replay beyond the replays made
  std::string order_failure;
  std::vector<std::size_t> order;
};

GraphOutcome run_graph_workload(const ExecutorFactory& factory, const GraphWorkload& w, std::uint64_t seed) {
  GraphOutcome out;
  out.values = initial_values(seed, kOracleVars);
  OrderOracle oracle(kOracleVars, w.programs);
  out.folds.assign(oracle.size(), 0);
  out.runs.assign(oracle.size(), 0);
  std::atomic<std::size_t> ran_at_capture{0}, bad_replay{0};
  {
    Engine engine(factory.options());
    std::vector<Var> vars;
    for (std::uint32_t v = 0; v < kOracleVars; ++v) vars.push_back(engine.NewVariable());
    auto work = [&out, &oracle](const OpSpec& op, std::size_t id, std::int64_t replay) {
      oracle.observe(id);
      ++out.runs[id];
      out.folds[id] = run_op(op, id, replay, out.values);
    };
    auto push = [&](const OpSpec& op, std::size_t id) {
      engine.Push([&work, &op, id](const RunContext& ctx) { work(op, id, ctx.replay); }, vars_of(op.reads, vars),
                  vars_of(op.mutates, vars));
    };
    Rendezvous start(static_cast<int>(w.programs.size()));
    std::thread other;
    if (w.programs.size() > 1) {
      other = std::thread([&] {
        (void)start.arrive_and_wait();
        for (std::size_t i = 0; i < w.other.size(); ++i) push(w.other[i], oracle.id(1, i));
      });
    }
    (void)start.arrive_and_wait();
    // An exception here (an engine bug) is rethrown once pusher 1 has been joined.
    std::exception_ptr failure;
    try {
      std::size_t next = 0;  // pusher 0's next op index
      for (const OpSpec& op : w.prefix) push(op, oracle.id(0, next++));
      // Captured while the prefix may still run, and while pusher 1 pushes: neither is captured.
      // Every third op of the graph is asynchronous (its Completion called by its function) where the executor takes
      // asynchronous ops; on host streams the graph is one of stream ops, replayed as one stream op (graph.h).
      Graph graph = engine.Capture([&] {
        for (std::size_t i = 0; i < w.graph.size(); ++i) {
          auto body = [&work, &w, &ran_at_capture, &bad_replay, i](const RunContext& ctx) {
            if (ctx.replay < 0) {
              ran_at_capture.fetch_add(1, std::memory_order_relaxed);
              return;
            }
            const auto k = static_cast<std::size_t>(ctx.replay);
            if (k >= w.replay_base.size()) {
              bad_replay.fetch_add(1, std::memory_order_relaxed);
              return;
            }
            work(w.graph[i], w.replay_base[k] + i, ctx.replay);
          };
          if (i % 3 == 1 && factory.takes_async) {
            engine.PushAsync(
                [body](const RunContext& ctx, Completion done) {
                  body(ctx);
                  done();
                },
                vars_of(w.graph[i].reads, vars), vars_of(w.graph[i].mutates, vars));
          } else {
            engine.Push(body, vars_of(w.graph[i].reads, vars), vars_of(w.graph[i].mutates, vars));
          }
        }
      });
      out.graph_size = graph.size();
      for (const GraphWorkload::Step& step : w.steps) {
        if (step.replay) {
          engine.Replay(graph);
          next += w.graph.size();
        } else {
          push(step.op, oracle.id(0, next++));
        }
      }
    } catch (...) {
      failure = std::current_exception();
    }
    if (other.joinable()) other.join();
    if (failure != nullptr) std::rethrow_exception(failure);
    engine.WaitForAll();
  }
  out.ran_at_capture = ran_at_capture.load();
  out.bad_replay = bad_replay.load();
  OrderOracle::Result order = oracle.total_order();
  out.order_failure = std::move(order.failure);
  out.order = std::move(order.order);
  return out;
}

TEST_CASE("replays equal serial execution of the captured ops, among pushes from one and two threads",
          "[graph][randomized]") {
  const std::size_t other_ops = sized(600, 200, 300);
  const auto seeds = test_seeds();
  std::vector<ExecutorFactory> factories = cpu_factories();
  factories.push_back(host_stream_factory());
  for (const auto& factory : factories) {
    DYNAMIC_SECTION(factory.name) {
      for (int pushers : {1, 2}) {
        for (std::uint64_t seed : seeds) {
          std::ostringstream where;
          where << factory.name << ", " << pushers << " pushers, DEPENGINE_TEST_SEED=" << seed;
          INFO(where.str());
          Watchdog watchdog("graph oracle");
          watchdog.note(where.str());
          const GraphWorkload w = generate_graph_workload(seed, pushers, 32, 20, other_ops);
          const GraphOutcome outcome = run_graph_workload(factory, w, seed);
          CHECK(outcome.graph_size == w.graph.size());
          CHECK(outcome.ran_at_capture == 0);
          CHECK(outcome.bad_replay == 0);
          CHECK(std::count(outcome.runs.begin(), outcome.runs.end(), 1U) ==
                static_cast<std::ptrdiff_t>(outcome.runs.size()));
          REQUIRE(outcome.order_failure.empty());

          // Serial execution in the order the engine chose.
          std::vector<std::uint64_t> values = initial_values(seed, kOracleVars);
          std::vector<std::uint64_t> folds(outcome.folds.size(), 0);
          for (std::size_t id : outcome.order) folds[id] = run_op(*w.spec_of[id], id, w.replay_of[id], values);
          CHECK(outcome.values == values);
          CHECK(outcome.folds == folds);

          if (pushers == 1) {  // and, independently of the oracle, serial execution in program order
            std::vector<std::uint64_t> serial = initial_values(seed, kOracleVars);
            std::vector<std::uint64_t> serial_folds;
            for (std::size_t id = 0; id < w.spec_of.size(); ++id) {
              serial_folds.push_back(run_op(*w.spec_of[id], id, w.replay_of[id], serial));
            }
            CHECK(outcome.values == serial);
            CHECK(outcome.folds == serial_folds);
          }
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------------
// 2. Boundary precision.

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
      Gate gate;
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
      CHECK_FALSE(gate.timed_out.load());
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

// ---------------------------------------------------------------------------------------------------------------------
// 3. Reads across the boundary.

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
      Gate gate;
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
      CHECK_FALSE(gate.timed_out.load());
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------------
// 4. Errors.

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
      std::vector<std::string> names(kReplays);
      ReplayIndex slot(kReplays);
      Graph graph = engine.Capture([&] {
        engine.Push(
            [](const RunContext& ctx) {
              if (ctx.replay == 1 || ctx.replay == 3) throw OpFailure(100 + static_cast<int>(ctx.replay));
            },
            {}, {a}, {.name = "graph thrower"});
        engine.Push([&] { ran_b.fetch_add(1); }, {a}, {b});
        engine.Push([&] { ran_c.fetch_add(1); }, {b}, {c});
        engine.Push(
            [&](const RunContext& ctx) {
              if (const auto k = slot(ctx)) {
                no_skip_saw[*k] =
                    ctx.input_error == nullptr ? 0 : thrown_id([&] { std::rethrow_exception(*ctx.input_error); });
              }
            },
            {a}, {d}, {.no_skip = true});
        engine.Push(
            [&](const RunContext& ctx) {
              ran_e.fetch_add(1);
              if (const auto k = slot(ctx)) names[*k] = std::string(ctx.name);
            },
            {}, {e}, {.name = "independent"});
      });
      REQUIRE(graph.size() == 5);

      engine.Replay(graph);  // replay 0: clean
      CHECK(thrown_id([&] { engine.WaitForAll(); }) == 0);
      CHECK(ran_b.load() == 1);
      CHECK(ran_c.load() == 1);

      engine.Replay(graph);                                    // replay 1: the first op throws
      engine.Push([&] { ran_after.fetch_add(1); }, {c}, {f});  // behind a poisoned variable: skipped, passes it on
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
      CHECK(ran_b.load() == 1);
      CHECK(ran_c.load() == 1);
      CHECK(ran_after.load() == 0);
      CHECK(ran_e.load() == 2);

      engine.Replay(graph);  // replay 2: the waits cleared every error
      CHECK(thrown_id([&] { engine.WaitForAll(); }) == 0);
      CHECK(ran_b.load() == 2);
      CHECK(ran_c.load() == 2);
      CHECK(ran_e.load() == 3);

      // Replay 3 fails again, and no WaitForVar reports it: WaitForAll does, as the replaying thread's error, and
      // clears what it poisoned, so replay 4 runs clean.
      engine.Replay(graph);
      CHECK(thrown_id([&] { engine.WaitForAll(); }) == 103);
      CHECK(ran_b.load() == 2);
      CHECK(ran_c.load() == 2);
      engine.Replay(graph);
      CHECK(thrown_id([&] { engine.WaitForAll(); }) == 0);
      CHECK(ran_b.load() == 3);
      CHECK(ran_c.load() == 3);
      CHECK(ran_e.load() == 5);
      CHECK(no_skip_saw == std::vector<int>{0, 101, 0, 103, 0});
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
        engine.Push([&] { ran0.fetch_add(1); }, {x}, {y});
        engine.Push([&] { ran1.fetch_add(1); }, {y}, {z});
        engine.Push([&] { ran2.fetch_add(1); }, {}, {w});
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
      CHECK(ran0.load() == 0);
      CHECK(ran1.load() == 0);
      CHECK(ran2.load() == 1);

      engine.Replay(graph);  // inputs clean again
      CHECK(thrown_id([&] { engine.WaitForAll(); }) == 0);
      CHECK(ran0.load() == 1);
      CHECK(ran1.load() == 1);
      CHECK(ran2.load() == 2);
      CHECK(no_skip_saw == std::vector<int>{9, 0});
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------------
// 5. Versions.

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
                  if (auto k = replay_of(ctx); k && x_value == static_cast<std::int64_t>(*k)) reads[*k].fetch_add(1);
                },
                {x}, {});
          }
          engine.Push(
              [&](const RunContext& ctx) {
                if (auto k = replay_of(ctx)) reads_seen[*k] = reads[*k].load();
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

// ---------------------------------------------------------------------------------------------------------------------
// 6. Misuse.

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
      Graph other = engine.Capture([&] { engine.Push([&] { other_ran.fetch_add(1); }, {}, {u}); });
      REQUIRE(other.size() == 1);

      Graph graph = engine.Capture([&] {
        engine.Push([&] { ++captured_ran; }, {}, {v});
        CHECK_THAT(error_message([&] { engine.DeleteVariable(v); }), RefusedInCapture("DeleteVariable"));
        CHECK_THAT(error_message([&] { engine.DeleteVariable(v, [&] { refused_ran.fetch_add(1); }); }),
                   RefusedInCapture("DeleteVariable"));
        PushOptions waits;
        waits.wait_fences = {Fence{&reached, 1}};
        CHECK_THAT(error_message([&] { engine.Push([&] { refused_ran.fetch_add(1); }, {}, {v}, waits); }),
                   Contains("fence", Catch::CaseSensitive::No) && Contains("capture", Catch::CaseSensitive::No));
        PushOptions signals;
        signals.signal_fences = {Fence{&reached, 2}};
        CHECK_THAT(error_message([&] { engine.Push([&] { refused_ran.fetch_add(1); }, {}, {v}, signals); }),
                   Contains("fence", Catch::CaseSensitive::No) && Contains("capture", Catch::CaseSensitive::No));
        CHECK_THAT(error_message([&] { engine.WaitForVar(v); }), RefusedInCapture("WaitForVar"));
        CHECK_THAT(error_message([&] { engine.WaitForAll(); }), RefusedInCapture("WaitForAll"));
        CHECK_THAT(error_message([&] { engine.WaitForFence(Fence{&reached, 1}); }), RefusedInCapture("WaitForFence"));
        CHECK_THAT(error_message([&] { engine.WaitForScope(scope); }), RefusedInCapture("WaitForScope"));
        CHECK_THAT(error_message([&] { engine.StopTrace(); }), RefusedInCapture("StopTrace"));
        CHECK_THAT(error_message([&] { engine.Replay(other); }), RefusedInCapture("Replay"));
        CHECK_THAT(error_message([&] { (void)engine.Capture([&] { nested_body_ran = true; }); }), Contains("Capture"));
        // A push checks its arguments as usual.
        CHECK_THROWS_AS(engine.Push([&] { refused_ran.fetch_add(1); }, {}, {Var{}}), Error);
        CHECK_THROWS_AS(engine.Push([&] { refused_ran.fetch_add(1); }, {}, {dead}), Error);
        CHECK_THROWS_AS(engine.Push([&] { refused_ran.fetch_add(1); }, {}, {foreign}), Error);
        CHECK_THROWS_AS(engine.Push([&] { refused_ran.fetch_add(1); }, {}, {v}, {.context = {.executor = 7}}), Error);
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
      CHECK(refused_ran.load() == 0);
      CHECK(other_ran.load() == 0);
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
        for (int i = 0; i < n; ++i) engine.Push([&] { ran.fetch_add(1); }, {}, {v});
      };
      CHECK_THAT(error_message([&] { (void)engine.Capture([&] { push_n(5); }); }),
                 Contains("Capture") && Contains("max_in_flight"));
      Graph fits = engine.Capture([&] { push_n(4); });
      CHECK(fits.size() == 4);
      engine.WaitForAll();
      CHECK(ran.load() == 0);  // captured ops do not run at capture
      engine.Replay(fits);     // admitted whole, at the bound
      engine.Replay(fits);
      engine.WaitForAll();
      CHECK(ran.load() == 8);
      CHECK(engine.Version(v) == 8);

      CHECK(thrown_id([&] {
              (void)engine.Capture([&] {
                push_n(2);
                throw OpFailure(5);
              });
            }) == 5);
      engine.WaitForAll();
      CHECK(ran.load() == 8);  // nothing of the abandoned capture ran
      CHECK(engine.InFlight() == 0);
      // Not left capturing: a push runs, and a new capture works.
      push_n(1);
      engine.WaitForAll();
      CHECK(ran.load() == 9);
      Graph again = engine.Capture([&] { push_n(1); });
      CHECK(again.size() == 1);
      engine.Replay(again);
      engine.WaitForAll();
      CHECK(ran.load() == 10);
      CHECK(engine.Version(v) == 10);
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
      auto count = [&ran] { ran.fetch_add(1); };

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
      CHECK(ran.load() == 2);
      engine.DeleteVariable(doomed);
      CHECK_THAT(error_message([&] { engine.Replay(graph); }), Contains("Replay"));
      // New variables may take the deleted one's slot: the graph still names a dead variable.
      std::vector<Var> fresh;
      for (int i = 0; i < 4; ++i) fresh.push_back(engine.NewVariable());
      CHECK_THAT(error_message([&] { engine.Replay(graph); }), Contains("Replay"));
      engine.WaitForAll();
      other.WaitForAll();
      CHECK(ran.load() == 2);  // nothing of a refused replay ran
      CHECK(engine.Version(keep) == 1);
      CHECK(other.Version(theirs_var) == 0);
      CHECK(engine.InFlight() == 0);
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------------
// 7. Back-pressure, and concurrent replays of one graph.

// `threads` threads each replay a random graph of 40 ops over 8 variables `replays` times in a row, without waits,
// under max_in_flight 64: a replay is admitted whole and counts as in flight until its last op completes, so two never
// fit at once and no more than 40 ops are ever in flight (admitted op by op, a second replay would fill the bound).
// Every op instance records what it observed; the replays are the oracle's pushers (each runs the graph's ops in
// captured order), a total order must explain the run and a serial execution in it must reproduce every value. With one
// thread, replay k is the k-th call, so serial execution in call order must match as well.
void check_replays(const ExecutorFactory& factory, int threads, std::size_t replays, std::uint64_t seed) {
  constexpr std::uint32_t kVars = 8;
  constexpr std::size_t kGraphOps = 40;
  constexpr std::size_t kBound = 64;
  static_assert(2 * kGraphOps > kBound && kGraphOps <= kBound);
  std::mt19937_64 rng(seed);
  std::vector<OpSpec> ops;
  for (std::size_t i = 0; i < kGraphOps; ++i) ops.push_back(random_op(rng, kVars));
  const std::size_t total = replays * static_cast<std::size_t>(threads);
  const std::vector<std::vector<OpSpec>> programs(total, ops);  // one per replay
  OrderOracle oracle(kVars, programs);
  std::vector<std::uint64_t> values = initial_values(seed, kVars);
  std::vector<std::uint64_t> folds(oracle.size(), 0);
  std::vector<std::uint32_t> runs(oracle.size(), 0);
  std::atomic<std::size_t> peak{0}, bad_replay{0};
  {
    Engine engine(factory.options(kBound));
    std::vector<Var> vars;
    for (std::uint32_t v = 0; v < kVars; ++v) vars.push_back(engine.NewVariable());
    Graph graph = engine.Capture([&] {
      for (std::size_t i = 0; i < ops.size(); ++i) {
        engine.Push(
            [&, i](const RunContext& ctx) {
              raise(peak, engine.InFlight());
              if (ctx.replay < 0 || static_cast<std::size_t>(ctx.replay) >= total) {
                bad_replay.fetch_add(1, std::memory_order_relaxed);
                return;
              }
              const std::size_t id = oracle.id(static_cast<std::size_t>(ctx.replay), i);
              oracle.observe(id);
              ++runs[id];
              folds[id] = run_op(ops[i], id, ctx.replay, values);
            },
            vars_of(ops[i].reads, vars), vars_of(ops[i].mutates, vars));
      }
    });
    Rendezvous start(threads);
    auto replayer = [&] {
      (void)start.arrive_and_wait();
      for (std::size_t k = 0; k < replays; ++k) {
        engine.Replay(graph);
        raise(peak, engine.InFlight());
      }
    };
    std::vector<std::thread> others;
    for (int t = 1; t < threads; ++t) others.emplace_back(replayer);
    replayer();
    for (auto& thread : others) thread.join();
    engine.WaitForAll();
    CHECK(engine.InFlight() == 0);
  }
  CHECK(peak.load() <= kGraphOps);
  CHECK(bad_replay.load() == 0);
  CHECK(std::count(runs.begin(), runs.end(), 1U) == static_cast<std::ptrdiff_t>(runs.size()));
  const OrderOracle::Result order = oracle.total_order();
  INFO(order.failure);
  REQUIRE(order.failure.empty());
  std::vector<std::uint64_t> serial = initial_values(seed, kVars);
  std::vector<std::uint64_t> serial_folds(oracle.size(), 0);
  for (std::size_t id : order.order) {
    const std::size_t k = id / kGraphOps;
    serial_folds[id] = run_op(ops[id % kGraphOps], id, static_cast<std::int64_t>(k), serial);
  }
  CHECK(values == serial);
  CHECK(folds == serial_folds);
  if (threads == 1) {
    std::vector<std::uint64_t> in_order = initial_values(seed, kVars);
    std::vector<std::uint64_t> in_order_folds(oracle.size(), 0);
    for (std::size_t id = 0; id < oracle.size(); ++id) {
      in_order_folds[id] = run_op(ops[id % kGraphOps], id, static_cast<std::int64_t>(id / kGraphOps), in_order);
    }
    CHECK(values == in_order);
    CHECK(folds == in_order_folds);
  }
}

TEST_CASE("100 replays in a row under a small bound, from one thread and from two at once, complete exactly",
          "[graph][back_pressure]") {
  const std::size_t replays = sized(100, 40, 100);
  for (const auto& factory : cpu_factories()) {
    DYNAMIC_SECTION(factory.name) {
      for (int threads : {1, 2}) {
        for (std::uint64_t seed : test_seeds()) {
          std::ostringstream where;
          where << factory.name << ", " << threads << " replaying threads, DEPENGINE_TEST_SEED=" << seed;
          INFO(where.str());
          Watchdog watchdog("graph back-pressure");
          watchdog.note(where.str());
          check_replays(factory, threads, replays, seed);
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------------
// 8. Lifetime.

// The functions own heap data (a string and a vector, copied into the graph): a replay that used the graph's storage
// after the Graph was destroyed would read freed memory (ASan) or wrong values.
TEST_CASE("a Graph destroyed while its replays wait for their inputs: they run to the end", "[graph][lifetime]") {
  constexpr std::int64_t kReplays = 5;
  for (const auto& factory : cpu_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("graph destroyed with queued replays on " + factory.name);
      Engine engine(factory.options());
      const Var z = engine.NewVariable(), v = engine.NewVariable();
      std::uint64_t value = 0;
      const std::string text(200, 'g');
      const std::vector<std::uint64_t> table{1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144};
      auto first = [](std::uint64_t& out, const std::string& s, std::int64_t k) {
        for (char c : s) out = mix(out, static_cast<std::uint64_t>(c));
        out = mix(out, static_cast<std::uint64_t>(k));
      };
      auto second = [](std::uint64_t& out, const std::vector<std::uint64_t>& t, std::int64_t k) {
        for (std::uint64_t x : t) out = mix(out, x + static_cast<std::uint64_t>(k));
      };
      HeldOp held(engine, {}, {z});
      {
        Graph graph = engine.Capture([&] {
          engine.Push([&value, first, text](const RunContext& ctx) { first(value, text, ctx.replay); }, {z}, {v});
          engine.Push([&value, second, table](const RunContext& ctx) { second(value, table, ctx.replay); }, {}, {v});
        });
        for (std::int64_t k = 0; k < kReplays; ++k) engine.Replay(graph);
      }  // destroyed with every op of its replays queued behind `held`
      const bool released = held.release();
      engine.WaitForAll();
      std::uint64_t expected = 0;
      for (std::int64_t k = 0; k < kReplays; ++k) {
        first(expected, text, k);
        second(expected, table, k);
      }
      CHECK(released);
      CHECK(value == expected);
    }
  }
}

// An op of the replay is running (held at a gate) when the Graph is destroyed. On the pools: on the inline executor
// the op would run inside Replay, on the thread that would destroy the graph.
TEST_CASE("a Graph destroyed while an op of its replay runs: the replay runs to the end", "[graph][lifetime]") {
  for (const auto& factory : threadpool_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("graph destroyed with a running replay on " + factory.name);
      Engine engine(factory.options());
      const Var v = engine.NewVariable(), w = engine.NewVariable();
      Gate gate;
      std::string seen_first, seen_second;  // written by the ops, which v orders
      const std::string text(300, 'r');
      auto graph = std::make_unique<Graph>(engine.Capture([&] {
        engine.Push(
            [&gate, &seen_first, text] {
              gate.pass();
              seen_first = text;
            },
            {}, {v});
        engine.Push([&seen_second, text] { seen_second = text + "!"; }, {v}, {v, w});
      }));
      engine.Replay(*graph);
      engine.Replay(*graph);
      const bool reached = gate.reached.wait();
      graph.reset();
      gate.open.set();
      engine.WaitForAll();
      CHECK(reached);
      CHECK(seen_first == text);
      CHECK(seen_second == text + "!");
      CHECK(engine.Version(w) == 2);
      CHECK_FALSE(gate.timed_out.load());
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------------
// 9. Pushes and replays from inside ops.

TEST_CASE("ops of a replay may push: the children are ordinary ops, ordered as pushes from inside an op",
          "[graph][nested]") {
  constexpr std::int64_t kReplays = 20;
  for (const auto& factory : cpu_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("pushes from replayed ops on " + factory.name);
      Engine engine(factory.options());

      // Back to back, no waits. Each parent mutates v, so the parents run one at a time in replay order and push
      // their children in that order; the children are ordered on w by it.
      const Var v = engine.NewVariable(), w = engine.NewVariable(), u = engine.NewVariable();
      const Var z = engine.NewVariable();
      std::uint64_t z_value = 0;
      engine.Push([&] { z_value = 43; }, {}, {z});
      std::uint64_t v_value = 0;
      std::vector<std::int64_t> children;  // written by the children, which w orders
      std::atomic<int> child_not_pushed{0}, child_saw_wrong_z{0}, u_ran{0};
      Graph graph = engine.Capture([&] {
        engine.Push(
            [&](const RunContext& ctx) {
              v_value = mix(v_value, static_cast<std::uint64_t>(ctx.replay));
              const std::int64_t k = ctx.replay;
              engine.Push(
                  [&children, &child_not_pushed, &child_saw_wrong_z, &z_value, k](const RunContext& child) {
                    if (child.replay != -1) child_not_pushed.fetch_add(1);
                    if (z_value != 43) child_saw_wrong_z.fetch_add(1);
                    children.push_back(k);
                  },
                  {z}, {w});
            },
            {}, {v});
        engine.Push([&] { u_ran.fetch_add(1); }, {}, {u});
      });
      for (std::int64_t k = 0; k < kReplays; ++k) engine.Replay(graph);
      engine.WaitForAll();  // waits for the children too
      std::vector<std::int64_t> expected_children;
      std::uint64_t expected_v = 0;
      for (std::int64_t k = 0; k < kReplays; ++k) {
        expected_children.push_back(k);
        expected_v = mix(expected_v, static_cast<std::uint64_t>(k));
      }
      CHECK(children == expected_children);
      CHECK(v_value == expected_v);
      CHECK(child_not_pushed.load() == 0);
      CHECK(child_saw_wrong_z.load() == 0);
      CHECK(u_ran.load() == kReplays);

      // A child on the parent's own variable runs after the parent and sees its write. (A second graph: its replays
      // count from 0 again.)
      const Var b = engine.NewVariable();
      std::uint64_t b_value = 0;
      std::vector<std::uint64_t> child_saw;  // written by the children, which b orders
      Graph second = engine.Capture([&] {
        engine.Push(
            [&](const RunContext& ctx) {
              const auto k = static_cast<std::uint64_t>(ctx.replay);
              engine.Push(
                  [&b_value, &child_saw, k] {
                    child_saw.push_back(b_value);
                    b_value = mix(b_value, 1000 + k);
                  },
                  {}, {b});
              b_value = mix(b_value, k);  // after the push: the child must still see it
            },
            {}, {b});
      });
      std::vector<std::uint64_t> expected_saw;
      std::uint64_t expected_b = 0;
      for (std::uint64_t k = 0; k < 5; ++k) {
        engine.Replay(second);
        engine.WaitForAll();
        expected_b = mix(expected_b, k);
        expected_saw.push_back(expected_b);
        expected_b = mix(expected_b, 1000 + k);
      }
      CHECK(child_saw == expected_saw);
      CHECK(b_value == expected_b);
    }
  }
}

// A replay from inside a running op does not wait for the bound (the op it would wait for may be the one replaying):
// with max_in_flight 3, an op replays a 3-op graph twice. Its ops queue behind the replaying op on v.
TEST_CASE("a replay from inside an op is exempt from the bound and orders after the op", "[graph][nested]") {
  for (const auto& factory : cpu_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("replay from inside an op on " + factory.name);
      Engine engine(factory.options(3));
      const Var v = engine.NewVariable();
      std::uint64_t value = 0;
      Graph graph = engine.Capture([&] {
        for (std::uint64_t j = 0; j < 3; ++j) {
          engine.Push(
              [&value, j](const RunContext& ctx) {
                value = mix(value, static_cast<std::uint64_t>(ctx.replay) * 10 + j);
              },
              {}, {v});
        }
      });
      std::string message = "(not run)";
      engine.Push(
          [&] {
            message = error_message([&] {
              engine.Replay(graph);
              engine.Replay(graph);
            });
            value = 1;  // after the replays: their ops must still see it
          },
          {}, {v});
      engine.WaitForAll();
      std::uint64_t expected = 1;
      for (std::uint64_t k = 0; k < 2; ++k) {
        for (std::uint64_t j = 0; j < 3; ++j) expected = mix(expected, k * 10 + j);
      }
      CHECK(message == "(threw nothing)");
      CHECK(value == expected);
      CHECK(engine.Version(v) == 7);
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
      Gate gate;
      Flag pushed;
      std::atomic<int> child_ran{0}, captured_ran{0};
      engine.Push(
          [&] {
            gate.pass();
            engine.Push([&] { child_ran.fetch_add(1); }, {}, {a});
            pushed.set();
          },
          {}, {engine.NewVariable()});
      bool reached = false, child_pushed = false;
      Graph graph = engine.Capture([&] {
        reached = gate.reached.wait();
        gate.open.set();
        child_pushed = pushed.wait();
        engine.Push([&] { captured_ran.fetch_add(1); }, {}, {b});
      });
      engine.WaitForAll();
      CHECK(reached);
      CHECK(child_pushed);
      CHECK(graph.size() == 1);
      CHECK(child_ran.load() == 1);
      CHECK(captured_ran.load() == 0);
      engine.Replay(graph);
      engine.WaitForAll();
      CHECK(child_ran.load() == 1);
      CHECK(captured_ran.load() == 1);
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
            parent_ran.fetch_add(1);
            engine.Push([&] { child_ran.fetch_add(1); }, {}, {w});
          },
          {v}, {});
      bool released = false;
      Graph graph = engine.Capture([&] {
        released = held.release();  // on the inline executor the parent runs here, inside the body
        engine.Push([&] { captured_ran.fetch_add(1); }, {}, {c});
      });
      engine.WaitForAll();
      CHECK(released);
      CHECK(parent_ran.load() == 1);
      CHECK(child_ran.load() == 1);
      CHECK(graph.size() == 1);
      CHECK(captured_ran.load() == 0);
      engine.Replay(graph);
      engine.WaitForAll();
      CHECK(parent_ran.load() == 1);
      CHECK(child_ran.load() == 1);
      CHECK(captured_ran.load() == 1);
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
                in_op.store(engine.Capturing());
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
      CHECK_FALSE(in_op.load());
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

// Replayed ops do not appear in traces (Engine::Replay), and neither do captured ones: a trace of pushes interleaved
// with replays holds a slice per pushed op only, and every arrow joins two of them (a pushed op whose completion
// grants a replay must not draw an arrow to it). A replay waiting in a queue shows in InFlightReport.
TEST_CASE("traces and in-flight reports with replays", "[graph][trace]") {
  constexpr int kRounds = 5;
  for (const auto& factory : cpu_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("traces with replays on " + factory.name);
      Engine engine(factory.options());
      const Var v0 = engine.NewVariable(), v1 = engine.NewVariable(), v2 = engine.NewVariable();
      const std::string path = temporary_trace_path("graph-replays");
      engine.StartTrace(path);
      HeldOp held(engine, {}, {v0}, {.name = "held"});
      std::atomic<int> graph_ran{0}, pushed_ran{0};
      Graph graph = engine.Capture([&] {
        engine.Push([&] { graph_ran.fetch_add(1); }, {v0}, {v1}, {.name = "graph op a"});
        engine.Push([&] { graph_ran.fetch_add(1); }, {v1}, {v2}, {.name = "graph op b"});
      });
      for (int i = 0; i < kRounds; ++i) {
        engine.Replay(graph);
        engine.Push([&] { pushed_ran.fetch_add(1); }, {v2}, {v0}, {.name = "pushed " + std::to_string(i)});
      }
      const std::string report = engine.InFlightReport();
      const bool released = held.release();
      engine.WaitForAll();
      engine.StopTrace();
      CHECK(released);
      CHECK(graph_ran.load() == 2 * kRounds);
      CHECK(pushed_ran.load() == kRounds);
      CHECK_THAT(report, Contains("replay", Catch::CaseSensitive::No));
      const TraceFile trace = read_trace(path);
      std::remove(path.c_str());
      std::vector<std::string> names;
      for (const auto& [op, slice] : trace.slices) names.push_back(slice.name);
      std::sort(names.begin(), names.end());
      std::vector<std::string> expected{"held"};
      for (int i = 0; i < kRounds; ++i) {
        expected.push_back("pushed " + std::to_string(i));
        expected.push_back("graph op a (replay " + std::to_string(i) + ")");
        expected.push_back("graph op b (replay " + std::to_string(i) + ")");
      }
      std::sort(expected.begin(), expected.end());
      CHECK(names == expected);
      for (const auto& [op, slice] : trace.slices) {
        if (slice.name.rfind("graph op a", 0) == 0) {
          CHECK(slice.reads == "v0");
          CHECK(slice.mutates == "v1");
        }
      }
      // Arrows: a -> b inside each replay (b's last grant is a's), and across each replay's boundary, both ways:
      // what was pushed before it on v0 releases its a (held, then pushed i - 1), and its b releases pushed i (v2).
      std::vector<std::pair<std::string, std::string>> arrows;
      for (const TraceFile::Flow& flow : trace.flows) {
        REQUIRE(trace.slices.count(flow.from) == 1);
        REQUIRE(trace.slices.count(flow.to) == 1);
        arrows.emplace_back(trace.slices.at(flow.from).name, trace.slices.at(flow.to).name);
      }
      std::sort(arrows.begin(), arrows.end());
      std::vector<std::pair<std::string, std::string>> expected_arrows;
      for (int i = 0; i < kRounds; ++i) {
        const std::string replay = " (replay " + std::to_string(i) + ")";
        expected_arrows.emplace_back(i == 0 ? "held" : "pushed " + std::to_string(i - 1), "graph op a" + replay);
        expected_arrows.emplace_back("graph op a" + replay, "graph op b" + replay);
        expected_arrows.emplace_back("graph op b" + replay, "pushed " + std::to_string(i));
      }
      std::sort(expected_arrows.begin(), expected_arrows.end());
      CHECK(arrows == expected_arrows);
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
        engine.Push([&] { ran.fetch_add(1); }, {}, {v}, {.name = "scoped a", .scope = &*scope});
        engine.Push([&] { ran.fetch_add(1); }, {v}, {w}, {.name = "scoped b", .scope = &*scope});
        engine.PushAsync(
            [&](Completion done) {
              ran.fetch_add(1);
              done();
            },
            {w}, {}, {.name = "scoped async c", .scope = &*scope});
      });
      CHECK(scope->pending() == 0);  // captured, not pushed

      engine.Replay(graph);
      engine.WaitForScope(*scope);
      CHECK(ran.load() == 3);
      CHECK(scope->pending() == 0);

      HeldOp held(engine, {}, {v}, {.name = "held"});  // the next replay's ops wait for it
      engine.Replay(graph);
      CHECK(scope->pending() == 3);
      scope->Cancel();
      REQUIRE(held.release());
      engine.WaitForScope(*scope);
      CHECK(ran.load() == 3);  // cancelled before they started: none ran
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
      CHECK(ran.load() == 3);

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

// Async ops in a graph: each replay's async op hands its Completion to a completer thread, which does the op's work
// and completes it after the function has returned; the graph's values must equal serial execution. An async op that
// completes inside its function, one whose function throws before completing (its error poisons what it mutates), and
// a second call of a replayed op's Completion behave as for pushed ops.
TEST_CASE("async ops of a graph complete through their Completion, from any thread", "[graph][async]") {
  constexpr int kReplays = 50;
  for (const auto& factory : cpu_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("async ops in a graph on " + factory.name);
      Engine engine(factory.options());
      const Var a = engine.NewVariable(), b = engine.NewVariable(), c = engine.NewVariable();
      std::uint64_t va = 1, vb = 2, vc = 3;
      std::mutex mutex;
      std::condition_variable wake;
      std::vector<std::function<void()>> pending;  // guarded by mutex
      bool stop = false;                           // guarded by mutex
      std::thread completer([&] {
        std::unique_lock lock(mutex);
        for (;;) {
          wake.wait(lock, [&] { return stop || !pending.empty(); });
          if (pending.empty()) return;
          std::function<void()> work = std::move(pending.front());
          pending.erase(pending.begin());
          lock.unlock();
          work();
          lock.lock();
        }
      });
      Graph graph = engine.Capture([&] {
        engine.Push([&](const RunContext& ctx) { va = va * 3 + static_cast<std::uint64_t>(ctx.replay); }, {}, {a});
        engine.PushAsync(
            [&](Completion done) {
              std::lock_guard lock(mutex);
              pending.push_back([&, done] {
                vb = vb * 7 + va;
                done();
              });
              wake.notify_one();
            },
            {a}, {b});
        engine.PushAsync(
            [&](Completion done) {
              vc = vc * 5 + vb;
              done();  // inside the function
            },
            {b}, {c});
        engine.Push([&] { va += vc; }, {c}, {a});
      });
      REQUIRE(graph.size() == 4);
      for (int k = 0; k < kReplays; ++k) engine.Replay(graph);
      engine.WaitForAll();
      std::uint64_t sa = 1, sb = 2, sc = 3;
      for (int k = 0; k < kReplays; ++k) {
        sa = sa * 3 + static_cast<std::uint64_t>(k);
        sb = sb * 7 + sa;
        sc = sc * 5 + sb;
        sa += sc;
      }
      CHECK(va == sa);
      CHECK(vb == sb);
      CHECK(vc == sc);
      CHECK(engine.Version(b) == kReplays);

      // A function that throws before completing: its op fails, the error poisons what it mutates.
      std::optional<Completion> kept;
      Graph failing = engine.Capture([&] {
        engine.PushAsync(
            [&](const RunContext& ctx, Completion done) {
              if (ctx.replay == 1) throw std::runtime_error("async op failed");
              kept = done;
              done();
            },
            {}, {b}, {.name = "async"});
      });
      engine.Replay(failing);
      engine.WaitForVar(b);
      REQUIRE(kept.has_value());
      CHECK_THROWS_AS((*kept)(), Error);  // called twice
      engine.Replay(failing);
      CHECK_THROWS_WITH(engine.WaitForVar(b), "async op failed");
      engine.Replay(failing);
      CHECK_NOTHROW(engine.WaitForVar(b));
      {
        std::lock_guard lock(mutex);
        stop = true;
      }
      wake.notify_one();
      completer.join();
    }
  }
}

// A replayed op keeps the options it was captured with: its executor, its name.
TEST_CASE("replayed ops keep their push options", "[graph][options]") {
  Watchdog watchdog("graph options");
  Engine engine(mixed_options({threadpool_factory(2), inline_factory()}));
  const Var v = engine.NewVariable();
  std::vector<const Executor*> executors;  // written by the ops, which v orders
  std::vector<std::string> names;
  std::vector<std::int64_t> replays;
  auto record = [&](const RunContext& ctx) {
    executors.push_back(ctx.executor);
    names.emplace_back(ctx.name);
    replays.push_back(ctx.replay);
  };
  Graph graph = engine.Capture([&] {
    engine.Push(record, {}, {v}, {.context = {.executor = 1}, .name = "on inline"});
    engine.Push(record, {}, {v}, {.name = "on the pool"});
  });
  engine.Replay(graph);
  engine.Replay(graph);
  engine.WaitForAll();
  const std::vector<const Executor*> expected_executors{&engine.executor(1), &engine.executor(0), &engine.executor(1),
                                                        &engine.executor(0)};
  CHECK(executors == expected_executors);
  CHECK(names == std::vector<std::string>{"on inline", "on the pool", "on inline", "on the pool"});
  CHECK(replays == std::vector<std::int64_t>{0, 0, 1, 1});
}

}  // namespace
}  // namespace depengine::test
