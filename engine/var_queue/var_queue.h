// The queue of one variable: the order in which ops may use it.
//
// Ops are appended in push order. Consecutive reads run together; a write (or a sync use) waits until every earlier
// read and write has completed and holds back every later use until it completes. This is MXNet's ThreadedVar
// protocol, with the queue nodes embedded in the op records (VarUse) so that appending never allocates.
//
// State:
//
//     running reads = 2             first node                        tail_
//     (granted_reads_ -             v                                 v
//      completed_reads_)            [W1] -> [R3] -> [R4] -> [W5] -> [R6]
//                                   first write: granted once no read runs
//
//   - A read appended while the list is empty is granted at once (granted_reads_ + 1); otherwise it waits in the list.
//     (A grant at append is returned to the pusher, which counts it itself. See append_locked().)
//   - A write appended to an empty list becomes the first node, granted at once if no read is running.
//   - When the last running read completes (completed_reads_ + 1), the first node (a write) is granted.
//   - When the first write completes it leaves the list, the version moves on, and the reads now at the front are
//     granted together and leave the list; if a write then heads the list and no read is running, it is granted.
//
// Granted reads leave the list, so the list holds exactly the ops still waiting plus the granted first write.
//
// Two cache lines, one per side, so that a pusher running ahead of a chain and the thread completing it do not trade
// a line per op:
//   - the pushers' line: lock_, which pushers hold to append (and completions take on their slow path), the list's
//     tail_, first_ (the first node as lock_'s holders know it), granted_reads_ and completed_seen_, and the owner's
//     generation;
//   - the completers' line: done_lock_, head_ (the first node as the fast path moved it), version_, completed_reads_
//     and waiting_for_.
// The fast path: an exclusive use (write or sync) that completes while another exclusive use is already linked behind
// it hands over to that use under done_lock_ alone, without touching the pushers' line: the new first node goes to
// head_, and first_ is left stale until a slow path, which holds lock_, sets the first node again (and clears head_).
// The fast path also starts fetching the two nodes behind the new first one (prefetch_behind()), which a chain pushed
// far ahead of its completions would otherwise miss on one after the other.
// The fast path for reads: an exclusive use that completes with reads linked behind it, at most kHandOverReads of them,
// and an exclusive use linked behind those, grants the reads and makes that use the first node, waiting for them (as
// below), under done_lock_ alone (hand_over_to_reads()). The list keeps that use, so the pushers' side needs no change;
// the reads it granted are counted only in the waiting node's key, and granted_reads_ catches up at the next completion
// on the slow path, which sets it to the completed count (no read runs while an exclusive use holds the variable).
// Reads that reach the end of the list (a pusher may be linking the next node behind the last) take the slow path.
// The first node is head_ when head_ is set, else first_; every completion but the fast paths and a read's without a
// signal (below) takes lock_. A first node that starts waiting for reads is made head_ too (under lock_, or by the fast
// path for reads), so that the read that grants it finds it on the completers' line: no other fast path runs meanwhile
// (no exclusive use is granted while reads run).
// A completion that finds nothing linked behind it, and lock_ held at its first attempt, waits for the holder instead
// (hand_over_when_linked(), kAppendWait): that is a pusher appending to this variable, most often the next op of a
// chain whose pusher the completing thread has caught up with. If it links an exclusive use, the completion takes the
// fast path. Taking lock_ behind the pusher instead makes the two go on in lock-step, trading the pushers' line twice
// per op, each waiting at the lock for the other (a chain pushed from one thread then ran at about twice the time per
// op: bench/README.md).
//
// Reads complete without the lock. A read's completion without a signal counts itself on the completers' line
// (completed_reads_, a seq_cst increment) and takes no lock, so the readers of a fan-out do not trade the pushers' line
// with the pusher. A first node that starts waiting for running reads (appended behind them, or left first by a
// write's completion that granted reads) records in waiting_for_ the completed count it needs (the reads granted by
// then: no read is granted while an exclusive use waits), keyed with the variable's life (wait_key()), then reads
// completed_reads_ again, under lock_, both seq_cst. It also becomes head_, so that the completers' line names it.
// A completing read reads waiting_for_ after its increment: the one whose count equals it is the last, and takes the
// key with a compare-exchange to 0, without lock_; if it wins, it grants head_. The two sides are a Dekker pair: the
// waiter sees the last read's increment, or that read sees the waiter's target, or both, and then both try to take the
// key, so the node is granted exactly once. So neither the readers nor the last of them write the pushers' line.
// Happens-before: the reads' increments form one release sequence on completed_reads_, which the granting side reads
// (seq_cst) before its grant; a read that takes the key reads from the waiter's store, so it sees head_.
//
// The link from a node to the next is written by its pusher (a release store, under lock_) and read by the fast path
// (an acquire load, without lock_), so a node can be granted as soon as it is linked: its pusher must hold a grant of
// its own until it has finished publishing (op_node.h).
//
// Pushing an op that uses several variables takes all of their locks before it appends to any of them, and lets each
// go once the op is in its queue: two-phase locking. So the order of ops on every variable is consistent with one total
// order of pushes (the order in which they came to hold all of their locks), and two threads pushing over the same
// variables can never order them oppositely on two queues (MXNet could, and deadlocked). A push that holds locks blocks
// only for a lock above all of them in one global order (ascending address); for any other it waits a bounded while,
// and then lets go of all of them (engine/detail/push.cpp), so pushes cannot deadlock. A completion takes one lock at
// a time (done_lock_ on the fast paths, lock_ otherwise) and never nests, so it cannot deadlock with a push; inspect()
// takes lock_, then done_lock_.
//
// Happens-before: a completing op's writes happen before its complete() grants the next op, which its wait counter
// carries on (see op_node.h); a grant at append carries them through lock_, which every completion that can leave the
// list empty releases after its writes. So writes made by an op that mutates V are visible to every op pushed later
// that reads or mutates V.
//
// Signals (docs/architecture.md §3). A stream op releases its uses when it is issued, long before its device work
// completes, so each release may carry a signal: the (axis, epoch) entries that a later user must wait for on the
// device or on the tracker. The queue keeps two, updated under lock_ by complete() (a completion with a signal never
// takes the fast path):
//   - the write signal: the signal of the last exclusive use (write or sync). Every later use must wait for it.
//   - the reads signal: the merged signals of the reads released since then. The next exclusive use waits for them.
// A read that is granted reads the write signal; an exclusive use reads both (merge_wait_signal()). Both
// reads happen after the grant without the lock: the signals change only when an exclusive use completes, which
// cannot happen while an earlier-granted use is still outstanding, and the grant carries the writes to the reader.
// An exclusive use that releases with an empty signal (a CPU op, which ran after everything it waited for had
// completed) clears both. Signals are never written when an engine has no stream executor (complete() gets nullptr), so
// they live out of line (two wait frontiers, some 530 bytes), allocated by carry_signals() only for engines that have
// one: a CPU-only engine's queue fits its two lines, and so does the engine's whole variable.
//
// Groups (accumulations, Access::kAccumulate; README.md, Groups). A run of consecutive accumulations in the list is a
// group. It waits like a write (for the reads and the write before it) and holds back what follows it like a write,
// but when it reaches the front all its members are granted at once (open_group_locked()) and leave the list, where the
// group's sentinel node takes their place; an accumulation appended while the sentinel ends the list joins the group,
// granted at append. Each member completes on the
// slow path, under lock_; the last to complete (pending 0) closes the group: the sentinel leaves the list, the version
// has moved on once per member, and what follows is granted as after a write. Members run one at a time: a member
// whose other grants have all arrived takes the group's token (take_token_locked()) before it runs, or parks on the
// group; a completing member gives the token back and wakes the first parked member, which it appends to `ready` to ask
// again. The state lives out of line (Group), made by carry_groups() for a variable that is ever accumulated into, so
// that other variables keep their two lines; no fast path runs while a group heads the list (none starts from a
// member's completion, and none hands over to an accumulation), so the completers' line is untouched by groups but for
// the version. With signals, a member completes with its signal, which the group keeps until the next member completes;
// the engine takes a member's token before it builds the member's wait frontier (merge_wait_signal()), so each member
// waits for the one before it. A stream member completes when it is issued and gives the token back then: members on
// different streams are ordered on the device, by one wait each at most.
//
// Thread safety: lock()/append_locked() by pushing threads, complete() by completing threads, concurrently.
// Cost: one spinlock acquisition per append and per completion (a read's without a signal: one increment, and a
// compare-exchange for the last read a waiting write needs), O(1) work plus one grant per op it releases. No
// allocation, except carry_signals() once per queue.
#pragma once

