// Errors under concurrency (engine.h, "Errors" and "Waits"), randomized: 1 to 4 pushers, each on variables of its own,
// push ops that fail in every way an op can (a synchronous throw, an error passed to a Completion, a throw after a
// successful completion, a deleter that throws, a stream op whose function throws while it is issued), while a
// monitor thread calls WaitForAll in a loop and the pushers themselves sometimes call WaitForAll. Checked:
//   - each pusher's WaitForVar(v) rethrows exactly when a serial model of its own ops says v carries an error, and an
//     error that could be v's, whatever the monitor's WaitForAll did meanwhile;
//   - every error raised is reported at least once: rethrown by some wait, or received by the error sink (at a
//     WaitForAll that cleared it, or at destruction). Lost = raised - reported must be 0.
//
// Seeds: DEPENGINE_TEST_SEED reruns one; DEPENGINE_TEST_REPEAT sets how many fresh ones (default 3).
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <depengine/engine/engine.h>

#include "test/engine/test_support.h"
#include "test/executors/executor_factories.h"

namespace depengine::test {
namespace {

constexpr int kVarsPerPusher = 4;

// The ids every party saw: raised by an op (recorded by the op itself, as it raises), rethrown by a wait; and the waits
// that disagreed with the model. Catch2's assertions are for the test's thread only, so the other threads record here
// and the test checks afterwards.
class Ledger {
 public:
  void raised(int id) { add(raised_, id); }
  void reported(int id) { add(reported_, id); }
  // A WaitForVar that rethrew `id` (0: nothing) where the model expected none of `expected` (empty: nothing).
  void misled(int id, const std::set<int>& expected) {
    std::lock_guard lock(mutex_);
    misled_.push_back("rethrew " + std::to_string(id) + ", expected " +
                      (expected.empty() ? std::string("nothing") : "one of " + std::to_string(expected.size())));
  }
  [[nodiscard]] std::set<int> raised() const { return get(raised_); }
  [[nodiscard]] std::set<int> reported() const { return get(reported_); }
  [[nodiscard]] std::vector<std::string> misled() const {
    std::lock_guard lock(mutex_);
    return misled_;
  }

 private:
  void add(std::set<int>& ids, int id) {
    std::lock_guard lock(mutex_);
    ids.insert(id);
  }
  [[nodiscard]] std::set<int> get(const std::set<int>& ids) const {
    std::lock_guard lock(mutex_);
    return ids;
  }

  mutable std::mutex mutex_;
  std::set<int> raised_;             // guarded by mutex_
  std::set<int> reported_;           // guarded by mutex_
  std::vector<std::string> misled_;  // guarded by mutex_
};

enum class Kind { kSucceeds, kThrows, kCompletesWithError, kThrowsAfterCompleting, kDeleterThrows };

// One pusher: its variables, and the serial model of what error each carries (the ids it may carry; empty: clean).
class Pusher {
 public:
  Pusher(Engine& engine, Ledger& ledger, const ExecutorFactory& factory, int index, std::uint64_t seed)
      : engine_(engine), ledger_(ledger), factory_(factory), rng_(seed), next_id_(index * 1'000'000 + 1) {
    for (int i = 0; i < kVarsPerPusher; ++i) vars_.push_back(engine.NewVariable());
    model_.resize(kVarsPerPusher);
  }

  void run(int rounds) {
    for (int round = 0; round < rounds; ++round) {
      push_one();
      if (chance(0.25)) wait_for_var(pick());
      if (chance(0.03)) wait_for_all();
    }
    for (int v = 0; v < kVarsPerPusher; ++v) wait_for_var(v);
  }

 private:
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  int pick() { return std::uniform_int_distribution<int>(0, kVarsPerPusher - 1)(rng_); }

  Kind draw_kind() {
    if (!chance(0.3)) return Kind::kSucceeds;
    switch (std::uniform_int_distribution<int>(0, factory_.takes_async ? 3 : 1)(rng_)) {
      case 0:
        return Kind::kThrows;
      case 1:
        return Kind::kDeleterThrows;
      case 2:
        return Kind::kCompletesWithError;
      default:
        return Kind::kThrowsAfterCompleting;
    }
  }

  void push_one() {
    const Kind kind = draw_kind();
    const int id = next_id_++;
    Ledger& ledger = ledger_;
    if (kind == Kind::kDeleterThrows) {  // raised, attached to no variable: only WaitForAll or the sink reports it
      engine_.DeleteVariable(engine_.NewVariable(), [&ledger, id] {
        ledger.raised(id);
        throw OpFailure(id);
      });
      return;
    }
    std::vector<int> reads, writes;
    for (int v = 0; v < kVarsPerPusher; ++v) {
      if (chance(0.3)) reads.push_back(v);
      if (chance(0.3)) writes.push_back(v);
    }
    if (writes.empty()) writes.push_back(pick());
    const bool no_skip = chance(0.2);
    std::vector<Var> read_vars, write_vars;
    for (int v : reads) read_vars.push_back(vars_[v]);
    for (int v : writes) write_vars.push_back(vars_[v]);
    const PushOptions options{.no_skip = no_skip};
    switch (kind) {
      case Kind::kSucceeds:
        engine_.Push([] {}, read_vars, write_vars, options);
        break;
      case Kind::kThrows:
        engine_.Push(
            [&ledger, id] {
              ledger.raised(id);
              throw OpFailure(id);
            },
            read_vars, write_vars, options);
        break;
      case Kind::kCompletesWithError:
        engine_.PushAsync(
            [&ledger, id](Completion done) {
              ledger.raised(id);
              done(std::make_exception_ptr(OpFailure(id)));
            },
            read_vars, write_vars, options);
        break;
      case Kind::kThrowsAfterCompleting:
        engine_.PushAsync(
            [&ledger, id](Completion done) {
              done();
              ledger.raised(id);
              throw OpFailure(id);
            },
            read_vars, write_vars, options);
        break;
      case Kind::kDeleterThrows:
        break;
    }
    model(reads, writes, no_skip, kind == Kind::kThrows || kind == Kind::kCompletesWithError ? id : 0);
  }

