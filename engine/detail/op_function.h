// OpFunction: the type-erased function of one op, stored in its record without allocation when small.
//
// A callable of at most kInlineBytes bytes, alignment at most alignof(std::max_align_t), and a noexcept move
// constructor lives inline; any other is moved to the heap (one allocation per push, which engine.h documents).
// The op is invoked through one function pointer; synchronous ops ignore the Completion argument.
//
// Not thread-safe: an OpFunction is owned by one record, which one thread at a time holds.
#pragma once

#include <cstddef>
#include <functional>
#include <new>
#include <type_traits>
#include <utility>

#include "engine/run_context.h"

namespace depengine::detail {

class OpFunction {
 public:
  static constexpr std::size_t kInlineBytes = 56;

  OpFunction() = default;
  OpFunction(const OpFunction&) = delete;
  OpFunction& operator=(const OpFunction&) = delete;
  OpFunction(OpFunction&& other) noexcept { take(other); }
  OpFunction& operator=(OpFunction&& other) noexcept {
    if (this != &other) {
      reset();
      take(other);
    }
    return *this;
  }
  ~OpFunction() { reset(); }

  // Stores `fn` (any previous callable must have been reset), to be called later as fn(ctx), fn(),
  // fn(ctx, completion) or fn(completion): `Async` selects the last two.
  template <bool Async, class F>
  void emplace(F&& fn) {
    using Fn = std::decay_t<F>;
    if constexpr (fits_inline<Fn>()) {
      ::new (storage_) Fn(std::forward<F>(fn));
      invoke_ = [](void* self, const RunContext& ctx, const Completion* done) {
        call<Async>(*std::launder(static_cast<Fn*>(self)), ctx, done);
      };
      manage_ = [](void* self, void* target) noexcept {
        Fn* fn_ptr = std::launder(static_cast<Fn*>(self));
        if (target != nullptr) ::new (target) Fn(std::move(*fn_ptr));
        fn_ptr->~Fn();
      };
    } else {
      ::new (storage_) Fn*(new Fn(std::forward<F>(fn)));
      invoke_ = [](void* self, const RunContext& ctx, const Completion* done) {
        call<Async>(**static_cast<Fn**>(self), ctx, done);
      };
      manage_ = [](void* self, void* target) noexcept {
        Fn* heap = *static_cast<Fn**>(self);
        if (target != nullptr) {
          ::new (target) Fn*(heap);
        } else {
          delete heap;
        }
      };
    }
  }

  template <bool Async, class F>
  static OpFunction make(F&& fn) {
    OpFunction f;
    f.emplace<Async>(std::forward<F>(fn));
    return f;
  }

  [[nodiscard]] explicit operator bool() const noexcept { return invoke_ != nullptr; }

  // Calls the function. `done` is null for synchronous ops.
  void operator()(const RunContext& ctx, const Completion* done) { invoke_(storage_, ctx, done); }

  // Destroys the stored callable (and whatever it captured).
  void reset() noexcept {
    if (manage_ != nullptr) manage_(storage_, nullptr);
    invoke_ = nullptr;
    manage_ = nullptr;
  }

 private:
  using Invoke = void (*)(void* self, const RunContext& ctx, const Completion* done);
  // Moves the callable at `self` into `target` and destroys it at `self`; with a null target, destroys it only.
  using Manage = void (*)(void* self, void* target) noexcept;

  template <class Fn>
  static constexpr bool fits_inline() {
    return sizeof(Fn) <= kInlineBytes && alignof(Fn) <= alignof(std::max_align_t) &&
           std::is_nothrow_move_constructible_v<Fn>;
  }

  template <bool Async, class Fn>
  static void call(Fn& fn, const RunContext& ctx, const Completion* done) {
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

  void take(OpFunction& other) noexcept {
    if (other.manage_ != nullptr) other.manage_(other.storage_, storage_);
    invoke_ = std::exchange(other.invoke_, nullptr);
    manage_ = std::exchange(other.manage_, nullptr);
  }

  alignas(std::max_align_t) std::byte storage_[kInlineBytes];
  Invoke invoke_ = nullptr;
  Manage manage_ = nullptr;
};

}  // namespace depengine::detail