#include <atomic>
#include <cassert>
#include <cstdint>
#include <memory>
#include <mutex>

#include <depengine/engine/var_queue/op_node.h>
#include <depengine/frontier/frontier.h>
#include <depengine/frontier/vocabulary.h>
#include <depengine/support/cache_line.h>
#include <depengine/support/prefetch.h>
#include <depengine/support/spinlock.h>

namespace depengine {

// A variable's signals are wait frontiers: at most one entry per axis, and the engine bounds its axes to their capacity
// (so merging signals never overflows).
using VarSignal = WaitFrontier;

class VarQueue {
 public:
  VarQueue() = default;
  ~VarQueue() {
    // relaxed: the queue is no longer shared when it is destroyed.
    delete group_.load(std::memory_order_relaxed);
  }
  VarQueue(const VarQueue&) = delete;
  VarQueue& operator=(const VarQueue&) = delete;

  // Locks the queue for appending. Hold it only across append_locked() calls of one push.
  void lock() noexcept { lock_.lock(); }
  void unlock() noexcept { lock_.unlock(); }
  // One attempt at lock(), without looking first: for a pusher that expects the lock free (it costs what lock() costs
  // then). Returns whether it took the lock.
  [[nodiscard]] bool try_lock() noexcept { return lock_.try_acquire(); }
  // Whether some thread holds the lock: a hint, for a pusher waiting for it to come free before it tries again.
  [[nodiscard]] bool locked() const noexcept { return lock_.is_locked(); }

