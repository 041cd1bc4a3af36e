// VarQueue and OpNode on their own (engine/var_queue/var_queue.h, op_node.h): which uses a queue grants when, the
// version, the wait counter, and the queue used from many threads at once as a reader-writer lock.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <random>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <depengine/engine/var_queue/op_node.h>
#include <depengine/engine/var_queue/var_queue.h>

#include "test/engine/var_queue/var_queue_test_support.h"

namespace depengine {
namespace {

using test::complete;
using test::idle;

// Atomics: the counters of violations, winners and writes are read by the test thread after it has joined the threads
// that bump them, which orders them, so they are relaxed (a count printed on a hang needs no order either).

// An op for the tests: an OpNode with its uses, pushed the way the engine pushes (all queues locked in address order,
// one grant held by the pusher until every use is appended).
struct TestOp : OpNode {
  using Uses = std::vector<std::pair<VarQueue*, Access>>;

  std::vector<VarUse> uses;
  std::atomic<bool> granted{false};  // set by whoever made the op ready

  TestOp(std::initializer_list<std::pair<VarQueue*, Access>> list) : TestOp(Uses(list)) {}
  explicit TestOp(const Uses& list) {
    for (const auto& [queue, access] : list) uses.push_back(VarUse{queue, this, nullptr, access, 0});
  }

