// HostTask: the type-erased host function of one HostStreamBackend::launch(), stored in the stream's queue entry
// without allocation when small.
//
// A callable of at most kInlineBytes bytes, alignment at most alignof(std::max_align_t), and a noexcept move
// constructor lives inline; any other is moved to the heap (one allocation per launch). It is invoked once, as fn(),
// on the stream's thread; what it returns is ignored and what it throws becomes the stream's sticky error.
//
// Not thread-safe: a HostTask is owned by one queue entry, which one thread at a time holds. Move-only.
#pragma once

#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

namespace depengine {

class HostTask {
 public:
  static constexpr std::size_t kInlineBytes = 48;

  HostTask() = default;

  // Accepts any callable invocable as fn() (its result is discarded).
  template <class F>
  requires(!std::is_same_v<std::decay_t<F>, HostTask>)
      HostTask(F&& fn) {  // NOLINT(google-explicit-constructor): launch(stream, [..]{..}) converts implicitly
    using Fn = std::decay_t<F>;
    static_assert(std::is_invocable_v<Fn&>,
                  "HostStreamBackend::launch takes a callable with no arguments: [captures] { ... }");
    if constexpr (fits_inline<Fn>()) {
      ::new (static_cast<void*>(storage_)) Fn(std::forward<F>(fn));
      invoke_ = [](void* self) { (*std::launder(static_cast<Fn*>(self)))(); };
      manage_ = [](void* self, void* target) noexcept {
        Fn* inline_fn = std::launder(static_cast<Fn*>(self));
        if (target != nullptr) ::new (target) Fn(std::move(*inline_fn));
        inline_fn->~Fn();
      };
    } else {
      ::new (static_cast<void*>(storage_)) Fn*(new Fn(std::forward<F>(fn)));
      invoke_ = [](void* self) { (**std::launder(static_cast<Fn**>(self)))(); };
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

  HostTask(const HostTask&) = delete;
  HostTask& operator=(const HostTask&) = delete;
  HostTask(HostTask&& other) noexcept { take(other); }
  HostTask& operator=(HostTask&& other) noexcept {
    if (this != &other) {
      reset();
      take(other);
    }
    return *this;
  }
  ~HostTask() { reset(); }

  [[nodiscard]] explicit operator bool() const noexcept { return invoke_ != nullptr; }

  // Calls the function (which must be present). Propagates what it throws.
  void operator()() { invoke_(storage_); }

  // Destroys the stored callable and whatever it captured.
  void reset() noexcept {
    if (manage_ != nullptr) manage_(storage_, nullptr);
    invoke_ = nullptr;
    manage_ = nullptr;
  }

  // Whether a callable of type F is stored without allocation (for tests and the header's cost notes).
  template <class F>
  [[nodiscard]] static constexpr bool stored_inline() noexcept {
    return fits_inline<std::decay_t<F>>();
  }

 private:
  using Invoke = void (*)(void* self);
  // Moves the callable at `self` into `target` and destroys it at `self`; with a null target, destroys it only.
  using Manage = void (*)(void* self, void* target) noexcept;

  template <class Fn>
  static constexpr bool fits_inline() noexcept {
    return sizeof(Fn) <= kInlineBytes && alignof(Fn) <= alignof(std::max_align_t) &&
           std::is_nothrow_move_constructible_v<Fn>;
  }

  void take(HostTask& other) noexcept {
    if (other.manage_ != nullptr) other.manage_(other.storage_, storage_);
    invoke_ = std::exchange(other.invoke_, nullptr);
    manage_ = std::exchange(other.manage_, nullptr);
  }

  alignas(std::max_align_t) std::byte storage_[kInlineBytes];
  Invoke invoke_ = nullptr;
  Manage manage_ = nullptr;
};

}  // namespace depengine
