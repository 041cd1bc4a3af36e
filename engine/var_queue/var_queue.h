// The queue of one variable: the order in which ops may use it.
//
// Ops are appended in push order. Consecutive reads run together; a write (or a sync use) waits until every earlier
// read and write has completed and holds back every later use until it completes. This is MXNet's ThreadedVar
// protocol, with the queue nodes embedded in the op records (VarUse) so that appending never allocates.
//
// State (all under lock_):
//
//     running_reads_ = 2            head_                             tail_
//     (granted, not complete)       v                                 v
//                                   [W1] -> [R3] -> [R4] -> [W5] -> [R6]
//                                   first write: granted once running_reads_ is 0
//
//   - A read appended while head_ is null is granted at once (running_reads_ + 1); otherwise it waits in the list.
//     (A grant at append is returned to the pusher, which counts it; grants at completion count down the op's wait
//     counter. See append_locked().)
//   - A write appended to an empty list becomes head_, granted at once if no read is running.
//   - When the last running read completes, head_ (a write) is granted.
//   - When the head write completes it is popped, the version moves on, and the reads now at the front are granted
//     together and leave the list; if a write then heads the list and no read is running, it is granted.
//
// Granted reads leave the list, so the list holds exactly the ops still waiting plus the granted head write.
//
// Pushing an op that uses several variables appends it to all of them while holding all of their locks, taken in
// one global order (ascending address): two-phase locking. So the order of ops on every variable is consistent with
// one total order of pushes, and two threads pushing over the same variables can never order them oppositely on two
// queues (MXNet could, and deadlocked). Completion takes one lock at a time and never nests.
//
// Happens-before: a completing op's writes happen before its complete() releases lock_; the next op is granted
// under lock_ and its wait counter carries that on (see op_node.h). So writes made by an op that mutates V are
// visible to every op pushed later that reads or mutates V.
//
// Signals (docs/architecture.md §3). A stream op releases its uses when it is issued, long before its device work
// completes, so each release may carry a signal: the (axis, epoch) entries that a later user must wait for on the
// device or on the tracker. The queue keeps two, updated under lock_ by complete():
//   - the write signal: the signal of the last exclusive use (write or sync). Every later use must wait for it.
//   - the reads signal: the merged signals of the reads released since then. The next exclusive use waits for them.
// A read that is granted reads the write signal; an exclusive use reads both (merge_wait_signal()). Both
// reads happen after the grant without the lock: the signals change only when an exclusive use completes, which
// cannot happen while an earlier-granted use is still outstanding, and the grant carries the writes to the reader.
// An exclusive use that releases with an empty signal (a CPU op, which ran after everything it waited for had
// completed) clears both. Signals are never written when an engine has no stream executor (complete() gets nullptr), so
// they live out of line (two wait frontiers, some 530 bytes), allocated by carry_signals() only for engines that have
// one: a CPU-only engine's queue is five words, and the engine keeps a variable on one cache line.
//
// Thread safety: lock()/append_locked() by pushing threads, complete() by completing threads, concurrently.
// Cost: one spinlock acquisition per append and per completion, O(1) work plus one grant per op it releases.
// No allocation, except carry_signals() once per queue.
#pragma once

#include <atomic>
#include <cassert>
#include <cstdint>
#include <memory>

#include "engine/frontier/frontier.h"
#include "engine/var_queue/op_node.h"
#include "engine/vocabulary/vocabulary.h"
#include "support/spinlock.h"

namespace depengine {

// A variable's signals are wait frontiers: at most one entry per axis, and the engine bounds its axes to their capacity
// (so merging signals never overflows).
using VarSignal = WaitFrontier;

class VarQueue {
 public:
  VarQueue() = default;
  VarQueue(const VarQueue&) = delete;
  VarQueue& operator=(const VarQueue&) = delete;

  // Locks the queue for appending. Hold it only across append_locked() calls of one push.
  void lock() noexcept { lock_.lock(); }
  void unlock() noexcept { lock_.unlock(); }

