// The per-operation wait counter, and an operation's use of one variable (the entry it puts in that variable's queue).
//
// An operation that uses k variables waits for one grant per variable queue, plus one held by the pushing thread until
// the op has been appended to every queue (and its other bookkeeping is done), so that the op cannot start while it
// is still being pushed. The pusher sets the counter to all of them before it appends the op anywhere: a queue may
// grant a waiting use as soon as it is linked, without the queue's lock (var_queue.h, the fast path). Grants given at
// append are counted by the pusher itself and given back with its own in one decrement, after the appends; an op
// granted everywhere at once is then the pusher's alone, and its counter is never touched by another thread. Whoever
// takes the count to zero owns the op's start: it is moved to a ReadyList and dispatched by that thread, never by two.
// An op of one variable whose pusher has nothing left to do once it is linked holds no grant of its pusher's (the
// engine's push: no scope to count it in, no wait fence to arm): its link publishes it, and its pusher touches it no
// more. So the completion that grants it dispatches it, and a worker completing a chain right behind its pusher runs
// the next op itself, where the pusher's grant, often the last, would have sent it through the executor.
//
// Happens-before: everything a granting thread did before its grant (in particular the completed predecessor's
// writes, which happen before the predecessor's release) is visible to the thread that makes the final grant, and so
// to the op when it runs. A grant at append carries the same through the queue's lock, which the pusher took after
// the predecessor's completion released it.
//
// Thread safety: grant() may be called concurrently from any thread; the links are owned as documented per field.
// Cost: one atomic read-modify-write per grant; no allocation.
#pragma once

#include <atomic>
#include <cassert>
#include <cstdint>

#include <depengine/support/intrusive_list.h>

namespace depengine {

class OpNode;
class VarQueue;

// How an op uses a variable. kAccumulate is a mutation whose order among the accumulations next to it does not matter:
// consecutive accumulations form a group, which orders like one write, its members each alone on the variable in the
// order they become ready (var_queue.h, Groups). kSync is an engine-internal exclusive use that does not count as a
// mutation: it orders like a write but leaves the version alone (WaitForVar and error clearing use it). In order of
// strength: a variable listed twice by one op folds into the stronger use (std::max), and `access >= kWrite` is an
// exclusive use, one compare.
enum class Access : std::uint8_t { kRead, kAccumulate, kWrite, kSync };

// One op's use of one variable. Lives inside the op's record; while the op waits behind a write it is linked into
// that variable's queue.
struct VarUse {
  VarQueue* var = nullptr;  // not owned: the engine owns variables and keeps them alive while ops use them
  OpNode* op = nullptr;     // the op this use belongs to (its owner)
  // The next waiting entry of var's queue: written under var's lock, and read by the queue's fast path without it,
  // through atomic_ref (var_queue.h).
  VarUse* next = nullptr;
  Access access = Access::kRead;
  std::uint32_t tag = 0;  // the owner's: the engine keeps the handle's generation here; the queue ignores it
};

class OpNode {
 public:
  // Sets the number of grants the op waits for. Only before any other thread can grant it: by its pusher, before it
  // is appended to any queue (the pusher's own grant included).
  void reset_wait(std::int32_t grants) noexcept {
    // relaxed: the op is published by the release store that links it into a queue (or by its executor's hand-off),
    // which a granter acquires before it decrements.
    wait_.store(grants, std::memory_order_relaxed);
  }

  // Records `grants` grants (the pusher gives those it counted at append with its own in one call). Returns true to
  // exactly one caller: the one whose grant completed the set.
  [[nodiscard]] bool grant(std::int32_t grants = 1) noexcept {
    // acq_rel: the release publishes this granter's history to the final granter; the acquire (which matters for
    // the final granter only) pairs with the release of every earlier grant, all in this counter's release sequence.
    const std::int32_t before = wait_.fetch_sub(grants, std::memory_order_acq_rel);
    assert(before >= grants && "op granted more often than it waits");
    return before == grants;
  }

  // Takes one grant off the count while no other thread can grant the op (a replayed op whose granting entries are
  // all held by the replaying thread). Returns the grants still missing.
  std::int32_t take_grant_locked() noexcept {
    // relaxed: as reset_wait().
    const std::int32_t left = wait_.load(std::memory_order_relaxed) - 1;
    assert(left >= 0 && "op granted more often than it waits");
    wait_.store(left, std::memory_order_relaxed);
    return left;
  }

  // Link in a ReadyList; owned by the thread that holds the list.
  OpNode* ready_next_ = nullptr;
  // The owner's (the engine's): what kind of node this is. The queue ignores it.
  std::uint8_t owner_kind = 0;
  // Set by the queue an accumulation parks on, under its lock (var_queue.h, Groups): the op waits for that group's
  // token alone, so the completion that frees it hands it the token. In the padding before run_stamp.
  bool parked_alone = false;
  // The owner's (the engine's): the tick of its run clock at which the op's function started, 0 while it does not run
  // (engine/detail/run_clock.h). The queue ignores it. In the padding before wait_, so it costs the node no space.
  // Atomic: a report reads it, under the lock of a queue the op is in, while the op's thread writes it.
  std::atomic<std::uint16_t> run_stamp{0};

 private:
  std::atomic<std::int32_t> wait_{0};
};

// An intrusive FIFO of ready ops, filled by the var queue while a lock is held and drained by the caller after it is
// released (no op is ever dispatched under a lock). Owned by one thread; never allocates.
using ReadyList = support::IntrusiveList<OpNode, &OpNode::ready_next_>;

}  // namespace depengine
