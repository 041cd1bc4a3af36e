// The order of ops on a variable (engine.h, "Order" and "Lists"): concurrent reads, exclusive mutations, WAR, WAW and
// RAW in push order, versions, folding of duplicated variables, priorities. Every test runs on every executor.
#include <array>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include <depengine/engine/engine.h>

#include "test/engine/test_support.h"
#include "test/executors/executor_factories.h"

namespace depengine::test {
namespace {

// Atomics: counters bumped by ops are read by the test thread after a wait (WaitForAll, WaitForVar, WaitForScope), a
// join or the engine's destruction, which orders every op's writes before the read, so they are relaxed.

TEST_CASE("consecutive reads of a variable run at the same time", "[engine][ordering]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("concurrent reads on " + factory.name);
      Engine engine(factory.options());
      const Var v = engine.NewVariable();
      if (!factory.concurrent_ops) {
        // Its ops' functions never run at the same time (executor_factories.h, concurrent_ops): reads would wait
        // for a meeting that cannot happen. Check that documented behaviour instead, with reads pushed from two
        // threads: every one runs, and none overlaps another.
        constexpr int kReads = 200;
        std::atomic<int> inside{0}, overlaps{0}, ran{0};
        auto push_reads = [&] {
          for (int i = 0; i < kReads; ++i) {
            engine.Push(
                [&] {
                  // relaxed: the counters detect overlap; the executor's issue order is what the test observes.
                  if (inside.fetch_add(1, std::memory_order_relaxed) != 0)
                    overlaps.fetch_add(1, std::memory_order_relaxed);
                  linger();
                  inside.fetch_sub(1, std::memory_order_relaxed);
                  ran.fetch_add(1, std::memory_order_relaxed);
                },
                {v}, {});
          }
        };
        std::thread other(push_reads);
        push_reads();
        other.join();
        engine.WaitForAll();
        CHECK(ran.load(std::memory_order_relaxed) == 2 * kReads);
        CHECK(overlaps.load(std::memory_order_relaxed) == 0);
        continue;
      }
      Rendezvous meet(2);
      std::atomic<int> met{0};
      // Two threads push one read each. Each read waits for the other to start: they meet only if the engine lets
      // both run at once. (Pushing from two threads makes this observable on the inline executor too; on a pool with
      // one worker, the pusher's WaitForAll runs the second read.)
      auto push_read = [&] {
        engine.Push(
            [&] {
              // relaxed: counted, read after the joins below.
              if (meet.arrive_and_wait()) met.fetch_add(1, std::memory_order_relaxed);
            },
            {v}, {});
        engine.WaitForAll();
      };
      std::thread other(push_read);
      push_read();
      other.join();
      CHECK(met.load(std::memory_order_relaxed) == 2);
    }
  }
}

// Reads and mutations of one variable pushed from two threads: a mutation never overlaps any other use.
TEST_CASE("a mutation runs alone: no read or other mutation of its variable overlaps it", "[engine][ordering]") {
  const int per_pusher = static_cast<int>(sized(2000, 150, 500));
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("exclusive mutations on " + factory.name);
      Engine engine(factory.options());
      const Var v = engine.NewVariable();
      std::atomic<int> readers{0}, writers{0}, violations{0};
      std::atomic<int> writes_pushed{0};
      std::uint64_t data = 0;  // plain: the engine's order is all that protects it (TSAN checks)
      // relaxed throughout: the counters detect overlap; the engine's ordering is what the test observes.
      auto read = [&] {
        readers.fetch_add(1, std::memory_order_relaxed);
        if (writers.load(std::memory_order_relaxed) != 0) violations.fetch_add(1, std::memory_order_relaxed);
        const std::uint64_t seen = data;
        linger();
        if (writers.load(std::memory_order_relaxed) != 0 || data != seen) {
          violations.fetch_add(1, std::memory_order_relaxed);
        }
        readers.fetch_sub(1, std::memory_order_relaxed);
      };
      auto write = [&] {
        if (writers.fetch_add(1, std::memory_order_relaxed) != 0) violations.fetch_add(1, std::memory_order_relaxed);
        if (readers.load(std::memory_order_relaxed) != 0) violations.fetch_add(1, std::memory_order_relaxed);
        data = data * 3 + 1;
        linger();
        if (readers.load(std::memory_order_relaxed) != 0) violations.fetch_add(1, std::memory_order_relaxed);
        writers.fetch_sub(1, std::memory_order_relaxed);
      };
      auto pusher = [&](unsigned seed) {
        std::mt19937 rng(seed);
        for (int i = 0; i < per_pusher; ++i) {
          if (rng() % 3 == 0) {
            writes_pushed.fetch_add(1, std::memory_order_relaxed);
            engine.Push(write, {}, {v});
          } else {
            engine.Push(read, {v}, {});
          }
        }
      };
      std::thread other(pusher, 2u);
      pusher(1u);
      other.join();
      engine.WaitForAll();
      CHECK(violations.load(std::memory_order_relaxed) == 0);
      std::uint64_t expected = 0;
      for (int i = 0; i < writes_pushed.load(std::memory_order_relaxed); ++i) expected = expected * 3 + 1;
      CHECK(data == expected);
    }
  }
}

