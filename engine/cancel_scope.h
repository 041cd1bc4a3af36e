// CancelScope: a group of ops that can be cancelled together and waited for (the task-system seed's cancel flag; IREE's
// task scopes). Name it in PushOptions::scope:
//
//   depengine::CancelScope epoch;
//   for (...) engine.Push(step, reads, mutates, {.scope = &epoch});
//   epoch.Cancel();              // what has not started completes with depengine::Cancelled, without running
//   engine.WaitForScope(epoch);  // every op pushed with it has completed
//
// Cancel() sets a flag that an op checks when it is about to run (or, on a stream executor, to be issued): an op of the
// scope that has not started then completes with a Cancelled error without running, and the error reaches what it
// mutates like any other, so dependents outside the scope are skipped unless no_skip, and waits rethrow it. An op
// already running finishes (it may poll RunContext::cancelled() to stop early); work already on a device runs to
// completion. Cancel() returns at once, waiting for nothing; an op that was at the check when it was called may still
// start. A deletion (DeleteVariable) is never cancelled: its deleter runs, so nothing leaks. Cancelling again, or
// after everything ran, changes nothing. Ops pushed with the scope after Cancel() are cancelled as well.
//
// Abort an epoch, start the next. A cancelled scope stays cancelled, and the errors its ops left stay on the variables
// they mutate (so that a dependent outside the scope is skipped rather than fed a half-done step): resuming takes a
// new scope and a clear of those variables.
//
//   depengine::CancelScope epoch;                                // one scope per epoch
//   for (int k = 0; k < steps; ++k) engine.Replay(step, {.scope = &epoch});  // or Push(..., {.scope = &epoch})
//   ...                                                          // an op, or any thread, calls epoch.Cancel()
//   engine.WaitForScope(epoch);                                  // optional: the epoch's ops have all completed
//   if (epoch.cancelled()) engine.ClearErrors({w, act, grad});   // ordered after every op pushed on them so far
//   // the next epoch: a new CancelScope, the same graph (or a new capture, or plain pushes)
//
// ClearErrors is ordered like a mutation of each variable it names, so it may be called before the cancelled epoch's
// ops have drained: it clears what they leave, whenever they finish, and the next epoch's ops find the variables
// clean. A graph keeps the scope it was captured with for replays that name none; ReplayOptions::scope gives a replay
// the scope of its epoch instead (graph.h, "Cancel scopes"). This works alike on every executor, with and without
// replay. To learn why an epoch was aborted, WaitForVar the variable that carries the error before clearing it.
//
// A CancelScope is a handle: copies share one scope. Its state lives until the last handle and the last op pushed with
// it are gone, so a handle may be destroyed while its ops are still queued.
//
// Thread safety: every member from any thread. Cost: an op pushed with a scope pays two atomic increments on the
// scope's counting line at push and two decrements at retirement, and a load of its flag before it runs; an op
// without one pays a null pointer. Allocation: the constructor, and the first Cancel() (its error).
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <utility>

#include <depengine/support/cache_line.h>

namespace depengine {

namespace detail {

class EngineCore;
class GraphRunner;

// The state of a scope, shared by its handles and its ops.
struct ScopeState {
  // Read by every op of the scope before it runs; written once, by Cancel().
  alignas(support::kCacheLine) std::atomic<bool> cancelled{false};
  std::once_flag error_once;
  std::exception_ptr error;  // written once under error_once, before `cancelled` is set (release); then read-only
  // Written by every push and retirement of the scope's ops.
  alignas(support::kCacheLine) std::atomic<std::uint32_t> pending{0};  // ops pushed with the scope and not yet retired
  std::atomic<std::uint32_t> refs{1};                                  // handles, plus ops pushed and not yet retired

  // `ops` ops of the scope were pushed (a replay counts all of its ops in at once); each holds a reference until its
  // op_retired().
  void op_pushed(std::uint32_t ops = 1) noexcept {
    // relaxed: the op's own publication (and a WaitForScope's acquire of `pending` below) orders what matters.
    refs.fetch_add(ops, std::memory_order_relaxed);
    pending.fetch_add(ops, std::memory_order_relaxed);
  }
  // An op of the scope retired: wakes WaitForScope when it was the last, then drops the op's reference.
  static void op_retired(ScopeState* state) noexcept;
  static void release(ScopeState* state) noexcept;
};

}  // namespace detail

class CancelScope {
 public:
  CancelScope();
  ~CancelScope() { detail::ScopeState::release(state_); }
  // Copies share the scope: cancelling one cancels them all (a handle, as shared_ptr).
  CancelScope(const CancelScope& other) noexcept : state_(other.state_) {
    // relaxed: a new reference from an existing one, as shared_ptr's copy.
    state_->refs.fetch_add(1, std::memory_order_relaxed);
  }
  CancelScope& operator=(const CancelScope& other) noexcept {
    CancelScope copy(other);
    std::swap(state_, copy.state_);
    return *this;
  }

  // Cancels the scope's ops that have not started (see above). Throws nothing but std::bad_alloc (making its error).
  void Cancel();
  // Whether Cancel() has been called on the scope (by any of its copies).
  [[nodiscard]] bool cancelled() const noexcept {
    // acquire: pairs with the release store in Cancel(), so the scope's error is visible once this reads true.
    return state_->cancelled.load(std::memory_order_acquire);
  }
  // Ops pushed with the scope and not yet completed, at some moment during the call.
  [[nodiscard]] std::uint32_t pending() const noexcept {
    // acquire: pairs with the release decrement in op_retired(): what the completed ops did is visible.
    return state_->pending.load(std::memory_order_acquire);
  }

 private:
  friend class detail::EngineCore;
  friend class detail::GraphRunner;
  detail::ScopeState* state_;
};

}  // namespace depengine
