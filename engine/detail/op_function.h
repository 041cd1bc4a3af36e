// OpFunction: the type-erased function of one op, stored in its record without allocation when small.
//
// A support::SmallFunction (support/small_function.h) called as fn(ctx, done), holding the user's callable in the
// shape its push takes: fn(ctx) or fn() for Push and DeleteVariable, fn(ctx, completion) or fn(completion) for
// PushAsync (synchronous ops ignore the Completion argument). A callable of at most kInlineBytes bytes, alignment at
// most alignof(std::max_align_t), and a noexcept move constructor lives inline; any other is moved to the heap (one
// allocation per push, which engine.h documents).
//
// Not thread-safe: an OpFunction is owned by one record, which one thread at a time holds.
#pragma once

#include <cstddef>
#include <type_traits>
#include <utility>

#include <depengine/engine/run_context.h>
#include <depengine/support/small_function.h>

namespace depengine::detail {

class OpFunction {
 public:
  static constexpr std::size_t kInlineBytes = 56;

  // Stores `fn` (any previous callable must have been reset), to be called later as fn(ctx), fn(),
  // fn(ctx, completion) or fn(completion): `Async` selects the last two.
  template <bool Async, class F>
  void emplace(F&& fn) {
    fn_.emplace(Shaped<Async, std::decay_t<F>>{std::forward<F>(fn)});
  }

  template <bool Async, class F>
  static OpFunction make(F&& fn) {
    OpFunction f;
    f.emplace<Async>(std::forward<F>(fn));
    return f;
  }

  [[nodiscard]] explicit operator bool() const noexcept { return static_cast<bool>(fn_); }

  // Calls the function. `done` is null for synchronous ops.
  void operator()(const RunContext& ctx, const Completion* done) { fn_(ctx, done); }

  // Destroys the stored callable (and whatever it captured).
  void reset() noexcept { fn_.reset(); }

 private:
  // The user's callable, called in the shape of its push. As large as the callable itself, so it fits inline exactly
  // when the callable does.
  template <bool Async, class Fn>
  struct Shaped {
    Fn fn;
    void operator()(const RunContext& ctx, const Completion* done) {
      if constexpr (Async) {
        if constexpr (std::is_invocable_v<Fn&, const RunContext&, Completion>) {
          fn(ctx, *done);
        } else {
          fn(*done);
        }
      } else if constexpr (std::is_invocable_v<Fn&, const RunContext&>) {
        fn(ctx);
      } else {
        fn();
      }
    }
  };

  support::SmallFunction<void(const RunContext&, const Completion*), kInlineBytes> fn_;
};

}  // namespace depengine::detail