TEST_CASE("write after read: a mutation waits for every earlier read to complete", "[engine][ordering]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("WAR on " + factory.name);
      Engine engine(factory.options());
      const Var v = engine.NewVariable();
      HeldOp first(engine, {v}, {});
      HeldOp second(engine, {v}, {});
      // Both reads hold v (on a pool, running together).
      REQUIRE(wait_until([&] { return first.holding() && second.holding(); }));
      std::atomic<int> reads_completed{0};
      int completed_when_written = -1;
      int value = 0;
      engine.Push(
          [&] {
            completed_when_written = reads_completed.load(std::memory_order_relaxed);
            value = 1;
          },
          {}, {v});
      // A read pushed after the mutation must not join the running reads: it waits for the mutation.
      int seen_by_later_read = -1;
      engine.Push([&] { seen_by_later_read = value; }, {v}, {});

      // relaxed: the mutation reads it after the grant that follows these stores, which orders them.
      reads_completed.store(1, std::memory_order_relaxed);
      REQUIRE(first.release());
      reads_completed.store(2, std::memory_order_relaxed);
      REQUIRE(second.release());
      engine.WaitForVar(v);
      CHECK(completed_when_written == 2);
      CHECK(seen_by_later_read == 1);
    }
  }
}

// One pusher, random reads and mutations over a few variables: every read sees, and every mutation builds on, exactly
// the state that serial execution in push order gives.
TEST_CASE("RAW and WAW follow push order on every variable", "[engine][ordering]") {
  const int ops = static_cast<int>(sized(5000, 400, 1500));
  constexpr int kVars = 4;
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("RAW/WAW on " + factory.name);
      Engine engine(factory.options());
      std::vector<Var> vars;
      for (int i = 0; i < kVars; ++i) vars.push_back(engine.NewVariable());
      std::array<std::uint64_t, kVars> value{};
      std::array<std::uint64_t, kVars> expected{};
      std::vector<std::uint64_t> seen(static_cast<std::size_t>(ops), 0);
      std::vector<std::uint64_t> expected_seen(static_cast<std::size_t>(ops), 0);
      std::mt19937 rng(7);
      for (int i = 0; i < ops; ++i) {
        const auto k = static_cast<std::size_t>(rng() % kVars);
        const auto slot = static_cast<std::size_t>(i);
        if (rng() % 2 == 0) {
          engine.Push([&value, k, i] { value[k] = mix(value[k], static_cast<std::uint64_t>(i)); }, {}, {vars[k]});
          expected[k] = mix(expected[k], static_cast<std::uint64_t>(i));
        } else {
          engine.Push([&value, &seen, k, slot] { seen[slot] = value[k]; }, {vars[k]}, {});
          expected_seen[slot] = expected[k];
        }
      }
      engine.WaitForAll();
      CHECK(value == expected);
      CHECK(seen == expected_seen);
    }
  }
}