  // Appends `use` and returns whether it is granted at once. A use granted at once does not count down its op's wait
  // counter: the pusher counts such grants itself (op_node.h), so that an op whose uses are all granted at push costs
  // no atomic operation on its counter. A use that waits may be granted by a completion as soon as it is linked, even
  // before lock() is released (the fast path): its op's counter must already hold every grant the op waits for, the
  // pusher's own included if it holds one (op_node.h). Requires lock() held.
  [[nodiscard]] bool append_locked(VarUse& use) noexcept;
  // append_locked() for a use that may be an accumulation (Access::kAccumulate; see Groups above), which
  // append_locked() does not take: a push that has none pays no test per use for them.
  [[nodiscard]] bool append_any_locked(VarUse& use) noexcept {
    return use.access == Access::kAccumulate ? append_member_locked(use) : append_locked(use);
  }

  // Records that `use` has completed (or, for a stream op, been issued): releases the ops it was holding back,
  // appending those made ready to `ready`. `signal` (null: none, the engine has no streams) is what later users must
  // wait for (see Signals above). Takes done_lock_, lock_ or both (see the fast path above). `use` must be granted and
  // not yet completed.
  void complete(const VarUse& use, const VarSignal* signal, ReadyList& ready) noexcept;

  // Starts fetching, for writing, the completers' line, which every complete() writes (see Two cache lines). For a
  // thread about to complete uses of several queues: their lines then cross together, not one completion after another.
  void prefetch_completion() const noexcept { support::prefetch_for_write(&done_lock_); }

  // Makes the queue able to hold groups of accumulations (see Groups above): required before the first append of an
  // Access::kAccumulate use. Any thread, concurrently with anything: pushers call it before they lock the queue (the
  // push that first accumulates into a variable). Allocates once per queue (throws std::bad_alloc), kept across
  // reset_idle(); afterwards a load and a compare.
  void carry_groups();

  // The group's token (see Groups above), asked for by the op of a granted accumulation of this queue once its other
  // grants have all arrived, holding lock_ (lock()): if token_free_locked(), it takes it; else it parks on the group,
  // and the holder's completion wakes the first parked member (appends it to its ready list, not holding the token),
  // which then asks again. An op of several groups holds the lock_ of each at once (in ascending address order, as
  // every path that holds several queue locks takes them) and takes every token or none, parking on one that is held:
  // so a member never waits holding a token, and no two members wait for each other's (README.md, Groups, Deadlock).
  // Happens-before: everything the member before did on the variable (its completion, under lock_) happens before the
  // token is taken. Each requires lock_ held, and `op`'s accumulation of this queue granted.
  // Whether `op` may take the token: free, or handed to it (below).
  [[nodiscard]] bool token_free_locked(const OpNode& op) const noexcept {
    const OpNode* const holder = group_locked().holder;
    return holder == nullptr || holder == &op;
  }
  void take_token_locked(OpNode& op) noexcept;
  // `alone`: `op` is a member of this group only. The completion that frees the token then hands it to `op` if `op` is
  // the first parked member, so that such members run in the order they parked; a member of several groups is only
  // woken, holding nothing, and takes its tokens all at once when it asks again.
  void park_locked(OpNode& op, bool alone) noexcept {
    op.parked_alone = alone;
    group_locked().parked.push_back(&op);
  }
  // The first parked member, unparked (and handed the token if it parked alone), if the token is free: to be woken.
  // An op that was woken for this token and parks on another instead passes the wake on with this, or the members
  // parked behind it would wait for a token nobody holds.
  [[nodiscard]] OpNode* wake_locked() noexcept;

