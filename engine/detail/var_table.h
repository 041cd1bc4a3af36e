// VarTable: the engine's variables — each one's queue and what the engine keeps beside it (VarState) — and the handles
// (Var) that name them.
//
// Slots have stable addresses (a deque that only grows) and are recycled through a free list once DeleteVariable's op
// has retired. A slot's generation moves on when DeleteVariable is pushed, so every handle made before is dead from
// then on; a handle carries the generation it was made at, and the engine's id, so a foreign or dead handle is
// detected without touching memory it does not own.
//
// Thread safety: every member from any thread. make() and recycle() take the table's mutex (variables are made and
// deleted far less often than they are used); checked() takes nothing. Allocation: make() grows the deque when no slot
// is free.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>

#include <depengine/engine/var.h>
#include <depengine/engine/var_queue/var_queue.h>
#include <depengine/support/cache_line.h>

namespace depengine::detail {

// One variable: its queue plus what the engine keeps beside it. The queue comes first so that a VarUse's VarQueue*
// converts back with a static_cast (state_of).
//
// Layout: two cache lines per variable, the queue's (var_queue.h, Two cache lines): the pushers' line, which also
// holds the generation (read by every push under the queue's lock), and the completers' line, which also holds the
// error (read by every op that runs) and what is cold. Two variables never share a line, so ops on different
// variables (the independent workload) trade no line.
struct alignas(support::kCacheLine) VarState : VarQueue {
  std::uint32_t slot = 0;  // its index in the table, for traces ("v<slot>"); immutable
  // The first error attached since the last clear. Ordered by the queue itself: written only by ops that mutate or
  // sync the variable (which run alone), read by any op that uses it (which runs after them).
  std::exception_ptr error;
  VarState* free_next = nullptr;  // guarded by VarTable::mutex_ while the slot is free
};
static_assert(sizeof(VarState) == 128, "a variable is two cache lines (see Layout above)");

[[nodiscard]] inline VarState* state_of(const VarUse& use) noexcept { return static_cast<VarState*>(use.var); }

class VarTable {
 public:
  // `signals`: the engine has a stream executor, so its variables' queues carry signals (var_queue.h).
  VarTable(std::uint32_t engine_id, bool signals) noexcept : engine_id_(engine_id), signals_(signals) {}
  VarTable(const VarTable&) = delete;
  VarTable& operator=(const VarTable&) = delete;

  [[nodiscard]] std::uint32_t engine_id() const noexcept { return engine_id_; }

  // A handle to a fresh variable (version 0, no error). Allocates when no slot is free (and, with signals, a slot's
  // signals the first time it is used).
  [[nodiscard]] Var make();
  // A handle to `var` at `generation` (a use's tag), for the engine's own bookkeeping of poisoned variables.
  [[nodiscard]] Var handle(VarState* var, std::uint32_t generation) const noexcept {
    return Var(var, engine_id_, generation);
  }
  // The state of a live handle of this engine; otherwise throws Error naming `api` and what is wrong with the handle.
  // Whether the handle is alive can change right after (a concurrent DeleteVariable); a push re-checks under the
  // variable's lock.
  [[nodiscard]] VarState* checked(const Var& var, const char* api) const;
  // Returns an idle variable's slot (its DeleteVariable op has retired) to the free list.
  void recycle(VarState* var) noexcept;
  // Calls visit(VarState&) for every slot, free or not, holding the table's mutex (no variable is made meanwhile).
  // The slow path of reports; visit may lock the variable (the table's mutex is never taken under a variable's lock).
  template <class Visit>
  void for_each(Visit&& visit) {
    std::lock_guard lock(mutex_);
    for (VarState& var : vars_) visit(var);
  }

 private:
  const std::uint32_t engine_id_;  // never reused in the process (see Var)
  const bool signals_;
  std::mutex mutex_;
  std::deque<VarState> vars_;  // guarded by mutex_ (growth); elements are owned by their users meanwhile
  VarState* free_ = nullptr;   // guarded by mutex_
};

}  // namespace depengine::detail