TEST_CASE("Version counts completed mutations only", "[engine][ordering][version]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("versions on " + factory.name);
      Engine engine(factory.options());
      const Var v = engine.NewVariable();
      CHECK(engine.Version(v) == 0);

      HeldOp running(engine, {}, {v});
      REQUIRE(wait_until([&] { return running.holding(); }));
      CHECK(engine.Version(v) == 0);  // running, not completed
      REQUIRE(running.release());
      engine.WaitForVar(v);
      CHECK(engine.Version(v) == 1);

      for (int i = 0; i < 3; ++i) engine.Push([] {}, {v}, {});
      engine.WaitForVar(v);
      engine.WaitForVar(v);
      engine.WaitForAll();
      CHECK(engine.Version(v) == 1);  // reads and waits do not count

      // Inside an op that uses v, Version is exact: the mutations completed before it.
      constexpr int kOps = 20;
      std::vector<std::uint64_t> seen(kOps, 0), expected(kOps, 0);
      std::uint64_t writes = 1;
      for (int i = 0; i < kOps; ++i) {
        const bool write = i % 3 != 1;
        auto record = [&engine, &seen, v, i] { seen[static_cast<std::size_t>(i)] = engine.Version(v); };
        if (write) {
          engine.Push(record, {}, {v});
        } else {
          engine.Push(record, {v}, {});
        }
        expected[static_cast<std::size_t>(i)] = writes;
        if (write) ++writes;
      }
      engine.WaitForVar(v);
      CHECK(seen == expected);
      CHECK(engine.Version(v) == writes);

      // Clearing an error (by either wait) is not a mutation either. Read the version once the failing op has
      // retired, before the wait clears the error.
      for (int wait_for_all = 0; wait_for_all < 2; ++wait_for_all) {
        engine.Push([] { throw OpFailure(1); }, {}, {v});
        REQUIRE(wait_until([&] { return engine.InFlight() == 0; }));
        const std::uint64_t before_clear = engine.Version(v);
        CHECK(thrown_id([&] { wait_for_all != 0 ? engine.WaitForAll() : engine.WaitForVar(v); }) == 1);
        CHECK(engine.Version(v) == before_clear);
      }
    }
  }
}

TEST_CASE("a variable named twice counts once; read and mutated counts as mutated", "[engine][ordering][lists]") {
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("folded lists on " + factory.name);
      Engine engine(factory.options());
      const Var v = engine.NewVariable();
      const Var u = engine.NewVariable();
      std::atomic<int> runs{0};
      engine.Push([&] { runs.fetch_add(1, std::memory_order_relaxed); }, {v, v, u, v}, {u, v, u});
      engine.WaitForAll();
      CHECK(runs.load(std::memory_order_relaxed) == 1);
      CHECK(engine.Version(v) == 1);  // one mutation, though named many times
      CHECK(engine.Version(u) == 1);

      // Long lists fold alike, sorted by key up to 64 entries and as whole entries beyond: six variables all read,
      // the even ones also mutated.
      std::vector<Var> six;
      for (int i = 0; i < 6; ++i) six.push_back(engine.NewVariable());
      for (const std::size_t length : {20, 40, 100}) {
        std::vector<Var> reads, mutates;
        for (std::size_t i = 0; i < length; ++i) reads.push_back(six[i % 6]);
        for (std::size_t i = 0; i < length / 4; ++i) mutates.push_back(six[(2 * i) % 6]);
        engine.Push([&] { runs.fetch_add(1, std::memory_order_relaxed); }, reads, mutates);
      }
      engine.WaitForAll();
      CHECK(runs.load(std::memory_order_relaxed) == 4);
      for (int i = 0; i < 6; ++i) CHECK(engine.Version(six[static_cast<std::size_t>(i)]) == (i % 2 == 0 ? 3U : 0U));

      // Read and mutated: ordered as a mutation, so it waits for a running read.
      HeldOp read(engine, {v}, {});
      REQUIRE(wait_until([&] { return read.holding(); }));
      std::atomic<bool> read_done{false};
      bool ran_after_read = false;
      engine.Push([&] { ran_after_read = read_done.load(std::memory_order_relaxed); }, {v}, {v});
      read_done.store(true, std::memory_order_relaxed);  // relaxed: ordered by the grant that follows
      REQUIRE(read.release());
      engine.WaitForVar(v);
      CHECK(ran_after_read);
      CHECK(engine.Version(v) == 2);
    }
  }
}