  // Appends `use` and returns whether it is granted at once. A use granted at once does not count down its op's wait
  // counter: the pusher counts such grants itself and sets the counter to the grants still missing while it still
  // holds every queue's lock (op_node.h), so that an op whose uses are all granted at push costs no atomic operation
  // on its counter. Requires lock() held.
  [[nodiscard]] bool append_locked(VarUse& use) noexcept;

  // Records that `use` has completed (or, for a stream op, been issued): releases the ops it was holding back,
  // appending those made ready to `ready`. `signal` (null: none, the engine has no streams) is what later users must
  // wait for (see Signals above). Takes the lock. `use` must be granted and not yet completed.
  void complete(const VarUse& use, const VarSignal* signal, ReadyList& ready) noexcept;

  // Makes the queue keep signals (see Signals above): required before the first complete() with a signal. Call while
  // the queue is not shared (the engine does when it makes the variable); kept across reset_idle(). Allocates once.
  void carry_signals() {
    if (signals_ == nullptr) signals_ = std::make_unique<Signals>();
  }

  // Merges into `out` what a granted `use` must wait for: the write signal, and for an exclusive use the reads signal.
  // Call only between the use's grant and its completion (see Signals above), on a queue that carries signals.
  void merge_wait_signal(const VarUse& use, VarSignal& out) const noexcept {
    assert(signals_ != nullptr && "merge_wait_signal on a queue without signals (carry_signals)");
    if (!signals_->write.empty()) out.merge(signals_->write);
    if (use.access != Access::kRead && !signals_->reads.empty()) out.merge(signals_->reads);
  }

  // The number of completed mutations (Access::kWrite). Any thread. Exact when read by an op that uses the variable
  // (nothing can complete a mutation concurrently); otherwise a value it had at some point during the call.
  [[nodiscard]] std::uint64_t version() const noexcept {
    // acquire: pairs with the release store in complete(), so the mutation counted is visible to the caller.
    return version_.load(std::memory_order_acquire);
  }

  // Counts a completed mutation that does not complete a use of the queue: one made by an op of a replayed graph under
  // the exclusivity of the graph's own entry (graph_plan.h). Call only from the op that holds that exclusivity.
  void count_mutation() noexcept {
    // relaxed load: no other writer can run (see above). release store: as in complete().
    version_.store(version_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }

  // True while no op uses or waits for the variable. Requires lock() held, or quiescence.
  [[nodiscard]] bool idle_locked() const noexcept { return head_ == nullptr && running_reads_ == 0; }

  // For a report of what ops wait for (the engine's in-flight report), with lock() held: the reads granted and not
  // yet completed (they have left the list), and the first waiting use, the list linked through VarUse::next. The
  // first is granted, and so holds the variable, when it is a write or sync use and no read is running.
  [[nodiscard]] std::int32_t running_reads_locked() const noexcept { return running_reads_; }
  [[nodiscard]] const VarUse* head_locked() const noexcept { return head_; }

  // Returns an idle queue to its initial state (version 0), for a new variable that reuses it. Requires
  // idle_locked() and no concurrent append or complete (the engine recycles a slot only after its last op).
  void reset_idle() noexcept {
    // relaxed: the queue is quiescent; whoever receives it next is handed it through the engine's variable-table
    // mutex, which orders this store before their first use.
    version_.store(0, std::memory_order_relaxed);
    if (signals_ != nullptr) *signals_ = Signals{};
  }

 private:
  static void grant(VarUse& use, ReadyList& ready) noexcept {
    if (use.op->grant()) ready.push_back(use.op);
  }
  void grant_front_reads(ReadyList& ready) noexcept;

  support::Spinlock lock_;
  std::int32_t running_reads_ = 0;  // granted reads not yet completed; all precede head_
  VarUse* head_ = nullptr;          // first waiting use; if non-null it is a write or sync use
  VarUse* tail_ = nullptr;
  std::atomic<std::uint64_t> version_{0};  // written under lock_, read lock-free
  // See Signals above: written under lock_ by complete(), read by granted users. Null while the queue carries none.
  struct Signals {
    VarSignal write;  // the last exclusive use's
    VarSignal reads;  // merged, of the reads released since
  };
  std::unique_ptr<Signals> signals_;
};

}  // namespace depengine
