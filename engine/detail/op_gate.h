// OpGate: whether an op about to run runs. The one gate every op passes, whatever its kind: a pushed CPU op as its
// executor runs it, a stream op as it is issued, an op of a replay, a step of a replayed graph of stream ops.
//
// An op does not run, and completes with an error instead, when
//   - it is cancelled: its CancelScope was cancelled (the scope's error, new to the error log, which the caller records
//     under the op's name: no wait would report it otherwise), or the engine is being destroyed with
//     EngineOptions::cancel_on_destruction (the teardown's error, made at construction so that destruction allocates
//     nothing). Deletions and the engine's internal ops are not cancellable; no_skip does not exempt an op;
//   - it already has an error (a stream it waited for failed: EngineCore::take_input_error);
//   - an input carries an error and the op is not no_skip: it passes that error on to what it mutates.
// A no_skip op that runs with an input error is told which (RunContext::input_error and input_error_var): the caller
// finds it with failed_input().
//
// Thread safety: close() once, from the thread destroying the engine; the rest from any thread. The teardown flag is a
// relaxed hint: an op that reads it late only runs, as it would have a moment earlier. Cost: an op without a scope
// reads one flag, on a line its runner reads anyway (EngineCore's layout), then its inputs' errors.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <type_traits>

#include <depengine/engine/cancel_scope.h>
#include <depengine/engine/detail/var_table.h>

namespace depengine::detail {

class OpGate {
 public:
  // What keeps an op from running: the error it completes with instead (null: it runs), and whether that error is a
  // cancellation by its scope that the op did not carry already (the caller records it in the error log).
  // `cancelled`: the op is stopped by a cancellation (its scope's, or the teardown's), not by an error it or an input
  // carries (for observers: OpOutcome::kCancelled).
  struct Verdict {
    const std::exception_ptr* error = nullptr;
    bool scope_cancelled = false;
    bool cancelled = false;
  };

  explicit OpGate(bool cancel_on_destruction)
      : teardown_error_(cancel_on_destruction
                            ? std::make_exception_ptr(Cancelled("cancelled: the engine was destroyed before the op ran "
                                                                "(EngineOptions::cancel_on_destruction)"))
                            : nullptr) {}

  // The engine's destruction has begun: with EngineOptions::cancel_on_destruction, every op not started from now on
  // completes with the teardown error.
  void close() noexcept {
    // relaxed: a flag each op reads before it runs; an op that reads it late only runs.
    if (teardown_error_ != nullptr) cancelling_.store(true, std::memory_order_relaxed);
  }

  // The verdict on an op of `scope` (null: none) that is `cancellable` (not a deletion or an internal op), `no_skip`
  // or not, with the error it may already carry at `own` (null: an op that never carries one before it runs, a replayed
  // op or a step; the test then folds away), about to run with the `count` inputs `uses`.
  template <class Use>
  [[nodiscard]] Verdict check(ScopeState* scope, bool cancellable, bool no_skip, const std::exception_ptr* own,
                              const Use* uses, std::uint32_t count) const noexcept {
    const bool has_own = own != nullptr && *own != nullptr;
    // relaxed: see close().
    if ((scope != nullptr || cancelling_.load(std::memory_order_relaxed)) && cancellable) [[unlikely]] {
      // acquire: pairs with the release store of CancelScope::Cancel(), which wrote the scope's error first.
      if (scope != nullptr && scope->cancelled.load(std::memory_order_acquire)) {
        return has_own ? Verdict{own, false} : Verdict{&scope->error, true, true};
      }
      if (cancelling_.load(std::memory_order_relaxed)) {
        return has_own ? Verdict{own, false} : Verdict{&teardown_error_, false, true};
      }
    }
    if (has_own) return Verdict{own, false};
    if (!no_skip) {
      const std::uint32_t failed = failed_input(uses, count);
      if (failed != count) [[unlikely]]
        return Verdict{&state(uses[failed])->error, false};
    }
    return {};
  }

  // The first of the `count` inputs `uses` whose variable carries an error, or `count`. Stable while the op runs: a
  // variable's error changes only under an exclusive use, which cannot overlap the op's own use.
  template <class Use>
  [[nodiscard]] static std::uint32_t failed_input(const Use* uses, std::uint32_t count) noexcept {
    for (std::uint32_t i = 0; i < count; ++i) {
      if (state(uses[i])->error != nullptr) [[unlikely]]
        return i;
    }
    return count;
  }

  // The variable of a use: a pushed op's (VarUse, whose queue is the state's base), or a replayed op's or step's.
  template <class Use>
  [[nodiscard]] static VarState* state(const Use& use) noexcept {
    if constexpr (std::is_same_v<Use, VarUse>) {
      return state_of(use);
    } else {
      return use.var;
    }
  }

 private:
  std::atomic<bool> cancelling_{false};
  const std::exception_ptr teardown_error_;
};

}  // namespace depengine::detail