  // Sets the wait counter to every grant (ours included) before the first append, appends every use, and returns
  // whether the op is ready once the grants at append and the pusher's are given.
  bool push() {
    std::vector<VarUse*> order;
    for (VarUse& use : uses) order.push_back(&use);
    std::sort(order.begin(), order.end(), [](const VarUse* a, const VarUse* b) { return a->var < b->var; });
    for (VarUse* use : order) use->var->lock();
    reset_wait(static_cast<std::int32_t>(order.size()) + 1);
    std::int32_t at_append = 0;
    for (VarUse* use : order) {
      if (use->var->append_locked(*use)) ++at_append;
    }
    for (VarUse* use : order) use->var->unlock();
    return grant(at_append + 1);
  }
};

// Completes `use` on another thread while the calling thread, a pusher mid-publish, holds the lock of `use`'s queue:
// returns whether the completion finished before the lock was released (waiting up to 5 s for it), and what it made
// ready. Releases the lock.
struct LockedCompletion {
  bool finished_while_locked = false;
  std::vector<OpNode*> ready;
};
LockedCompletion complete_while_locked(const VarUse& use) {
  LockedCompletion result;
  std::atomic<bool> done{false};
  std::thread completer([&] {
    result.ready = complete(use);
    done.store(true, std::memory_order_release);  // pairs with the acquire loads below
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!done.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  result.finished_while_locked = done.load(std::memory_order_acquire);
  use.var->unlock();  // lets a completer that (wrongly) waits for the lock finish, so the thread can be joined
  completer.join();
  return result;
}

// Completes `use` with `signal` (what later users must wait for).
void complete_with(const VarUse& use, const VarSignal& signal) {
  ReadyList ready;
  use.var->complete(use, &signal, ready);
  while (ready.pop_front() != nullptr) {
  }
}

VarSignal wait_signal_of(const VarUse& use) {
  VarSignal out;
  use.var->merge_wait_signal(use, out);
  return out;
}

TEST_CASE("VarQueue signals: readers wait for the last write, a writer for it and every read since", "[var_queue]") {
  const Axis a = Axis::make(0, 0, AxisDomain::kQueue, 901);
  const Axis b = Axis::make(0, 0, AxisDomain::kQueue, 902);
  const Axis c = Axis::make(0, 0, AxisDomain::kQueue, 903);
  VarQueue q;
  q.carry_signals();
  TestOp w1{{&q, Access::kWrite}}, r1{{&q, Access::kRead}}, r2{{&q, Access::kRead}}, w2{{&q, Access::kWrite}},
      r3{{&q, Access::kRead}}, w3{{&q, Access::kWrite}}, r4{{&q, Access::kRead}};
  REQUIRE(w1.push());
  CHECK(wait_signal_of(w1.uses[0]).empty());  // nothing released yet
  r1.push();
  r2.push();
  w2.push();
  complete_with(w1.uses[0], VarSignal{{a, 4}});  // w1 issued on stream a at epoch 4
  CHECK(wait_signal_of(r1.uses[0]) == VarSignal{{a, 4}});
  complete_with(r1.uses[0], VarSignal{{b, 2}});
  complete_with(r2.uses[0], VarSignal{{c, 7}});
  // The writer waits for the write before it and for both reads (write-after-read on the device).
  CHECK(wait_signal_of(w2.uses[0]) == VarSignal{{a, 4}, {b, 2}, {c, 7}});
  r3.push();
  w3.push();
  complete_with(w2.uses[0], VarSignal{{b, 3}});  // the reads before w2 are forgotten: w2 waited for them
  CHECK(wait_signal_of(r3.uses[0]) == VarSignal{{b, 3}});
  complete_with(r3.uses[0], VarSignal{});  // a CPU read: it ran after everything it needed had completed
  CHECK(wait_signal_of(w3.uses[0]) == VarSignal{{b, 3}});
  r4.push();
  complete_with(w3.uses[0], VarSignal{});  // a CPU write clears both signals
  CHECK(wait_signal_of(r4.uses[0]).empty());
  complete_with(r4.uses[0], VarSignal{});
  CHECK(idle(q));
}

TEST_CASE("VarQueue: a recycled idle queue forgets its signals", "[var_queue]") {
  VarQueue q;
  q.carry_signals();
  TestOp w{{&q, Access::kWrite}}, r{{&q, Access::kRead}};
  REQUIRE(w.push());
  complete_with(w.uses[0], VarSignal{{Axis::make(0, 0, AxisDomain::kQueue, 904), 1}});
  q.reset_idle();
  REQUIRE(r.push());
  CHECK(wait_signal_of(r.uses[0]).empty());
  complete_with(r.uses[0], VarSignal{});
}

TEST_CASE("VarQueue: reads run together; a write waits for every earlier read", "[var_queue]") {
  VarQueue q;
  CHECK(idle(q));
  TestOp r1{{&q, Access::kRead}}, r2{{&q, Access::kRead}};
  CHECK(r1.push());  // an idle queue grants a read at once
  CHECK(r2.push());  // and the next read while the first runs
  CHECK_FALSE(idle(q));
  TestOp w{{&q, Access::kWrite}};
  CHECK_FALSE(w.push());
  CHECK(complete(r1.uses[0]).empty());  // one read still runs
  CHECK(complete(r2.uses[0]) == std::vector<OpNode*>{&w});
  CHECK(q.version() == 0);  // reads are not mutations
  CHECK(complete(w.uses[0]).empty());
  CHECK(q.version() == 1);
  CHECK(idle(q));
}

TEST_CASE("VarQueue: the reads behind a write are granted together when it completes", "[var_queue]") {
  VarQueue q;
  TestOp w1{{&q, Access::kWrite}};
  CHECK(w1.push());  // an idle queue grants a write at once
  TestOp r1{{&q, Access::kRead}}, r2{{&q, Access::kRead}}, w2{{&q, Access::kWrite}}, r3{{&q, Access::kRead}};
  CHECK_FALSE(r1.push());
  CHECK_FALSE(r2.push());
  CHECK_FALSE(w2.push());
  CHECK_FALSE(r3.push());
  CHECK(complete(w1.uses[0]) == std::vector<OpNode*>{&r1, &r2});  // in queue order, stopping at the write
  CHECK(q.version() == 1);
  CHECK(complete(r2.uses[0]).empty());  // reads may complete in any order
  CHECK(complete(r1.uses[0]) == std::vector<OpNode*>{&w2});
  CHECK(complete(w2.uses[0]) == std::vector<OpNode*>{&r3});
  CHECK(complete(r3.uses[0]).empty());
  CHECK(q.version() == 2);
  CHECK(idle(q));
}

TEST_CASE("VarQueue: a read behind a waiting write does not overtake it", "[var_queue]") {
  VarQueue q;
  TestOp running{{&q, Access::kRead}}, w{{&q, Access::kWrite}}, late{{&q, Access::kRead}};
  CHECK(running.push());
  CHECK_FALSE(w.push());
  CHECK_FALSE(late.push());  // reads are running, but a write is queued before this one
  CHECK(complete(running.uses[0]) == std::vector<OpNode*>{&w});
  CHECK(complete(w.uses[0]) == std::vector<OpNode*>{&late});
  CHECK(complete(late.uses[0]).empty());
}

TEST_CASE("VarQueue: writes are granted one at a time, in append order", "[var_queue]") {
  VarQueue q;
  TestOp w1{{&q, Access::kWrite}}, w2{{&q, Access::kWrite}}, w3{{&q, Access::kWrite}};
  CHECK(w1.push());
  CHECK_FALSE(w2.push());
  CHECK_FALSE(w3.push());
  CHECK(complete(w1.uses[0]) == std::vector<OpNode*>{&w2});
  CHECK(complete(w2.uses[0]) == std::vector<OpNode*>{&w3});
  CHECK(complete(w3.uses[0]).empty());
  CHECK(q.version() == 3);
}

// The fast path (var_queue.h, Two cache lines): a write that completes with another exclusive use linked behind it
// hands over without the pushers' lock, so a chain's completer and a pusher running ahead of it never meet on a line.
// While a pusher holds the lock, having just linked an op, the completion grants that op — and the op's own counter,
// which still holds its pusher's grant, keeps it from starting until the pusher has finished publishing it.
TEST_CASE("VarQueue: a write hands over to the write linked behind it without the pushers' lock", "[var_queue]") {
  VarQueue q;
  TestOp w1{{&q, Access::kWrite}}, w2{{&q, Access::kWrite}}, r3{{&q, Access::kRead}};
  REQUIRE(w1.push());

  q.lock();  // w2's pusher, mid-publish: counter set, linked, lock still held
  w2.reset_wait(2);
  REQUIRE_FALSE(q.append_locked(w2.uses[0]));
  const LockedCompletion completion = complete_while_locked(w1.uses[0]);
  CHECK(completion.finished_while_locked);
  CHECK(completion.ready.empty());  // the queue's grant was given, but the pusher's is still missing
  CHECK(w2.grant());                // the pusher's: now w2 is ready
  CHECK(q.version() == 1);

  // A read behind the new first write takes the slow path when that write completes, which finds the list's start.
  CHECK_FALSE(r3.push());
  CHECK(complete(w2.uses[0]) == std::vector<OpNode*>{&r3});
  CHECK(complete(r3.uses[0]).empty());
  CHECK(idle(q));
  CHECK(q.version() == 2);
}

// With a write linked behind the reads that follow a completing write, the list keeps that write: the reads are granted
// and the write made to wait for them on the completers' line alone (var_queue.h, Two cache lines). The counts of
// reads granted that way catch up at the next completion on the slow path, so the queue still ends idle.
TEST_CASE("VarQueue: a write hands over to the reads behind it, and the write behind them, without the pushers' lock",
          "[var_queue]") {
  VarQueue q;
  TestOp w1{{&q, Access::kWrite}}, r2{{&q, Access::kRead}}, r3{{&q, Access::kRead}}, w4{{&q, Access::kWrite}};
  TestOp r5{{&q, Access::kRead}}, w6{{&q, Access::kWrite}}, r7{{&q, Access::kRead}};
  REQUIRE(w1.push());
  for (TestOp* op : {&r2, &r3, &w4, &r5, &w6}) REQUIRE_FALSE(op->push());

  q.lock();  // a pusher mid-publish
  LockedCompletion completion = complete_while_locked(w1.uses[0]);
  CHECK(completion.finished_while_locked);
  CHECK(completion.ready == std::vector<OpNode*>{&r2, &r3});
  CHECK(q.version() == 1);
  CHECK(complete(r3.uses[0]).empty());
  q.lock();
  completion = complete_while_locked(r2.uses[0]);  // the last read the write waits for grants it
  CHECK(completion.finished_while_locked);
  CHECK(completion.ready == std::vector<OpNode*>{&w4});

  // Again from the write those reads held back: the next read goes, and the write behind it waits for it.
  q.lock();
  completion = complete_while_locked(w4.uses[0]);
  CHECK(completion.finished_while_locked);
  CHECK(completion.ready == std::vector<OpNode*>{&r5});
  CHECK_FALSE(r7.push());  // behind w6, the list's last node
  CHECK(complete(r5.uses[0]) == std::vector<OpNode*>{&w6});
  // r7 is the last node, where a pusher may be linking: the slow path, which counts every read granted so far.
  CHECK(complete(w6.uses[0]) == std::vector<OpNode*>{&r7});
  TestOp w8{{&q, Access::kWrite}};
  CHECK_FALSE(w8.push());  // r7 still runs
  CHECK(complete(r7.uses[0]) == std::vector<OpNode*>{&w8});
  CHECK(complete(w8.uses[0]).empty());
  CHECK(q.version() == 4);
  CHECK(idle(q));
  TestOp r9{{&q, Access::kRead}}, w10{{&q, Access::kWrite}};
  CHECK(r9.push());  // an idle queue grants a read at once
  CHECK_FALSE(w10.push());
  CHECK(complete(r9.uses[0]) == std::vector<OpNode*>{&w10});
  CHECK(complete(w10.uses[0]).empty());
  CHECK(idle(q));
}

// A chain completed right behind its pusher: the completer often finds nothing linked behind the write it completes
// while the pusher holds the lock to link the next one, and waits for that link (var_queue.h, Two cache lines), or,
// when the pusher is slower, takes the lock and empties the list, so that the next write is granted at its append.
// Either way every write must be granted exactly once, in push order, and only after the one before it completed.
TEST_CASE("VarQueue: a chain completed right behind its pusher grants each write once, in order",
          "[var_queue][concurrency]") {
  const std::string_view sanitizer = DEPENGINE_SANITIZER;
  const int writes = sanitizer == "thread" ? 20000 : 200000;
  VarQueue q;
  std::vector<std::unique_ptr<TestOp>> ops;
  for (int i = 0; i < writes; ++i) ops.push_back(std::make_unique<TestOp>(TestOp::Uses{{&q, Access::kWrite}}));
  std::atomic<int> pushed{0};  // ops[0, pushed) have been pushed; written by the pusher only
  std::atomic<int> out_of_order{0};
  std::thread pusher([&] {
    for (int i = 0; i < writes; ++i) {
      TestOp& op = *ops[static_cast<std::size_t>(i)];
      // release: pairs with the completer's acquire; the op is then the completer's to complete, once granted.
      if (op.push()) op.granted.store(true, std::memory_order_release);
      pushed.store(i + 1, std::memory_order_release);
    }
  });
  std::uint64_t data = 0;  // plain: written by the holder of the queue's exclusivity, which TSAN checks is passed on
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (int i = 0; i < writes; ++i) {
    TestOp& op = *ops[static_cast<std::size_t>(i)];
    // acquire, both: pair with the pusher's release stores and the completer's grants (below).
    while (pushed.load(std::memory_order_acquire) <= i || !op.granted.load(std::memory_order_acquire)) {
      if (std::chrono::steady_clock::now() > deadline) {
        std::fprintf(stderr, "FAILED (hang): write %d was never granted\n", i);
        std::abort();  // the pusher still links ops: returning would leave it dangling pointers
      }
    }
    if (data != static_cast<std::uint64_t>(i)) out_of_order.fetch_add(1, std::memory_order_relaxed);
    ++data;
    for (OpNode* next : complete(op.uses[0])) {
      TestOp* granted = static_cast<TestOp*>(next);
      if (i + 1 == writes || granted != ops[static_cast<std::size_t>(i) + 1].get() ||
          granted->granted.exchange(true, std::memory_order_release)) {
        out_of_order.fetch_add(1, std::memory_order_relaxed);  // not the next write, or granted twice
      }
    }
  }
  pusher.join();
  CHECK(out_of_order.load(std::memory_order_relaxed) == 0);
  CHECK(q.version() == static_cast<std::uint64_t>(writes));
  CHECK(idle(q));
}

// A pusher running ahead of two completing threads on one queue: runs of reads of random length between writes, so that
// a write's completion finds its readers and the next write linked behind it (the fast path for reads, for runs up to
// kHandOverReads) or not yet (the slow path), and the pusher sometimes falls behind. Every op checks, on plain data the
// queue must order, that it sees exactly the writes pushed before it; writes run alone, and every op is granted once.
TEST_CASE("VarQueue: runs of reads between writes, pushed ahead of two completers, keep the order",
          "[var_queue][concurrency]") {
  const std::string_view sanitizer = DEPENGINE_SANITIZER;
  const int count = sanitizer == "thread" ? 20000 : 200000;
  for (const unsigned seed : {1U, 2U, 3U}) {
    CAPTURE(seed);
    VarQueue q;
    std::mt19937 rng(seed);
    std::vector<std::unique_ptr<TestOp>> ops;
    std::vector<std::uint64_t> writes_before;  // per op: the writes pushed before it
    std::uint64_t writes = 0;
    while (static_cast<int>(ops.size()) < count) {
      const int reads = static_cast<int>(rng() % 24);  // past kHandOverReads (16) now and then
      for (int r = 0; r < reads && static_cast<int>(ops.size()) < count; ++r) {
        ops.push_back(std::make_unique<TestOp>(TestOp::Uses{{&q, Access::kRead}}));
        writes_before.push_back(writes);
      }
      ops.push_back(std::make_unique<TestOp>(TestOp::Uses{{&q, Access::kWrite}}));
      writes_before.push_back(writes++);
    }
    std::uint64_t data = 0;  // plain: read by readers, written by writers; only the queue orders them
    std::atomic<int> writers{0}, readers{0}, violations{0}, done{0};
    std::vector<std::atomic<int>> grants(ops.size());
    // Granted ops waiting for a completer: a mutex-guarded stack (the test's executor).
    std::mutex ready_mutex;
    std::vector<std::size_t> ready_ops;
    std::unordered_map<const OpNode*, std::size_t> index_of;
    for (std::size_t i = 0; i < ops.size(); ++i) index_of.emplace(ops[i].get(), i);
    auto make_ready = [&](std::size_t i) {
      if (grants[i].fetch_add(1, std::memory_order_relaxed) != 0) violations.fetch_add(1, std::memory_order_relaxed);
      const std::lock_guard lock(ready_mutex);
      ready_ops.push_back(i);
    };
    std::thread pusher([&] {
      std::mt19937 pace(seed + 100);
      for (std::size_t i = 0; i < ops.size(); ++i) {
        if (ops[i]->push()) make_ready(i);
        if (pace() % 64 == 0) std::this_thread::yield();  // now and then let the completers catch up
      }
    });
    auto completer = [&] {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
      while (done.load(std::memory_order_acquire) < static_cast<int>(ops.size())) {
        std::size_t i = 0;
        {
          const std::lock_guard lock(ready_mutex);  // also orders the grant before the op runs
          if (ready_ops.empty()) {
            i = ops.size();
          } else {
            i = ready_ops.back();
            ready_ops.pop_back();
          }
        }
        if (i == ops.size()) {
          if (std::chrono::steady_clock::now() > deadline) {
            std::fprintf(stderr, "FAILED (hang): %d of %zu ops completed\n", done.load(std::memory_order_relaxed),
                         ops.size());
            std::abort();  // the queue still links ops: returning would leave it dangling pointers
          }
          std::this_thread::yield();
          continue;
        }
        const VarUse& use = ops[i]->uses[0];
        if (use.access == Access::kWrite) {
          if (writers.fetch_add(1, std::memory_order_relaxed) != 0 || readers.load(std::memory_order_relaxed) != 0) {
            violations.fetch_add(1, std::memory_order_relaxed);
          }
          if (data != writes_before[i]) violations.fetch_add(1, std::memory_order_relaxed);
          ++data;
          writers.fetch_sub(1, std::memory_order_relaxed);
        } else {
          readers.fetch_add(1, std::memory_order_relaxed);
          if (writers.load(std::memory_order_relaxed) != 0 || data != writes_before[i]) {
            violations.fetch_add(1, std::memory_order_relaxed);
          }
          readers.fetch_sub(1, std::memory_order_relaxed);
        }
        ReadyList ready;
        q.complete(use, nullptr, ready);
        while (OpNode* next = ready.pop_front()) make_ready(index_of.at(next));
        done.fetch_add(1, std::memory_order_release);
      }
    };
    std::thread first(completer), second(completer);
    pusher.join();
    first.join();
    second.join();
    CHECK(violations.load(std::memory_order_relaxed) == 0);
    CHECK(q.version() == writes);
    CHECK(idle(q));
  }
}

// An op of one variable whose pusher holds no grant of its own (op_node.h: the engine's push of an op without a scope
// or wait fences) is published by its link: the completion that grants it makes it ready, even while the pusher still
// holds the lock, and the pusher touches it no more.
TEST_CASE("VarQueue: an op whose pusher holds no grant is made ready by the completion that grants it", "[var_queue]") {
  VarQueue q;
  TestOp w1{{&q, Access::kWrite}}, w2{{&q, Access::kWrite}};
  REQUIRE(w1.push());
  q.lock();  // w2's pusher: its counter holds the queue's grant alone
  w2.reset_wait(1);
  REQUIRE_FALSE(q.append_locked(w2.uses[0]));
  const LockedCompletion completion = complete_while_locked(w1.uses[0]);
  CHECK(completion.finished_while_locked);
  CHECK(completion.ready == std::vector<OpNode*>{&w2});
  CHECK(complete(w2.uses[0]).empty());
  CHECK(idle(q));
  CHECK(q.version() == 2);
}

TEST_CASE("VarQueue: reads complete without the pushers' lock, the last one a waiting write needs too, and grants it",
          "[var_queue]") {
  VarQueue q;
  TestOp r1{{&q, Access::kRead}}, r2{{&q, Access::kRead}}, w3{{&q, Access::kWrite}};
  REQUIRE(r1.push());
  REQUIRE(r2.push());
  // Completes `use` on another thread while this thread holds the pushers' lock; whether it finished meanwhile (waiting
  // up to 5 s).
  auto completes_while_locked = [&](const VarUse& use, std::vector<OpNode*>& granted) {
    std::atomic<bool> done{false};
    std::thread completer([&] {
      granted = complete(use);
      done.store(true, std::memory_order_release);  // pairs with the acquire loads below
    });
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!done.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
    const bool finished = done.load(std::memory_order_acquire);
    q.unlock();  // lets a completer that waits for the lock finish, so the thread can be joined
    completer.join();
    return finished;
  };

  q.lock();  // a pusher mid-publish
  std::vector<OpNode*> granted;
  CHECK(completes_while_locked(r1.uses[0], granted));  // no write waits: the read takes no lock
  CHECK(granted.empty());

  CHECK_FALSE(w3.push());  // waits for r2
  q.lock();
  // The last read the write needs takes the write's key from the completers' line, not the lock, and grants it.
  CHECK(completes_while_locked(r2.uses[0], granted));
  CHECK(granted == std::vector<OpNode*>{&w3});
  CHECK(complete(w3.uses[0]).empty());
  CHECK(idle(q));
  CHECK(q.version() == 1);
}

TEST_CASE("VarQueue: a sync use orders like a write but leaves the version alone", "[var_queue]") {
  VarQueue q;
  TestOp r{{&q, Access::kRead}}, sync{{&q, Access::kSync}}, after{{&q, Access::kRead}};
  CHECK(r.push());
  CHECK_FALSE(sync.push());
  CHECK_FALSE(after.push());
  CHECK(complete(r.uses[0]) == std::vector<OpNode*>{&sync});
  CHECK(complete(sync.uses[0]) == std::vector<OpNode*>{&after});
  CHECK(complete(after.uses[0]).empty());
  CHECK(q.version() == 0);
}

TEST_CASE("OpNode: an op over several queues is ready only after every grant and the pusher's", "[var_queue]") {
  VarQueue a, b, c;
  TestOp holder_b{{&b, Access::kWrite}}, holder_c{{&c, Access::kRead}};
  CHECK(holder_b.push());
  CHECK(holder_c.push());
  TestOp op{{&a, Access::kRead}, {&b, Access::kRead}, {&c, Access::kWrite}};
  CHECK_FALSE(op.push());                     // a granted at once; b and c not yet
  CHECK(complete(holder_c.uses[0]).empty());  // c granted: op still waits for b
  CHECK(complete(holder_b.uses[0]) == std::vector<OpNode*>{&op});

  // With every queue idle, the pusher's own grant is the one that makes the op ready.
  VarQueue d, e;
  TestOp free_op{{&d, Access::kWrite}, {&e, Access::kRead}};
  CHECK(free_op.push());
}

TEST_CASE("ReadyList is a FIFO", "[var_queue]") {
  TestOp a{}, b{}, c{};
  ReadyList list;
  CHECK(list.empty());
  list.push_back(&a);
  list.push_back(&b);
  CHECK(list.front() == &a);
  CHECK(list.pop_front() == &a);
  list.push_back(&c);
  CHECK(list.pop_front() == &b);
  CHECK(list.pop_front() == &c);
  CHECK(list.pop_front() == nullptr);
  CHECK(list.empty());
}

TEST_CASE("OpNode: of many concurrent granters, exactly the last one is told the op is ready", "[var_queue]") {
  constexpr int kThreads = 4;
  constexpr int kGrantsEach = 1000;
  const int rounds = 20;
  for (int round = 0; round < rounds; ++round) {
    TestOp op{};
    op.reset_wait(kThreads * kGrantsEach);
    std::atomic<int> winners{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < kGrantsEach; ++i) {
          if (op.grant()) winners.fetch_add(1, std::memory_order_relaxed);
        }
      });
    }
    for (auto& thread : threads) thread.join();
    CHECK(winners.load(std::memory_order_relaxed) == 1);
  }
}

// Threads use a few queues as reader-writer locks: each pushes an op over one or two queues (named in either order),
// waits until it is granted, checks that no conflicting op holds a queue, and completes it, passing the grants it
// makes on to their owners. Exclusivity, the version, and the absence of deadlock (two-phase locking in address
// order) are all checked; TSAN checks that a grant carries the previous holder's writes.
TEST_CASE("VarQueue from many threads: exclusive writes, shared reads, no deadlock", "[var_queue][concurrency]") {
  constexpr int kThreads = 4;
  constexpr int kQueues = 3;
  const std::string_view sanitizer = DEPENGINE_SANITIZER;
  const int iterations = sanitizer == "thread" ? 2000 : sanitizer == "address" ? 5000 : 20000;
  VarQueue queues[kQueues];
  struct Guarded {
    std::atomic<int> readers{0}, writers{0};
    std::uint64_t data = 0;  // plain: written by writers only, which the queue serialises
  } guarded[kQueues];
  std::atomic<int> violations{0};
  std::atomic<std::uint64_t> writes[kQueues] = {};

  auto worker = [&](unsigned seed) {
    std::mt19937 rng(seed);
    for (int i = 0; i < iterations; ++i) {
      const int first = static_cast<int>(rng() % kQueues);
      const int second = (first + 1 + static_cast<int>(rng() % (kQueues - 1))) % kQueues;
      const bool two = rng() % 2 == 0;
      const Access access_first = rng() % 2 == 0 ? Access::kWrite : Access::kRead;
      const Access access_second = rng() % 2 == 0 ? Access::kWrite : Access::kRead;
      TestOp::Uses list{{&queues[first], access_first}};
      if (two) list.emplace_back(&queues[second], access_second);
      TestOp op(list);
      if (op.push()) op.granted.store(true, std::memory_order_relaxed);  // ours from the start
      // acquire: pairs with the release store of the thread that granted it.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (!op.granted.load(std::memory_order_acquire)) {
        if (std::chrono::steady_clock::now() > deadline) {
          // Other threads' queues still link this op: returning would leave them a dangling pointer.
          std::fprintf(stderr, "FAILED (hang): an op was never granted; a lost grant or a deadlock\n");
          std::abort();
        }
        std::this_thread::yield();
      }
      for (const VarUse& use : op.uses) {
        Guarded& g = guarded[static_cast<VarQueue*>(use.var) - queues];
        if (use.access == Access::kWrite) {
          if (g.writers.fetch_add(1, std::memory_order_relaxed) != 0 || g.readers.load(std::memory_order_relaxed)) {
            violations.fetch_add(1, std::memory_order_relaxed);
          }
          g.data = g.data * 3 + 1;
        } else {
          g.readers.fetch_add(1, std::memory_order_relaxed);
          if (g.writers.load(std::memory_order_relaxed) != 0) violations.fetch_add(1, std::memory_order_relaxed);
          const std::uint64_t seen = g.data;
          if (seen == ~std::uint64_t{0}) violations.fetch_add(1, std::memory_order_relaxed);  // a read TSAN checks
        }
      }
      for (const VarUse& use : op.uses) {
        Guarded& g = guarded[static_cast<VarQueue*>(use.var) - queues];
        if (use.access == Access::kWrite) {
          writes[static_cast<VarQueue*>(use.var) - queues].fetch_add(1, std::memory_order_relaxed);
          g.writers.fetch_sub(1, std::memory_order_relaxed);
        } else {
          g.readers.fetch_sub(1, std::memory_order_relaxed);
        }
      }
      for (const VarUse& use : op.uses) {
        ReadyList ready;
        use.var->complete(use, nullptr, ready);
        while (OpNode* next = ready.pop_front()) {
          // release: pairs with the owner's acquire; after this store the owner may destroy the op.
          static_cast<TestOp*>(next)->granted.store(true, std::memory_order_release);
        }
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, static_cast<unsigned>(t + 1));
  for (auto& thread : threads) thread.join();
  CHECK(violations.load(std::memory_order_relaxed) == 0);
  for (int k = 0; k < kQueues; ++k) {
    CHECK(queues[k].version() == writes[k].load(std::memory_order_relaxed));
    CHECK(idle(queues[k]));
  }
}

}  // namespace
}  // namespace depengine