TEST_CASE("priority is a hint that never breaks the order of a variable", "[engine][ordering][priority]") {
  const int ops = static_cast<int>(sized(4000, 300, 1000));
  constexpr int kVars = 3;
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("priorities on " + factory.name);
      Engine engine(factory.options());
      std::vector<Var> vars;
      for (int i = 0; i < kVars; ++i) vars.push_back(engine.NewVariable());
      std::array<std::uint64_t, kVars> value{}, expected{};
      std::mt19937 rng(11);
      // Hold the start so that many ops of mixed priority are ready at once behind it.
      HeldOp gate(engine, {}, {vars[0], vars[1], vars[2]});
      for (int i = 0; i < ops; ++i) {
        const auto a = static_cast<std::size_t>(rng() % kVars);
        const auto b = static_cast<std::size_t>(rng() % kVars);
        PushOptions options;
        options.priority = static_cast<std::int32_t>(rng() % 7) - 3;
        // a is read, b mutated: value[b] folds in value[a].
        engine.Push([&value, a, b, i] { value[b] = mix(value[b] ^ value[a], static_cast<std::uint64_t>(i)); },
                    {vars[a]}, {vars[b]}, options);
        expected[b] = mix(expected[b] ^ expected[a], static_cast<std::uint64_t>(i));
      }
      REQUIRE(gate.release());
      engine.WaitForAll();
      CHECK(value == expected);
    }
  }
}

// More variables than an op record holds inline, and a callable too big for its inline buffer: the slow paths order
// like the fast ones.
// Issue 17, item 6: ops ready at once ran as 1 10 2 0 -5 0 0 on one worker, and the stream executor ignored priority.
TEST_CASE("among ops ready at the same time a higher priority runs first, in push order among equals",
          "[engine][ordering][priority]") {
  const std::vector<std::int32_t> priorities = {0, -5, 0, 1, 0, 10, 2};
  const std::vector<int> expected = {5, 6, 3, 0, 2, 4, 1};  // by priority, then push order
  for (const auto& factory : executor_factories()) {
    if (factory.workers > 1) continue;  // two workers start two ops at once: the order between them is theirs
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("priorities on " + factory.name);
      Engine engine(factory.options());
      const Var gate = engine.NewVariable();
      HeldOp held(engine, {}, {gate});  // everything below becomes ready at once, when it is released
      std::mutex mutex;
      std::vector<int> ran;  // guarded by mutex
      for (std::size_t i = 0; i < priorities.size(); ++i) {
        PushOptions options;
        options.priority = priorities[i];
        engine.Push(
            [&, i] {
              std::lock_guard lock(mutex);
              ran.push_back(static_cast<int>(i));
            },
            {gate}, {engine.NewVariable()}, options);
      }
      REQUIRE(held.release());
      // Not WaitForAll: a waiting thread helps run queued ops, which would make two threads start them.
      CHECK(wait_until([&] {
        std::lock_guard lock(mutex);
        return ran.size() == priorities.size();
      }));
      engine.WaitForAll();
      CHECK(ran == expected);
    }
  }
}

