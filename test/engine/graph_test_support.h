// Helpers shared by the graph tests (engine/graph.h; the graph_*_test.cpp files beside this one): the executors
// graphs run on in those tests, a flag and a gate for ops that must hold their thread until the test thread lets them
// go (bounded by meet_limit(), never a sleep), a matcher for calls refused inside a capture, and the random ops of the
// randomized tests with the body that folds what they read into what they write.
#pragma once

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <depengine/engine/engine.h>

#include "test/engine/order_oracle.h"
#include "test/engine/test_support.h"
#include "test/executors/executor_factories.h"

namespace depengine::test {

// The executors that graphs support in this step: the CPU ones.
inline std::vector<ExecutorFactory> cpu_factories() {
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
struct OpGate {
  Flag reached;
  Flag open;
  std::atomic<bool> timed_out{false};
  void pass() {
    reached.set();
    // relaxed: read by the test thread after the engine's wait, which orders it.
    if (!open.wait()) timed_out.store(true, std::memory_order_relaxed);
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
inline void raise(std::atomic<std::size_t>& peak, std::size_t value) {
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
      // relaxed: a count, read by the test thread after the engine's wait (out_of_range()).
      out_of_range_.fetch_add(1, std::memory_order_relaxed);
      return std::nullopt;
    }
    return static_cast<std::size_t>(ctx.replay);
  }
  [[nodiscard]] int out_of_range() const { return out_of_range_.load(std::memory_order_relaxed); }

 private:
  const std::size_t count_;
  std::atomic<int> out_of_range_{0};
};

inline std::vector<Var> vars_of(const std::vector<std::uint32_t>& indices, const std::vector<Var>& vars) {
  std::vector<Var> out;
  for (std::uint32_t index : indices) out.push_back(vars[index]);
  return out;
}

// A random op: reads 0 to 4 variables, mutates 1 or 2 (a variable may be named twice, or read and mutated).
inline OpSpec random_op(std::mt19937_64& rng, std::uint32_t num_vars) {
  OpSpec op;
  const std::size_t reads = rng() % 5;
  const std::size_t mutates = 1 + rng() % 2;
  for (std::size_t r = 0; r < reads; ++r) op.reads.push_back(static_cast<std::uint32_t>(rng() % num_vars));
  for (std::size_t m = 0; m < mutates; ++m) op.mutates.push_back(static_cast<std::uint32_t>(rng() % num_vars));
  return op;
}

// An op of a chain-heavy graph: it mutates one of the variables, and reads one other one time in four. Most such ops
// have one successor, the next op on their variable, which waits for them alone: a replay runs it right after them on
// the same thread (engine/detail/graph_plan.h, Chains).
inline OpSpec random_chain_op(std::mt19937_64& rng, std::uint32_t num_vars) {
  OpSpec op;
  op.mutates.push_back(static_cast<std::uint32_t>(rng() % num_vars));
  if (rng() % 4 == 0) op.reads.push_back(static_cast<std::uint32_t>(rng() % num_vars));
  return op;
}

// The body of every op of the randomized tests: folds the op's id, the replay that runs it (RunContext::replay; -1
// for a pushed op) and what it reads, in list order, into every variable it mutates. Returns the fold.
inline std::uint64_t run_op(const OpSpec& op, std::uint64_t id, std::int64_t replay,
                            std::vector<std::uint64_t>& values) {
  std::uint64_t h = mix(id, static_cast<std::uint64_t>(replay + 2) * 1000);
  for (std::uint32_t var : op.reads) h = mix(h, values[var]);
  for (std::uint32_t var : op.mutates) h = mix(h, values[var]);
  for (std::size_t j = 0; j < op.mutates.size(); ++j) values[op.mutates[j]] = mix(h, values[op.mutates[j]] + j);
  return h;
}

inline std::vector<std::uint64_t> initial_values(std::uint64_t seed, std::uint32_t num_vars) {
  std::vector<std::uint64_t> values(num_vars);
  for (std::uint32_t v = 0; v < num_vars; ++v) values[v] = mix(seed, v + 1);
  return values;
}

}  // namespace depengine::test
