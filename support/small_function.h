// support/: SmallFunction, a move-only type-erased callable that stores small callables without allocation.
//
// SmallFunction<void(Args...), InlineBytes> holds any callable invocable with Args... (its result is discarded). One
// of at most InlineBytes bytes, alignment at most alignof(std::max_align_t), and a noexcept move constructor lives
// inline; any other is moved to the heap (one allocation, which the users' headers document). It is called through
// one function pointer, and moved or destroyed through a second.
//
// The engine's op functions (engine/detail/op_function.h) and the host stream backend's launches
// (executors/host_stream/host_task.h) are both this, at their own inline sizes.
//
// Thread safety: none; a SmallFunction is owned by one thread at a time. Failure: emplacing propagates what the
// callable's constructor throws (and std::bad_alloc for the heap), leaving the SmallFunction empty.
#pragma once

#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

namespace depengine::support {

template <class Signature, std::size_t InlineBytes>
class SmallFunction;

template <class... Args, std::size_t InlineBytes>
class SmallFunction<void(Args...), InlineBytes> {
 public:
  static constexpr std::size_t kInlineBytes = InlineBytes;

  SmallFunction() = default;

  // Implicit, so that a call taking a SmallFunction accepts a lambda.
  template <class F>
  requires(!std::is_same_v<std::decay_t<F>, SmallFunction>)
      SmallFunction(F&& fn) {  // NOLINT(google-explicit-constructor)
    emplace(std::forward<F>(fn));
  }

  SmallFunction(const SmallFunction&) = delete;
  SmallFunction& operator=(const SmallFunction&) = delete;
  SmallFunction(SmallFunction&& other) noexcept { take(other); }
  SmallFunction& operator=(SmallFunction&& other) noexcept {
    if (this != &other) {
      reset();
      take(other);
    }
    return *this;
  }
  ~SmallFunction() { reset(); }

  // Stores `fn`; the SmallFunction must be empty.
  template <class F>
  void emplace(F&& fn) {
    using Fn = std::decay_t<F>;
    static_assert(std::is_invocable_v<Fn&, Args...>,
                  "SmallFunction: the callable cannot be called with the signature's arguments");
    if constexpr (fits_inline<Fn>()) {
      ::new (static_cast<void*>(storage_)) Fn(std::forward<F>(fn));
      invoke_ = [](void* self, Args... args) { (*std::launder(static_cast<Fn*>(self)))(std::forward<Args>(args)...); };
      manage_ = [](void* self, void* target) noexcept {
        Fn* inline_fn = std::launder(static_cast<Fn*>(self));
        if (target != nullptr) ::new (target) Fn(std::move(*inline_fn));
        inline_fn->~Fn();
      };
    } else {
      ::new (static_cast<void*>(storage_)) Fn*(new Fn(std::forward<F>(fn)));
      invoke_ = [](void* self, Args... args) {
        (**std::launder(static_cast<Fn**>(self)))(std::forward<Args>(args)...);
      };
      manage_ = [](void* self, void* target) noexcept {
        Fn* heap = *std::launder(static_cast<Fn**>(self));
        if (target != nullptr) {
          ::new (target) Fn*(heap);
        } else {
          delete heap;
        }
      };
    }
  }

  [[nodiscard]] explicit operator bool() const noexcept { return invoke_ != nullptr; }

  // Calls the callable, which must be present. Propagates what it throws.
  void operator()(Args... args) { invoke_(storage_, std::forward<Args>(args)...); }

  // Destroys the stored callable and whatever it captured.
  void reset() noexcept {
    if (manage_ != nullptr) manage_(storage_, nullptr);
    invoke_ = nullptr;
    manage_ = nullptr;
  }

  // Whether a callable of type F is stored without allocation.
  template <class F>
  [[nodiscard]] static constexpr bool stored_inline() noexcept {
    return fits_inline<std::decay_t<F>>();
  }

 private:
  using Invoke = void (*)(void* self, Args... args);
  // Moves the callable at `self` into `target` and destroys it at `self`; with a null target, destroys it only.
  using Manage = void (*)(void* self, void* target) noexcept;

  template <class Fn>
  static constexpr bool fits_inline() noexcept {
    return sizeof(Fn) <= kInlineBytes && alignof(Fn) <= alignof(std::max_align_t) &&
           std::is_nothrow_move_constructible_v<Fn>;
  }

  void take(SmallFunction& other) noexcept {
    if (other.manage_ != nullptr) other.manage_(other.storage_, storage_);
    invoke_ = std::exchange(other.invoke_, nullptr);
    manage_ = std::exchange(other.manage_, nullptr);
  }

  alignas(std::max_align_t) std::byte storage_[kInlineBytes];
  Invoke invoke_ = nullptr;
  Manage manage_ = nullptr;
};

}  // namespace depengine::support
