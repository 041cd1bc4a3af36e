#include <cassert>

#include <depengine/engine/var_queue/var_queue.h>
#include <depengine/support/prefetch.h>

namespace depengine {

bool VarQueue::append_locked(VarUse& use) noexcept {
  assert(use.access != Access::kAccumulate && "an accumulation is appended with append_any_locked()");
  use.next = nullptr;  // not linked yet: nobody else reads it
  if (tail_ == nullptr) {
    if (use.access == Access::kRead) {
      ++granted_reads_;
      return true;
    }
    first_ = tail_ = &use;  // an exclusive use heading the list: runs once the reads before it are done
    return wait_for_reads_locked();
  }
  // release: pairs with the acquire load in next_of(), so a fast path that sees the link sees `use` and its op's
  // counter, which the pusher set before appending.
  std::atomic_ref(tail_->next).store(&use, std::memory_order_release);
  tail_ = &use;
  return false;
}

// A chain whose pusher ran ahead is completed one node after another, each pushed long before and cold in this core's
// caches; following the list costs two misses per node, one after the other: the node (its `next`, its op), then its
// op's wait counter. Two nodes ahead is what this completion can start fetching without waiting itself: the op of the
// node after `first` (whose counter the next completion grants) and the node after that one (whose line the next
// completion reads). Called before `first` is granted: until then neither node can run, complete or be recycled, so
// reading the node after `first` is safe; the last is only prefetched, never read.
void VarQueue::prefetch_behind(const VarUse& first) noexcept {
  const VarUse* second = next_of(first);
  if (second == nullptr) return;
  support::prefetch_for_write(second->op);  // the next completion counts down its wait counter
  if (const VarUse* third = next_of(*second)) __builtin_prefetch(third);
}

// The fast path (see Two cache lines): `use`, an exclusive use without a signal, hands over to `next`, an exclusive use
// linked behind it.
[[gnu::always_inline]] inline void VarQueue::hand_over(const VarUse& use, VarUse& next, ReadyList& ready) noexcept {
  done_lock_.lock();
  if (use.access == Access::kWrite) {
    // relaxed load: only the holder of the variable's exclusivity changes version_. release store: pairs with the
    // acquire in version(), publishing the mutation this counts.
    version_.store(version_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }
  // relaxed: read by lock_'s holders that the grants below order after this (first_locked()), and by inspect(), which
  // holds done_lock_.
  head_.store(&next, std::memory_order_relaxed);
  done_lock_.unlock();
  prefetch_behind(next);
  grant(next, ready);
}

// The fast path for reads (see Two cache lines): `use`, an exclusive use without a signal, completes with reads linked
// behind it, from `first_read` on. If an exclusive use is linked behind those reads, the list keeps it, so the pushers'
// side (first_, tail_) needs no change: the reads are granted, and that use made the first node, waiting for them (as
// wait_for_running_reads_locked() would make it), under done_lock_ alone. Returns false, having done nothing, when the
// reads reach the end of the list (a pusher may be linking the next node behind the last): then the slow path.
//
// Reads granted here are counted only in the waiting node's key, not in granted_reads_, which is on the pushers' line:
// that count catches up at the next completion on the slow path, which sets it to the completed count (no read runs
// while an exclusive use holds the variable), before anyone reads it (see complete_slow() and running_reads()).
bool VarQueue::hand_over_to_reads(const VarUse& use, VarUse& first_read, ReadyList& ready) noexcept {
  std::uint32_t reads = 0;
  VarUse* behind = &first_read;
  do {
    ++reads;
    behind = next_of(*behind);
  } while (behind != nullptr && behind->access == Access::kRead && reads < kHandOverReads);
  // Only an exclusive use behind the reads: a group behind them opens on the slow path, under lock_.
  if (behind == nullptr || behind->access < Access::kWrite) return false;
  done_lock_.lock();
  if (use.access == Access::kWrite) {
    // relaxed load and release store: as in hand_over().
    version_.store(version_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }
  // relaxed: no read runs while `use` holds the variable, and every increment of the reads before it happened before
  // its grant; none of the reads below can count itself before its grant, which publishes the stores that follow.
  const std::uint64_t completed = completed_reads_.load(std::memory_order_relaxed);
  // relaxed, both: read by the read that takes the key (read_done()) and by inspect(), which the grants below and
  // done_lock_ order after these stores.
  head_.store(behind, std::memory_order_relaxed);
  waiting_for_.store(wait_key(behind->tag, completed + reads), std::memory_order_relaxed);
  done_lock_.unlock();
  VarUse* read = &first_read;
  for (std::uint32_t i = 0; i < reads; ++i) {
    VarUse* const next = next_of(*read);  // before the grant: the read's op may then run, complete and be recycled
    grant(*read, ready);
    read = next;
  }
  return true;
}

// `use`, an exclusive use without a signal, found nothing linked behind it and lock_ held: waits for the holder, a
// pusher appending to this variable, for at most kAppendWait pauses, and hands over on the fast path if it links an
// exclusive use (see Two cache lines). Returns whether it did.
bool VarQueue::hand_over_when_linked(const VarUse& use, ReadyList& ready) noexcept {
  VarUse* next = next_of(use);
  for (int pauses = 0; next == nullptr && pauses < kAppendWait && lock_.is_locked(); ++pauses) {
    support::cpu_relax();
    next = next_of(use);
  }
  if (next == nullptr) next = next_of(use);  // the holder may have linked it just before it let go
  if (next == nullptr || next->access < Access::kWrite) return false;  // reads, or a group: the slow path
  hand_over(use, *next, ready);
  return true;
}

// Inlined into complete(): on the inline executor, and for reads, it is the common case, and a call of its own cost
// the hot path about ten instructions per use.
[[gnu::always_inline]] inline void VarQueue::complete_slow(const VarUse& use, const VarSignal* signal,
                                                           ReadyList& ready) noexcept {
  if (!lock_.try_acquire()) [[unlikely]] {
    if (signal == nullptr && use.access >= Access::kWrite && hand_over_when_linked(use, ready)) return;
    lock_.lock();
  }
  if (signal != nullptr) {
    assert(signals_ != nullptr && "complete() with a signal on a queue without signals (carry_signals)");
    if (use.access == Access::kRead) {
      if (!signal->empty()) signals_->reads.merge(*signal);
    } else {
      signals_->write = *signal;
      signals_->reads.clear();
    }
  }
  if (use.access == Access::kRead) {
    assert(running_reads() > 0 && "read completed twice");
    // first_ is the first node here: no fast path runs while reads do (see Two cache lines).
    assert((tail_ == nullptr || first_locked() == first_) && "a fast path ran while reads were running");
    // seq_cst: as in complete()'s read path, of which this is the locked form (the lock is for the signals).
    const std::uint64_t key = wait_key(use.tag, completed_reads_.fetch_add(1, std::memory_order_seq_cst) + 1);
    if (waiting_for_.load(std::memory_order_seq_cst) == key) read_done(key, ready, true);
  } else {
    assert(tail_ != nullptr && first_locked() == &use && running_reads() == 0 && "write completed out of order");
    // No read runs while `use` holds the variable: every read granted so far, those of the fast path for reads too
    // (which granted_reads_ does not count), has completed. relaxed: their increments happened before `use` was
    // granted.
    granted_reads_ = completed_seen_ = completed_reads_.load(std::memory_order_relaxed);
    if (use.access == Access::kWrite) {
      // relaxed load and release store: as in complete().
      version_.store(version_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
    }
    // relaxed: only the first node's completion writes head_, and that is us; inspect() cannot run while we hold
    // lock_. Cleared only when set, so the completers' line is not written on every slow path.
    if (head_.load(std::memory_order_relaxed) != nullptr) head_.store(nullptr, std::memory_order_relaxed);
    grant_front_reads(use.next, ready);  // use.next is written only under lock_, which we hold
  }
  lock_.unlock();
}

void VarQueue::complete(const VarUse& use, const VarSignal* signal, ReadyList& ready) noexcept {
  if (signal == nullptr) {
    if (use.access == Access::kRead) {  // see Reads complete without the lock
      // seq_cst: the read's side of the Dekker pair with wait_for_reads_locked(); and a release, in the sequence the
      // granting side reads, of what the read did.
      const std::uint64_t key = wait_key(use.tag, completed_reads_.fetch_add(1, std::memory_order_seq_cst) + 1);
      // seq_cst: as above. Once counted, the read may be the variable's last use: its write may run, the variable be
      // deleted and its slot reused, and a write of the next life wait. The key names this life (the use's tag), so a
      // read late to this load never matches that write's.
      if (waiting_for_.load(std::memory_order_seq_cst) == key) read_done(key, ready, false);
      return;
    }
    if (use.access == Access::kAccumulate) [[unlikely]] {
      complete_member(use, signal, ready);
      return;
    }
    VarUse* next = next_of(use);
    if (next != nullptr) {
      if (next->access >= Access::kWrite) {
        hand_over(use, *next, ready);
        return;
      }
      // A group behind (an accumulation) opens on the slow path, under lock_.
      if (next->access == Access::kRead && hand_over_to_reads(use, *next, ready)) return;
    }
  } else if (use.access == Access::kAccumulate) [[unlikely]] {
    complete_member(use, signal, ready);
    return;
  }
  complete_slow(use, signal, ready);
}

// Grants the reads at the front of the list that starts at `front` (they leave it), then makes what remains the list:
// its first node, an exclusive use, is granted if no read runs.
void VarQueue::grant_front_reads(VarUse* front, ReadyList& ready) noexcept {
  if (front == nullptr) {  // the list is empty (a chain's or independent work's every completion): nothing to grant
    first_ = tail_ = nullptr;
    return;
  }
  while (front != nullptr && front->access == Access::kRead) {
    VarUse* read = front;
    front = read->next;  // before the grant: the read's op may then run (and complete: it need not take lock_)
    ++granted_reads_;
    grant(*read, ready);
  }
  first_ = front;
  if (front == nullptr) {
    tail_ = nullptr;
  } else if (wait_for_reads_locked()) {
    grant_first_locked(*front, ready);
  }
}

bool VarQueue::wait_for_running_reads_locked() noexcept {
  // The node waits on the completers' line too, for the read that takes the key: head_, published by the store below.
  // relaxed: nothing else writes head_ meanwhile (no exclusive use completes while one waits for reads).
  head_.store(first_, std::memory_order_relaxed);
  const std::uint64_t key = wait_key(first_->tag, granted_reads_);
  // seq_cst, this store and the load: the waiter's side of the Dekker pair with a completing read (complete()): the
  // last read sees this target, or this load sees its increment.
  waiting_for_.store(key, std::memory_order_seq_cst);
  completed_seen_ = completed_reads_.load(std::memory_order_seq_cst);
  if (completed_seen_ != granted_reads_) return false;  // the last read grants the node
  // The last read may have seen the key too: whoever takes it grants. relaxed on failure: we then do nothing.
  std::uint64_t expected = key;
  return waiting_for_.compare_exchange_strong(expected, 0, std::memory_order_seq_cst, std::memory_order_relaxed);
}

void VarQueue::read_done(std::uint64_t key, ReadyList& ready, bool locked) noexcept {
  // seq_cst: takes the key from the waiter's store, or loses it to the waiter's own compare-exchange (or to a read of
  // the same count late to its load, which then grants the same node): the node is granted once. The success reads
  // from the waiter's store, so head_, written before it, is the node; it cannot change before this grant (no other
  // node comes first until the waiter has run). relaxed on failure: we then do nothing. relaxed load: ordered by the
  // compare-exchange's success.
  if (!waiting_for_.compare_exchange_strong(key, 0, std::memory_order_seq_cst, std::memory_order_relaxed)) return;
  VarUse& first = *head_.load(std::memory_order_relaxed);
  if (first.access != Access::kAccumulate) [[likely]] {
    grant(first, ready);
    return;
  }
  // A group opens under lock_: pushers may be appending members to it (see Groups).
  if (locked) {
    open_group_locked(first, ready);
    return;
  }
  lock_.lock();
  open_group_locked(first, ready);
  lock_.unlock();
}

// Groups (see Groups in var_queue.h and README.md). Everything below runs under lock_, but carry_groups().

void VarQueue::carry_groups() {
  // acquire: pairs with the release of the compare-exchange below, so a pusher that finds the group sees it built.
  if (group_.load(std::memory_order_acquire) != nullptr) return;
  auto made = std::make_unique<Group>();
  Group* expected = nullptr;
  // release: publishes the built group to the acquire above (and to lock_'s holders, which the pusher reaches through
  // lock_ after this). acquire on failure: the winner's group, built, is the one we then use.
  if (group_.compare_exchange_strong(expected, made.get(), std::memory_order_release, std::memory_order_acquire)) {
    (void)made.release();  // owned by the queue from now on
  }
}

// An accumulation appended: it joins the open group if that group ends the list (granted at once, and not linked), or
// opens one on an empty list once no read runs; else it waits in the list, behind a write, reads, or another group.
bool VarQueue::append_member_locked(VarUse& use) noexcept {
  Group& group = group_locked();
  use.next = nullptr;              // not linked yet: nobody else reads it
  if (tail_ == &group.sentinel) {  // the open group ends the list: nothing waits behind it yet
    ++group.pending;
    return true;
  }
  if (tail_ == nullptr) {
    first_ = tail_ = &use;
    // Reads run: the last of them opens the group (read_done()). None: it opens now, granted at append, and leaves the
    // list to the sentinel.
    if (!wait_for_reads_locked()) return false;
    group.pending = 1;
    first_ = tail_ = &group.sentinel;
    // relaxed: as in complete_slow(); wait_for_reads_locked() may have made the use head_ on its way.
    if (head_.load(std::memory_order_relaxed) != nullptr) head_.store(nullptr, std::memory_order_relaxed);
    return true;
  }
  // release: as in append_locked().
  std::atomic_ref(tail_->next).store(&use, std::memory_order_release);
  tail_ = &use;
  return false;
}

// The first node, no read running, is granted: an exclusive use alone, or a whole group.
void VarQueue::grant_first_locked(VarUse& first, ReadyList& ready) noexcept {
  if (first.access == Access::kAccumulate) {
    open_group_locked(first, ready);
  } else {
    grant(first, ready);
  }
}

// Grants every member of the group that starts at `first`, the first node: the run of accumulations from it. They
// leave the list, and the group's sentinel heads it in their place until the last of them completes: a member's record
// is recycled once it completes, which may be long before the group closes, so no member may stay linked.
void VarQueue::open_group_locked(VarUse& first, ReadyList& ready) noexcept {
  Group& group = group_locked();
  assert(group.pending == 0 && group.holder == nullptr && "a group opened twice");
  VarUse* member = &first;
  do {
    // Before the grant: the member may then run (its completion waits for lock_, which we hold).
    VarUse* const next = const_cast<VarUse*>(next_in_list(*member));
    ++group.pending;
    grant(*member, ready);
    member = next;
  } while (member != nullptr && member->access == Access::kAccumulate);
  // relaxed: the sentinel's link is read and written under lock_ only (no fast path starts from or reaches it).
  std::atomic_ref(group.sentinel.next).store(member, std::memory_order_relaxed);
  first_ = &group.sentinel;
  if (member == nullptr) tail_ = &group.sentinel;
  // relaxed: as in complete_slow(); the first member waited for reads as head_ if the last read opened the group.
  if (head_.load(std::memory_order_relaxed) != nullptr) head_.store(nullptr, std::memory_order_relaxed);
}

void VarQueue::take_token_locked(OpNode& op) noexcept {
  Group& group = group_locked();
  assert(group.pending > 0 && token_free_locked(op) && "a token taken outside an open group, or held");
  group.holder = &op;
}

OpNode* VarQueue::wake_locked() noexcept { return group_locked().holder == nullptr ? wake_first_locked() : nullptr; }

// The token is free: the first parked member is unparked, and handed the token if it waits for it alone (it then runs
// as soon as it is dispatched, and members of one group run in the order they parked). A member of several groups is
// only woken: handed V1's token while it waited for V2's, it would hold one while it waits for another (README.md,
// Groups, Deadlock).
OpNode* VarQueue::wake_first_locked() noexcept {
  Group& group = group_locked();
  OpNode* const first = group.parked.pop_front();
  if (first != nullptr && first->parked_alone) group.holder = first;
  return first;
}

// A member completed (or, skipped, finished): it counts as a mutation, hands the token on, and the last one closes the
// group. Always under lock_: the token and the group's count are guarded by it, and a completion is not a fast path.
void VarQueue::complete_member([[maybe_unused]] const VarUse& use, const VarSignal* signal, ReadyList& ready) noexcept {
  lock_.lock();
  Group& group = group_locked();
  assert(group.pending > 0 && group.holder == use.op && "a member completed without the group's token");
  if (signal != nullptr) {
    assert(signals_ != nullptr && "complete() with a signal on a queue without signals (carry_signals)");
    signals_->group = *signal;  // it waited for the member before it: its signal stands for both (Signals)
  }
  // relaxed load: the token holder alone changes version_ while the group is open (no fast path runs). release store:
  // pairs with the acquire in version().
  version_.store(version_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  // The token is free again, and the member that asked first is woken (our caller hands it on), handed the token if it
  // waits for it alone (wake_first_locked). It takes it under lock_, whose grant (ours is released below, after our
  // op's writes) carries what we did to it.
  group.holder = nullptr;
  if (OpNode* woken = wake_first_locked()) ready.push_back(woken);
  if (--group.pending == 0) close_group_locked(ready);
  lock_.unlock();
}

// The last member of the open group completed: the sentinel leaves the list, and what follows it is granted as after a
// write (reads at the front together, then an exclusive use or a group once they have completed).
void VarQueue::close_group_locked(ReadyList& ready) noexcept {
  Group& group = group_locked();
  assert(group.holder == nullptr && group.parked.empty() && "a group closed with its token held");
  assert(first_ == &group.sentinel && "an open group heads the list");
  VarUse* const front = const_cast<VarUse*>(next_in_list(group.sentinel));
  // relaxed: under lock_, as every access to the sentinel's link.
  std::atomic_ref(group.sentinel.next).store(nullptr, std::memory_order_relaxed);
  // No read ran while the group held the variable. relaxed: as in complete_slow().
  granted_reads_ = completed_seen_ = completed_reads_.load(std::memory_order_relaxed);
  if (signals_ != nullptr) {
    signals_->write = signals_->group;  // what later uses wait for: the last member, which waited for all before it
    signals_->reads.clear();
    signals_->group.clear();
  }
  grant_front_reads(front, ready);
}

}  // namespace depengine
