#include <array>
#include <catch2/catch.hpp>
#include <memory>
#include <stdexcept>
#include <utility>

#include <depengine/support/small_function.h>

namespace {

using Fn = depengine::support::SmallFunction<void(int&), 32>;

// Counts its live instances, so the tests see every construction matched by a destruction.
struct Counted {
  static inline int live = 0;
  Counted() noexcept { ++live; }
  Counted(const Counted&) noexcept { ++live; }
  Counted(Counted&&) noexcept { ++live; }
  ~Counted() { --live; }
};

}  // namespace

TEST_CASE("SmallFunction stores small callables inline and large or throwing-move ones on the heap", "[support]") {
  auto small = [x = 1](int& out) { out += x; };
  auto large = [a = std::array<char, 64>{}](int& out) { out += static_cast<int>(a.size()); };
  struct ThrowingMove {
    ThrowingMove() = default;
    ThrowingMove(ThrowingMove&&) noexcept(false) {}
    void operator()(int& out) const { out += 3; }
  };
  STATIC_REQUIRE(Fn::stored_inline<decltype(small)>());
  STATIC_REQUIRE_FALSE(Fn::stored_inline<decltype(large)>());
  STATIC_REQUIRE_FALSE(Fn::stored_inline<ThrowingMove>());

  int out = 0;
  Fn a(small), b(large), c(ThrowingMove{});
  a(out);
  b(out);
  c(out);
  REQUIRE(out == 1 + 64 + 3);
}

TEST_CASE("SmallFunction moves and destroys what it holds exactly once, inline or on the heap", "[support]") {
  for (const bool on_heap : {false, true}) {
    DYNAMIC_SECTION((on_heap ? "heap" : "inline")) {
      Counted::live = 0;
      int calls = 0;
      {
        Fn first;
        if (on_heap) {
          first.emplace([c = Counted(), pad = std::array<char, 64>{}](int& n) { n += 1 + pad[0]; });
        } else {
          first.emplace([c = Counted()](int& n) { ++n; });
        }
        REQUIRE(Counted::live == 1);
        Fn second(std::move(first));
        REQUIRE_FALSE(first);  // NOLINT(bugprone-use-after-move): a moved-from SmallFunction is empty
        REQUIRE(second);
        REQUIRE(Counted::live == 1);
        second(calls);
        Fn third;
        third = std::move(second);
        third(calls);
        REQUIRE(Counted::live == 1);
        third.reset();
        REQUIRE_FALSE(third);
        REQUIRE(Counted::live == 0);
        third.emplace([c = Counted()](int& n) { n += 10; });
      }
      REQUIRE(calls == 2);
      REQUIRE(Counted::live == 0);
    }
  }
}

TEST_CASE("SmallFunction propagates what the callable throws", "[support]") {
  Fn fn([](int&) { throw std::runtime_error("boom"); });
  int out = 0;
  REQUIRE_THROWS_WITH(fn(out), "boom");
  REQUIRE(fn);  // still callable: throwing does not consume it
}
