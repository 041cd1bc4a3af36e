// The per-operation wait counter, and an operation's use of one variable (the entry it puts in that variable's queue).
//
// An operation that uses k variables waits for one grant per variable queue, plus one held by the pushing thread until
// the op has been appended to every queue (and its other bookkeeping is done), so that the op cannot start while it
// is still being pushed. Grants given at append, while the pusher holds every queue's lock, are counted by the pusher
// itself: it then sets the counter to the grants still missing (those of queues where the op waits, its own, and any
// the engine adds), before it releases the locks, so no other thread can count down before the value is set. An op
// granted everywhere at once is then the pusher's alone, with no atomic operation on its counter. Whoever takes the
// count to zero owns the op's start: it is moved to a ReadyList and dispatched by that thread, never by two.
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

#include "support/intrusive_list.h"

namespace depengine {

class OpNode;
class VarQueue;

// How an op uses a variable. kSync is an engine-internal exclusive use that does not count as a mutation: it orders
// like a write but leaves the version alone (WaitForVar and error clearing use it).
enum class Access : std::uint8_t { kRead, kWrite, kSync };

// One op's use of one variable. Lives inside the op's record; while the op waits behind a write it is linked into
// that variable's queue.
struct VarUse {
  VarQueue* var = nullptr;  // not owned: the engine owns variables and keeps them alive while ops use them
  OpNode* op = nullptr;     // the op this use belongs to (its owner)
  VarUse* next = nullptr;   // next waiting entry of var's queue; written only under var's lock
  Access access = Access::kRead;
  std::uint32_t tag = 0;  // the owner's: the engine keeps the handle's generation here; the queue ignores it
};

class OpNode {
 public:
  // Sets the number of grants still missing. Only by the pusher, before any other thread can grant the op: before it
  // is appended to any queue, or while the pusher still holds the lock of every queue it was appended to.
  void reset_wait(std::int32_t grants) noexcept {
    // relaxed: another thread grants the op only after taking the lock of a queue it waits in, which the pusher
    // releases after this store, so the lock's release/acquire orders it.
    wait_.store(grants, std::memory_order_relaxed);
  }

  // Records one grant. Returns true to exactly one caller: the one whose grant completed the set.
  [[nodiscard]] bool grant() noexcept {
    // acq_rel: the release publishes this granter's history to the final granter; the acquire (which matters for
    // the final granter only) pairs with the release of every earlier grant, all in this counter's release sequence.
    const std::int32_t before = wait_.fetch_sub(1, std::memory_order_acq_rel);
    assert(before > 0 && "op granted more often than it waits");
    return before == 1;
  }

  // Takes one grant off the count while no other thread can grant the op: by the pusher, holding the lock of every
  // queue the op waits in, for a grant it counted itself (a use granted at append). Returns the grants still missing.
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

 private:
  std::atomic<std::int32_t> wait_{0};
};

// An intrusive FIFO of ready ops, filled by the var queue while a lock is held and drained by the caller after it is
// released (no op is ever dispatched under a lock). Owned by one thread; never allocates.
using ReadyList = support::IntrusiveList<OpNode, &OpNode::ready_next_>;

}  // namespace depengine
