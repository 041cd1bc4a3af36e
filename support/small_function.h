// support/: SmallFunction, a move-only type-erased callable that stores small callables without allocation.
//
// SmallFunction<void(Args...), InlineBytes> holds any callable invocable with Args... (its result is discarded). One
// of at most InlineBytes bytes, alignment at most alignof(std::max_align_t), and a noexcept move constructor lives
// inline; any other is moved to the heap (one allocation, which the users' headers document). It is the storage plus
// one pointer to a static table of two functions (call; move or destroy) for the stored type.
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
      ops_ = &kInlineOps<Fn>;
    } else {
      ::new (static_cast<void*>(storage_)) Fn*(new Fn(std::forward<F>(fn)));
      ops_ = &kHeapOps<Fn>;
    }
  }

  [[nodiscard]] explicit operator bool() const noexcept { return ops_ != nullptr; }

  // Calls the callable, which must be present. Propagates what it throws.
  void operator()(Args... args) { ops_->invoke(storage_, std::forward<Args>(args)...); }

  // Destroys the stored callable and whatever it captured.
  void reset() noexcept {
    if (ops_ != nullptr) ops_->manage(storage_, nullptr);
    ops_ = nullptr;
  }

  // Whether a callable of type F is stored without allocation.
  template <class F>
  [[nodiscard]] static constexpr bool stored_inline() noexcept {
    return fits_inline<std::decay_t<F>>();
  }

 private:
  // How a stored callable is called, and moved or destroyed: one table per callable type and storage, so that a
  // SmallFunction is its storage plus one pointer (64 bytes, one cache line, at the engine's 56 inline bytes).
  struct Ops {
    void (*invoke)(void* self, Args... args);
    // Moves the callable at `self` into `target` and destroys it at `self`; with a null target, destroys it only.
    void (*manage)(void* self, void* target) noexcept;
  };

  template <class Fn>
  static constexpr Ops kInlineOps{
      [](void* self, Args... args) { (*std::launder(static_cast<Fn*>(self)))(std::forward<Args>(args)...); },
      [](void* self, void* target) noexcept {
        Fn* inline_fn = std::launder(static_cast<Fn*>(self));
        if (target != nullptr) ::new (target) Fn(std::move(*inline_fn));
        inline_fn->~Fn();
      }};

  template <class Fn>
  static constexpr Ops kHeapOps{
      [](void* self, Args... args) { (**std::launder(static_cast<Fn**>(self)))(std::forward<Args>(args)...); },
      [](void* self, void* target) noexcept {
        Fn* heap = *std::launder(static_cast<Fn**>(self));
        if (target != nullptr) {
          ::new (target) Fn*(heap);
        } else {
          delete heap;
        }
      }};

  template <class Fn>
  static constexpr bool fits_inline() noexcept {
    return sizeof(Fn) <= kInlineBytes && alignof(Fn) <= alignof(std::max_align_t) &&
           std::is_nothrow_move_constructible_v<Fn>;
  }

  void take(SmallFunction& other) noexcept {
    if (other.ops_ != nullptr) other.ops_->manage(other.storage_, storage_);
    ops_ = std::exchange(other.ops_, nullptr);
  }

  alignas(std::max_align_t) std::byte storage_[kInlineBytes];
  const Ops* ops_ = nullptr;
};

}  // namespace depengine::support