  // Makes the queue keep signals (see Signals above): required before the first complete() with a signal. Call while
  // the queue is not shared (the engine does when it makes the variable); kept across reset_idle(). Allocates once.
  void carry_signals() {
    if (signals_ == nullptr) signals_ = std::make_unique<Signals>();
  }

  // Merges into `out` what a granted `use` must wait for: the write signal, for an exclusive use the reads signal, and
  // for an accumulation the signal of the group's member that completed last. Call only between the use's grant and
  // its completion (see Signals above), an accumulation's only while its op holds the group's token (the members'
  // completions write it), on a queue that carries signals.
  void merge_wait_signal(const VarUse& use, VarSignal& out) const noexcept {
    assert(signals_ != nullptr && "merge_wait_signal on a queue without signals (carry_signals)");
    if (!signals_->write.empty()) out.merge(signals_->write);
    if (use.access != Access::kRead && !signals_->reads.empty()) out.merge(signals_->reads);
    if (use.access == Access::kAccumulate && !signals_->group.empty()) out.merge(signals_->group);
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
  [[nodiscard]] bool idle_locked() const noexcept { return tail_ == nullptr && running_reads() == 0; }

  // For a report of what ops wait for (the engine's in-flight report): calls visit(reads, first) with both locks held,
  // where `reads` is the number of reads granted and not yet completed (they have left the list), and `first` the
  // first waiting use, or null, the list linked through VarUse::next: walk it with next_in_list(). The first is
  // granted, and so holds the variable, when it is a write or sync use and no read is running (a fast path may have
  // granted it a moment before its grant reached the op's counter; and with no read running, the last read may be
  // about to grant it, its count taken, the write's key not yet). Holding both locks, nothing in the list can complete
  // (running reads still can, without a lock); keep the visit short, since fast paths wait for it.
  template <class Visit>
  void inspect(Visit&& visit) {
    const std::lock_guard push_side(lock_);
    const std::lock_guard done_side(done_lock_);
    const VarUse* first = tail_ == nullptr ? nullptr : first_locked();
    // An open group's members have left the list (see Groups): its sentinel, which belongs to no op, is not shown.
    if (first != nullptr && first->op == nullptr) first = next_in_list(*first);
    visit(static_cast<std::int32_t>(running_reads()), first);
  }
  // The use linked after `use` in the list, for inspect()'s visit.
  [[nodiscard]] static const VarUse* next_in_list(const VarUse& use) noexcept {
    // relaxed: under lock_, which every writer of a link holds; atomic only because a fast path may load the first
    // node's link at the same time (next_of()), and an object reached through atomic_ref is accessed through it alone.
    return std::atomic_ref(const_cast<VarUse*&>(use.next)).load(std::memory_order_relaxed);
  }

  // Returns an idle queue to its initial state (version 0), for a new variable that reuses it. Requires
  // idle_locked() and no concurrent append or complete (the engine recycles a slot only after its last op).
  void reset_idle() noexcept {
    assert(head_.load(std::memory_order_relaxed) == nullptr &&
           "an idle queue has no first node");  // relaxed: quiescent
    assert(waiting_for_.load(std::memory_order_relaxed) == 0 && "an idle queue has no waiting write");
    // acquire: pairs with carry_groups()'s release compare-exchange, which a push through a stale handle may make on
    // this slot concurrently (its push is refused later), so that the group read here is the constructed one.
    assert((group_.load(std::memory_order_acquire) == nullptr ||
            (group_locked().pending == 0 && group_locked().holder == nullptr)) &&
           "an idle queue has no open group");
    // relaxed: the queue is quiescent; whoever receives it next is handed it through the engine's variable-table
    // mutex, which orders these stores before their first use.
    version_.store(0, std::memory_order_relaxed);
    granted_reads_ = 0;
    completed_seen_ = 0;
    completed_reads_.store(0, std::memory_order_relaxed);
    if (signals_ != nullptr) *signals_ = Signals{};
  }

 private:
  static void grant(VarUse& use, ReadyList& ready) noexcept {
    if (use.op->grant()) ready.push_back(use.op);
  }
  // The link from `use` to the next node: written by pushers under lock_, read by the fast path without it.
  static VarUse* next_of(const VarUse& use) noexcept {
    // acquire: pairs with the release store in append_locked(), so the linked node (and its op's counter, set by its
    // pusher before the append) is visible to a fast path that grants it.
    return std::atomic_ref(const_cast<VarUse*&>(use.next)).load(std::memory_order_acquire);
  }
  // The list's first node, while it is not empty (see the fast path above). Requires lock_ held.
  [[nodiscard]] VarUse* first_locked() const noexcept {
    // relaxed: head_ changes only at the completion of the first node, which the caller either is or follows through
    // the grants that led to it (inspect() holds done_lock_ too, which the fast path writes under).
    VarUse* head = head_.load(std::memory_order_relaxed);
    return head != nullptr ? head : first_;
  }
  // The most pauses a completion waits for a pusher that holds lock_ (see the fast path above): far longer than an
  // append holds it; the bound is for a pusher preempted while it does.
  static constexpr int kAppendWait = 256;
  // The most reads the fast path for reads grants (hand_over_to_reads()); a longer run takes the slow path. A fan-out
  // of 64 readers per write, granted on the fast path, let the pusher run ahead to the in-flight bound, where its
  // workers, each read a miss on a cold record, ran at 1.36 times the time per op (engine/var_queue/README.md).
  static constexpr std::uint32_t kHandOverReads = 16;
  void hand_over(const VarUse& use, VarUse& next, ReadyList& ready) noexcept;
  bool hand_over_to_reads(const VarUse& use, VarUse& first_read, ReadyList& ready) noexcept;
  // Groups (see Groups above). Each requires lock_ held, but complete_member(). Out of line: inlined into
  // append_locked() and complete(), the first two made every append and completion save registers they do not need.
  [[gnu::noinline]] bool append_member_locked(VarUse& use) noexcept;
  void grant_first_locked(VarUse& first, ReadyList& ready) noexcept;
  [[gnu::noinline]] void open_group_locked(VarUse& first, ReadyList& ready) noexcept;
  [[gnu::noinline]] void complete_member(const VarUse& use, const VarSignal* signal, ReadyList& ready) noexcept;
  OpNode* wake_first_locked() noexcept;
  void close_group_locked(ReadyList& ready) noexcept;
  bool hand_over_when_linked(const VarUse& use, ReadyList& ready) noexcept;
  void complete_slow(const VarUse& use, const VarSignal* signal, ReadyList& ready) noexcept;
  static void prefetch_behind(const VarUse& first) noexcept;
  void grant_front_reads(VarUse* front, ReadyList& ready) noexcept;
  // Reads granted and not yet completed. Requires lock_ held, and, unless the list is empty or the caller completes its
  // first node, done_lock_ too (a fast path for reads may grant reads meanwhile); or quiescence.
  [[nodiscard]] std::uint64_t running_reads() const noexcept {
    // seq_cst: as the completing reads' increments. relaxed: the key changes only under the locks the caller holds, or
    // by the compare-exchange of the last read it waits for (after which none runs).
    const std::uint64_t completed = completed_reads_.load(std::memory_order_seq_cst);
    const std::uint64_t key = waiting_for_.load(std::memory_order_relaxed);
    // A first node waiting for reads knows how many it waits for, those of the fast path for reads included.
    if (key != 0) return (key - completed) & 0xffffffffU;
    // granted_reads_ lags behind the completed count after a fast path for reads, whose reads have then all completed
    // (the node they held back has been granted), until the next slow path catches it up (hand_over_to_reads()).
    return granted_reads_ > completed ? granted_reads_ - completed : 0;
  }
  // The first node, an exclusive use, waits for the running reads: true if none runs (grant it now); else it is left
  // to the read that completes last. Requires lock_ held.
  [[nodiscard]] bool wait_for_reads_locked() noexcept {
    // Every granted read is known to have completed: no need to read the completers' line (a chain of writes never
    // does). Otherwise look, and wait if some still run.
    if (granted_reads_ == completed_seen_) return true;
    // seq_cst: see wait_for_running_reads_locked().
    completed_seen_ = completed_reads_.load(std::memory_order_seq_cst);
    return granted_reads_ == completed_seen_ || wait_for_running_reads_locked();
  }
  [[nodiscard]] bool wait_for_running_reads_locked() noexcept;
  // A read completed without a signal and found its key in waiting_for_ (see Reads complete without the lock).
  // `locked`: the caller holds lock_ (a group it opens needs it).
  void read_done(std::uint64_t key, ReadyList& ready, bool locked) noexcept;
  // What waiting_for_ holds while a write of the variable's life `tag` (VarUse::tag, the handle's generation) waits
  // for `completed` reads to have completed: never 0 (none waits), and never equal across lives, so a read counted in
  // one life cannot match a write waiting in the next (see complete()). The counts compare modulo 2^32 (the reads
  // running at once are far fewer).
  [[nodiscard]] static constexpr std::uint64_t wait_key(std::uint32_t tag, std::uint64_t completed) noexcept {
    return std::uint64_t{1} << 63 | std::uint64_t{tag & 0x7fffffffU} << 32 | (completed & 0xffffffffU);
  }

 public:
  // The owner's: the engine numbers a variable slot's lives here (DeleteVariable moves it on; handles made earlier are
  // dead). Written under lock() and read there by every push, so it lives on the pushers' line; relaxed loads
  // elsewhere only detect misuse early.
  std::atomic<std::uint32_t> generation{0};

 private:
  // The pushers' line (see Two cache lines above). lock_ guards granted_reads_, first_ and tail_.
  support::Spinlock lock_;
  // Reads ever granted; those not yet completed (see completed_reads_) precede the first node.
  std::uint64_t granted_reads_ = 0;
  std::uint64_t completed_seen_ = 0;  // completed_reads_ as lock_'s holders last read it (a lower bound of it)
  VarUse* first_ = nullptr;           // the first node, unless head_ is set; if non-null a write or sync use
  VarUse* tail_ = nullptr;            // the last node; null exactly when the list is empty
  // See Signals above: written under lock_ by complete(), read by granted users. Null while the queue carries none.
  struct Signals {
    VarSignal write;  // the last exclusive use's (or the last group's, merged)
    VarSignal reads;  // merged, of the reads released since
    // The signal of the open group's member that completed last (see Groups above): each member waited for the one
    // before it (this signal, in its wait frontier), so it stands for them all. The group's write signal once it
    // closes.
    VarSignal group;
  };
  std::unique_ptr<Signals> signals_;
  // The open group of accumulations and its token (see Groups above). All fields guarded by lock_.
  struct Group {
    // Heads the list while a group is open, in place of its members (granted, they have left it: a member's record is
    // recycled once it completes, before the group closes). Belongs to no op (op is null).
    VarUse sentinel{nullptr, nullptr, nullptr, Access::kAccumulate, 0};
    std::uint32_t pending = 0;  // members of the open group granted and not yet completed; 0: no group is open
    OpNode* holder = nullptr;   // the member that holds the token (runs alone on the variable); null: the token is free
    ReadyList parked;           // members ready but for the token, in the order they asked for it (holding none)
  };
  // Null until carry_groups(); then set for the queue's life. Owned.
  std::atomic<Group*> group_{nullptr};
  [[nodiscard]] Group& group_locked() const noexcept {
    // relaxed: set by carry_groups() before the push that appended the accumulation; whoever calls this follows that
    // push through lock_ or through the grants (the caller is the pusher, a member, or a completion it released).
    return *group_.load(std::memory_order_relaxed);
  }

  // The completers' line. done_lock_ guards head_'s writes by fast paths (lock_'s holders write it while no fast path
  // can run: see Two cache lines); version_ is written by the holder of the variable's exclusivity and read lock-free.
  // completed_reads_ and waiting_for_: see Reads complete without the lock above.
  alignas(support::kCacheLine) support::Spinlock done_lock_;
  // The first node as the fast path moved it, or as it started waiting for reads; or null (then first_ is).
  std::atomic<VarUse*> head_{nullptr};
  std::atomic<std::uint64_t> version_{0};
  std::atomic<std::uint64_t> completed_reads_{0};  // reads ever completed
  // While the first node, an exclusive use, waits for running reads: wait_key() of its life and of the count of
  // completed reads it waits for (the reads granted when it started waiting); 0 otherwise. Set under lock_; cleared
  // by the compare-exchange that wins the right to grant the node (read_done(), wait_for_running_reads_locked()).
  std::atomic<std::uint64_t> waiting_for_{0};
};

}  // namespace depengine
