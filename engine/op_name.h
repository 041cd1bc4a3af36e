// OpName: an op's name (PushOptions::name), owned by the options and copied into the op, so that a name built at run
// time is safe:
//
//   engine.Push(fn, reads, mutates, {.name = "backward " + std::to_string(layer)});   // the temporary may die at once
//
// A name of at most kInlineChars characters is stored inline: pushing it allocates nothing. A longer one is copied to
// the heap (one allocation when the options are made, one when the op copies them).
//
// Converts implicitly from a string literal, a std::string_view and a std::string, and to a std::string_view, which
// stays valid while the OpName does (an op's name: while its function runs; RunContext::name).
// Thread safety: a value; copies are independent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

namespace depengine {

class OpName {
 public:
  // The longest name stored without allocating.
  static constexpr std::size_t kInlineChars = 40;

  OpName() = default;
  // A copy of `name` (a null pointer is the empty name): on the heap only past kInlineChars.
  OpName(const char* name)
      : OpName(name != nullptr ? std::string_view(name) : std::string_view()) {}  // NOLINT: implicit by design
  OpName(const std::string& name) : OpName(std::string_view(name)) {}             // NOLINT
  OpName(std::string_view name) { assign(name); }                                 // NOLINT
  // Copies and moves copy the characters (or take the heap copy).
  OpName(const OpName& other) { assign(other.view()); }
  OpName& operator=(const OpName& other) {
    if (this != &other) assign(other.view());
    return *this;
  }
  OpName(OpName&& other) noexcept { take(other); }
  OpName& operator=(OpName&& other) noexcept {
    if (this != &other) take(other);
    return *this;
  }
  ~OpName() = default;

  // The name, its emptiness and its length in characters.
  [[nodiscard]] std::string_view view() const noexcept { return {heap_ != nullptr ? heap_.get() : inline_, size_}; }
  operator std::string_view() const noexcept { return view(); }  // NOLINT: implicit by design
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  void assign(std::string_view name) {
    std::unique_ptr<char[]> heap;
    if (name.size() > kInlineChars) {
      heap = std::make_unique<char[]>(name.size());
      std::memcpy(heap.get(), name.data(), name.size());
    } else if (!name.empty()) {
      std::memcpy(inline_, name.data(), name.size());
    }
    heap_ = std::move(heap);
    size_ = name.size();
  }

  // Leaves `other` empty.
  void take(OpName& other) noexcept {
    heap_ = std::move(other.heap_);
    if (heap_ == nullptr && other.size_ != 0) std::memcpy(inline_, other.inline_, other.size_);
    size_ = std::exchange(other.size_, 0);
  }

  char inline_[kInlineChars];
  std::size_t size_ = 0;
  std::unique_ptr<char[]> heap_;  // set when size_ > kInlineChars
};

}  // namespace depengine
