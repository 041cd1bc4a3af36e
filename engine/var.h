// Var: the handle of one engine variable, and VarList: how a push names the variables it reads or mutates.
//
// A variable is a tag for whatever the user's ops share (an array, a PRNG state, a file): the engine orders ops by
// the variables they name and never looks at the data. A Var is a small copyable value (16 bytes); copies name the
// same variable. It stays usable until DeleteVariable is called on it; after that every use of any copy is an Error.
// A Var belongs to the engine that made it: using it with another engine is an Error, detected without touching the
// other engine's memory.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <type_traits>
#include <utility>

namespace depengine {

namespace detail {
struct VarState;
class EngineCore;
class GraphRunner;
class VarTable;
}  // namespace detail

class Var {
 public:
  Var() = default;  // a null handle; any use of it is an Error

  // Whether the handle is the null one (default-constructed).
  [[nodiscard]] bool is_null() const noexcept { return state_ == nullptr; }
  friend bool operator==(const Var&, const Var&) = default;

 private:
  friend class detail::EngineCore;
  friend class detail::GraphRunner;
  friend class detail::VarTable;
  Var(detail::VarState* state, std::uint32_t engine, std::uint32_t generation) noexcept
      : state_(state), engine_(engine), generation_(generation) {}

  detail::VarState* state_ = nullptr;  // owned by the engine; dereferenced only after engine_ matches
  std::uint32_t engine_ = 0;           // the id of the engine that made it (ids are never reused in a process)
  std::uint32_t generation_ = 0;       // the variable's generation when made; DeleteVariable moves it on
};

// A borrowed list of variables: `{a, b}`, a std::span, a std::vector, an array. It is read during the call that
// receives it and not kept, so a braced list's temporary array lives long enough.
class VarList {
 public:
  VarList() = default;
  // The variables of a braced list, a span, or a range convertible to one (a vector, an array).
  VarList(std::initializer_list<Var> vars) noexcept : vars_(vars.begin(), vars.size()) {}
  VarList(std::span<const Var> vars) noexcept : vars_(vars) {}  // NOLINT: implicit by design
  template <class Range>
  requires std::is_convertible_v<Range&&, std::span<const Var>> VarList(Range&& vars)
  noexcept : vars_(std::forward<Range>(vars)) {}  // NOLINT: vectors, arrays

  // The variables, as a read-only range.
  [[nodiscard]] std::size_t size() const noexcept { return vars_.size(); }
  [[nodiscard]] auto begin() const noexcept { return vars_.begin(); }
  [[nodiscard]] auto end() const noexcept { return vars_.end(); }

 private:
  std::span<const Var> vars_;
};

}  // namespace depengine
