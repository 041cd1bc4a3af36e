// Typed executor handles: how a user names one of an engine's executors.
//
// EngineOptions::add (or emplace) takes an executor and returns an ExecutorId<E> of its concrete type E. The id reaches
// the executor again as an E (Engine::executor(id) returns E&, no cast) and names it wherever an executor is placed:
// PushOptions::context.executor, Buffers, Communicator. Those places hold an ExecutorRef, which is built from an id, or
// from a plain index into EngineOptions::executors as before (index 0, the first executor, is the default).
//
//   depengine::EngineOptions options;
//   auto pool = options.emplace<depengine::ThreadPoolExecutor>();
//   auto streams = options.add(std::make_unique<depengine::StreamExecutor>(std::make_unique<HostStreamBackend>()));
//   depengine::Engine engine(std::move(options));
//   depengine::StreamExecutor& s = engine.executor(streams);   // typed: no index, no cast
//   engine.Push(fn, {x}, {y}, {.context = {.executor = streams, .device = 0}});
//
// Type safety. ExecutorId<E> converts to ExecutorId<B> only when E derives from B (an id of a pool is not an id of a
// stream executor: that does not compile). The engine still checks at Engine::executor(id) that the executor is an E,
// since DEPENGINE_ENGINE_TYPE=NaiveEngine replaces CPU executors by inline ones (engine.h) and the options' vector is
// the user's to edit before the engine takes it: a mismatch is an Error, never a wrong reference.
//
// Provenance. An id carries the serial of the EngineOptions that issued it (process-wide, from 1; 0 for a plain
// index). An engine built from those options accepts it; any other engine refuses it with an Error (at a push, at
// Engine::executor, in Buffers and Communicator), since its index would name an unrelated executor there. Moving an
// EngineOptions moves its serial; the moved-from options get a fresh one at their next add.
//
// Thread safety: ids and refs are values: copy them anywhere, use them from any thread. Cost: 8 bytes, no allocation;
// issuing one (add) takes one relaxed atomic increment per EngineOptions. Lifetime: an id names an executor as long as
// the engine built from its options lives; after that it names nothing.
#pragma once

#include <concepts>
#include <cstdint>
#include <limits>

namespace depengine {

class Executor;
struct EngineOptions;
template <class E>
class ExecutorId;

// D is a strict subclass of E: an ExecutorId<D> converts to an ExecutorId<E>.
template <class D, class E>
concept DerivedExecutorOf = !std::same_as<D, E> && std::derived_from<D, E>;

// An executor of an engine, named by its index in EngineOptions::executors and, when it came from an ExecutorId, by
// the EngineOptions that issued it. What an executor's place holds (Context::executor). Implicit from an index and to
// an index, so code written for plain indices compiles unchanged.
class ExecutorRef {
 public:
  constexpr ExecutorRef() noexcept = default;
  // NOLINTNEXTLINE(google-explicit-constructor): an index is a ref, as Context::executor was an index.
  constexpr ExecutorRef(std::uint32_t index) noexcept : index_(index) {}
  template <class E>
  // NOLINTNEXTLINE(google-explicit-constructor): an id names where it is placed, as an index does.
  constexpr ExecutorRef(ExecutorId<E> id) noexcept : index_(id.index()), options_(id.options()) {}

  // NOLINTNEXTLINE(google-explicit-constructor): reads as the index it was, for code that indexes with it.
  constexpr operator std::uint32_t() const noexcept { return index_; }
  // The executor's index in EngineOptions::executors.
  [[nodiscard]] constexpr std::uint32_t index() const noexcept { return index_; }
  // The serial of the EngineOptions that issued the id it came from; 0 for a plain index (which no engine checks).
  [[nodiscard]] constexpr std::uint32_t options() const noexcept { return options_; }

 private:
  std::uint32_t index_ = 0;
  std::uint32_t options_ = 0;
};

// One executor of an engine, of type E (or a type derived from E). Issued by EngineOptions::add/emplace; a
// default-constructed id names nothing (every engine refuses it).
template <class E>
class ExecutorId {
  static_assert(std::derived_from<E, Executor>, "ExecutorId<E>: E must be depengine::Executor or derive from it");

 public:
  constexpr ExecutorId() noexcept = default;
  // An id of a derived executor is an id of its base, as a Derived& is a Base&; never the other way.
  // NOLINTNEXTLINE(google-explicit-constructor): the handle counterpart of Derived& -> Base&.
  template <DerivedExecutorOf<E> D>
  constexpr ExecutorId(ExecutorId<D> other) noexcept : index_(other.index()), options_(other.options()) {}

  // The executor's index in EngineOptions::executors, and the serial of the options that issued the id.
  [[nodiscard]] constexpr std::uint32_t index() const noexcept { return index_; }
  [[nodiscard]] constexpr std::uint32_t options() const noexcept { return options_; }
  friend constexpr bool operator==(ExecutorId, ExecutorId) noexcept = default;

 private:
  friend struct EngineOptions;
  constexpr ExecutorId(std::uint32_t index, std::uint32_t options) noexcept : index_(index), options_(options) {}

  std::uint32_t index_ = std::numeric_limits<std::uint32_t>::max();
  std::uint32_t options_ = 0;
};

namespace detail {

// The serial of an EngineOptions (see Provenance above): 0 until its first add, then process-unique. Moving it moves
// the serial and leaves 0 behind, so ids of the moved-to options are never accepted by an engine of the moved-from.
class OptionsSerial {
 public:
  OptionsSerial() = default;
  OptionsSerial(OptionsSerial&& other) noexcept : value_(other.value_) { other.value_ = 0; }
  OptionsSerial& operator=(OptionsSerial&& other) noexcept {
    if (this != &other) {
      value_ = other.value_;
      other.value_ = 0;
    }
    return *this;
  }
  OptionsSerial(const OptionsSerial&) = delete;
  OptionsSerial& operator=(const OptionsSerial&) = delete;
  ~OptionsSerial() = default;

  // The serial, taking a fresh one first if it has none.
  [[nodiscard]] std::uint32_t get();
  [[nodiscard]] std::uint32_t peek() const noexcept { return value_; }

 private:
  std::uint32_t value_ = 0;
};

}  // namespace detail
}  // namespace depengine