  // The serial model: an op is skipped when a variable it uses carries an error (unless no_skip) and passes that
  // error on; an op that runs and fails attaches its own; a variable keeps its first error.
  void model(const std::vector<int>& reads, const std::vector<int>& writes, bool no_skip, int fails_with) {
    std::set<int> input;
    for (const std::vector<int>* list : {&reads, &writes}) {
      for (int v : *list) input.insert(model_[v].begin(), model_[v].end());
    }
    std::set<int> attached;
    if (!input.empty() && !no_skip) {
      attached = input;  // skipped: one of its inputs' errors (which one depends on variable addresses)
    } else if (fails_with != 0) {
      attached = {fails_with};
    }
    if (attached.empty()) return;
    for (int v : writes) {
      if (model_[v].empty()) model_[v] = attached;
    }
  }

  void wait_for_var(int v) {
    int id = 0;
    try {
      engine_.WaitForVar(vars_[v]);
    } catch (const OpFailure& failure) {
      id = failure.id;
    }
    if (model_[v].empty() ? id != 0 : model_[v].count(id) == 0) ledger_.misled(id, model_[v]);
    if (id != 0) ledger_.reported(id);
    model_[v].clear();
  }

  void wait_for_all() {
    try {
      engine_.WaitForAll();
    } catch (const OpFailure& failure) {
      ledger_.reported(failure.id);
    }
    for (std::set<int>& errors : model_) errors.clear();  // this thread's ops' errors: all of them cleared
  }

  Engine& engine_;
  Ledger& ledger_;
  const ExecutorFactory& factory_;
  std::mt19937_64 rng_;
  int next_id_;
  std::vector<Var> vars_;
  std::vector<std::set<int>> model_;  // per variable
};

TEST_CASE("random failing ops on 1-4 pushers with a WaitForAll monitor: no error is lost, no wait is misled",
          "[engine][errors][random][concurrency]") {
  const int rounds = static_cast<int>(sized(2000, 300, 300));
  for (const auto& factory : oracle_factories()) {
    DYNAMIC_SECTION(factory.name) {
      std::size_t raised_total = 0, reported_total = 0, lost_total = 0;
      for (const std::uint64_t seed : test_seeds()) {
        CAPTURE(seed);
        Watchdog watchdog("random errors on " + factory.name);
        watchdog.note("seed " + std::to_string(seed));
        std::mt19937_64 rng(seed);
        const int pushers = std::uniform_int_distribution<int>(1, 4)(rng);
        Ledger ledger;
        SinkLog sunk;
        {
          Engine engine(sunk.attach(factory.options()));
          std::atomic<bool> done{false};
          std::thread monitor([&] {
            // acquire: pairs with the release store below; only ends the loop.
            while (!done.load(std::memory_order_acquire)) {
              try {
                engine.WaitForAll();
              } catch (const OpFailure& failure) {
                ledger.reported(failure.id);
              }
            }
          });
          std::vector<std::thread> threads;
          for (int p = 0; p < pushers; ++p) {
            threads.emplace_back(
                [&, p, pusher_seed = rng()] { Pusher(engine, ledger, factory, p + 1, pusher_seed).run(rounds); });
          }
          for (std::thread& thread : threads) thread.join();
          done.store(true, std::memory_order_release);
          monitor.join();
        }  // destroyed: what no wait reported goes to the sink
        std::set<int> reported = ledger.reported();
        for (const SinkLog::Received& error : sunk.received()) {
          CHECK(error.id > 0);
          reported.insert(error.id);
        }
        const std::set<int> raised = ledger.raised();
        std::vector<int> lost;
        std::set_difference(raised.begin(), raised.end(), reported.begin(), reported.end(), std::back_inserter(lost));
        CAPTURE(pushers, raised.size(), reported.size());
        CHECK(lost.empty());
        CHECK(ledger.misled() == std::vector<std::string>{});
        raised_total += raised.size();
        reported_total += reported.size();
        lost_total += lost.size();
      }
      std::printf("errors_random_test %s: raised %zu, reported %zu, lost %zu\n", factory.name.c_str(), raised_total,
                  reported_total, lost_total);
    }
  }
}

}  // namespace
}  // namespace depengine::test