TEST_CASE("ops with many variables and large callables keep their order", "[engine][ordering][lists]") {
  constexpr int kVars = 16;
  const int ops = static_cast<int>(sized(1000, 100, 300));
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("large ops on " + factory.name);
      Engine engine(factory.options());
      std::vector<Var> vars;
      for (int i = 0; i < kVars; ++i) vars.push_back(engine.NewVariable());
      std::vector<std::uint64_t> value(kVars, 0), expected(kVars, 0);
      std::mt19937 rng(5);
      for (int i = 0; i < ops; ++i) {
        std::vector<Var> reads, mutates;
        std::array<std::uint32_t, 12> read_index{}, write_index{};
        const auto n_reads = static_cast<std::size_t>(rng() % 9 + 4);  // 4..12 reads
        const auto n_writes = static_cast<std::size_t>(rng() % 3 + 1);
        for (std::size_t r = 0; r < n_reads; ++r) read_index[r] = static_cast<std::uint32_t>(rng() % kVars);
        for (std::size_t w = 0; w < n_writes; ++w) write_index[w] = static_cast<std::uint32_t>(rng() % kVars);
        for (std::size_t r = 0; r < n_reads; ++r) reads.push_back(vars[read_index[r]]);
        for (std::size_t w = 0; w < n_writes; ++w) mutates.push_back(vars[write_index[w]]);
        // The callable holds both index arrays and more (> OpFunction::kInlineBytes).
        auto make_body = [&](std::vector<std::uint64_t>& target) {
          return [&target, read_index, write_index, n_reads, n_writes, i] {
            std::uint64_t h = static_cast<std::uint64_t>(i);
            for (std::size_t r = 0; r < n_reads; ++r) h = mix(h, target[read_index[r]]);
            for (std::size_t w = 0; w < n_writes; ++w) target[write_index[w]] = mix(h, target[write_index[w]]);
          };
        };
        auto body = make_body(value);
        static_assert(sizeof(body) > 56);
        make_body(expected)();
        engine.Push(std::move(body), reads, mutates);
      }
      engine.WaitForAll();
      CHECK(value == expected);
    }
  }
}

// Pooled records keep the heap array that a long variable list needs (op_record.h, kKeptVars), and give up one longer
// than that when recycled. Lists of every class (inline, kept, too long to keep), in turns, so each record is reused
// with lists shorter and longer than the array it holds; any use entry left stale would misorder an op.
TEST_CASE("ops whose variable lists grow and shrink across record reuse keep their order",
          "[engine][ordering][lists]") {
  constexpr std::size_t kVars = 160;
  constexpr std::array<std::size_t, 8> kLengths{1, 7, 20, 70, 130, 3, 64, 65};
  const int ops = static_cast<int>(sized(800, 120, 240));
  for (const auto& factory : executor_factories()) {
    DYNAMIC_SECTION(factory.name) {
      Watchdog watchdog("list lengths on " + factory.name);
      Engine engine(factory.options());
      std::vector<Var> vars;
      for (std::size_t i = 0; i < kVars; ++i) vars.push_back(engine.NewVariable());
      std::vector<std::uint64_t> value(kVars, 0), expected(kVars, 0);
      std::mt19937 rng(11);
      for (int i = 0; i < ops; ++i) {
        const std::size_t length = kLengths[static_cast<std::size_t>(i) % kLengths.size()];
        std::vector<std::uint32_t> index(length);
        for (std::uint32_t& x : index) x = static_cast<std::uint32_t>(rng() % kVars);
        const std::size_t n_reads = length / 2;  // the first half is read, the rest mutated (repeats fold)
        std::vector<Var> reads, mutates;
        for (std::size_t k = 0; k < length; ++k) (k < n_reads ? reads : mutates).push_back(vars[index[k]]);
        auto make_body = [&](std::vector<std::uint64_t>& target) {
          return [&target, index, n_reads, i] {
            std::uint64_t h = static_cast<std::uint64_t>(i);
            for (std::size_t k = 0; k < n_reads; ++k) h = mix(h, target[index[k]]);
            for (std::size_t k = n_reads; k < index.size(); ++k) target[index[k]] = mix(h, target[index[k]]);
          };
        };
        make_body(expected)();
        engine.Push(make_body(value), reads, mutates);
      }
      engine.WaitForAll();
      CHECK(value == expected);
    }
  }
}

}  // namespace
}  // namespace depengine::test
