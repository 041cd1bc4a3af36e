// Tests of Axis and AxisAllocator (frontier/axis.h): the bit layout and its accessors, the errors of make(),
// the total order, the text form used in traces and error messages, and process-wide uniqueness of allocated axes.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <latch>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <depengine/frontier/axis.h>

namespace depengine {
namespace {

constexpr AxisDomain kDomains[] = {AxisDomain::kQueue, AxisDomain::kCollective, AxisDomain::kHost,
                                   AxisDomain::kExternal};

// The fields in the order the total order must respect: incarnation, then machine, then domain, then ordinal.
std::tuple<unsigned, unsigned, unsigned, std::uint64_t> fields(Axis axis) {
  return {axis.incarnation(), axis.machine(), static_cast<unsigned>(axis.domain()), axis.ordinal()};
}

// make() is constexpr, so axes agreed by topology can be constants; a broken accessor fails the build here.
static_assert(Axis::make(2, 3, AxisDomain::kHost, 5).incarnation() == 2);
static_assert(Axis::make(2, 3, AxisDomain::kHost, 5).machine() == 3);
static_assert(Axis::make(2, 3, AxisDomain::kHost, 5).domain() == AxisDomain::kHost);
static_assert(Axis::make(2, 3, AxisDomain::kHost, 5).ordinal() == 5);
static_assert(Axis{}.is_null() && Axis{}.bits() == 0);

TEST_CASE("Axis::make places each field in its documented bits and the accessors read them back", "[axis]") {
  const std::uint8_t incarnations[] = {0, 1, 0x5a, 255};
  const std::uint8_t machines[] = {0, 1, 0xa5, 255};
  const std::uint64_t ordinals[] = {0, 1, 42, 0x12345678ab, Axis::kMaxOrdinal};
  for (const std::uint8_t incarnation : incarnations) {
    for (const std::uint8_t machine : machines) {
      for (const AxisDomain domain : kDomains) {
        for (const std::uint64_t ordinal : ordinals) {
          const Axis axis = Axis::make(incarnation, machine, domain, ordinal);
          CAPTURE(incarnation, machine, static_cast<unsigned>(domain), ordinal);
          // | incarnation (8) | machine (8) | domain (8) | ordinal (40) |: other machines decode these bits.
          const std::uint64_t expected = std::uint64_t{incarnation} << 56 | std::uint64_t{machine} << 48 |
                                         std::uint64_t{static_cast<unsigned>(domain)} << 40 | ordinal;
          REQUIRE(axis.bits() == expected);
          REQUIRE(axis.incarnation() == incarnation);
          REQUIRE(axis.machine() == machine);
          REQUIRE(axis.domain() == domain);
          REQUIRE(axis.ordinal() == ordinal);
          REQUIRE(Axis::from_bits(axis.bits()) == axis);
        }
      }
    }
  }
}

TEST_CASE("Axis::make rejects an ordinal wider than 40 bits and an unknown domain with std::invalid_argument",
          "[axis]") {
  REQUIRE(Axis::make(0, 0, AxisDomain::kQueue, Axis::kMaxOrdinal).ordinal() == Axis::kMaxOrdinal);
  REQUIRE_THROWS_AS(Axis::make(0, 0, AxisDomain::kQueue, Axis::kMaxOrdinal + 1), std::invalid_argument);
  REQUIRE_THROWS_AS(Axis::make(0, 0, AxisDomain::kQueue, ~std::uint64_t{0}), std::invalid_argument);
  REQUIRE_THROWS_AS(Axis::make(0, 0, static_cast<AxisDomain>(kAxisDomainCount), 1), std::invalid_argument);
  REQUIRE_THROWS_AS(Axis::make(0, 0, static_cast<AxisDomain>(255), 1), std::invalid_argument);
}

TEST_CASE("The null axis is the all-zero value; a nonzero field in any position makes an axis non-null", "[axis]") {
  REQUIRE(Axis{}.is_null());
  REQUIRE(Axis::from_bits(0) == Axis{});
  // Ordinal 0 is reserved for exactly this reason: with it, an axis whose other fields are 0 would be the null axis.
  REQUIRE(Axis::make(0, 0, AxisDomain::kQueue, 0).is_null());
  REQUIRE_FALSE(Axis::make(0, 0, AxisDomain::kQueue, 1).is_null());
  REQUIRE_FALSE(Axis::make(0, 0, AxisDomain::kCollective, 0).is_null());
  REQUIRE_FALSE(Axis::make(0, 1, AxisDomain::kQueue, 0).is_null());
  REQUIRE_FALSE(Axis::make(1, 0, AxisDomain::kQueue, 0).is_null());
}

TEST_CASE("Axes are totally ordered by incarnation, then machine, then domain, then ordinal", "[axis]") {
  // Each axis is above the previous one only through a more significant field whose less significant fields are
  // at their minimum, while the previous one has them at their maximum.
  const std::vector<Axis> ascending = {
      Axis::make(0, 0, AxisDomain::kQueue, 1),    Axis::make(0, 0, AxisDomain::kQueue, Axis::kMaxOrdinal),
      Axis::make(0, 0, AxisDomain::kExternal, 0), Axis::make(0, 0, AxisDomain::kExternal, Axis::kMaxOrdinal),
      Axis::make(0, 1, AxisDomain::kQueue, 0),    Axis::make(0, 255, AxisDomain::kExternal, Axis::kMaxOrdinal),
      Axis::make(1, 0, AxisDomain::kQueue, 0),    Axis::make(255, 255, AxisDomain::kExternal, Axis::kMaxOrdinal),
  };
  for (std::size_t i = 0; i + 1 < ascending.size(); ++i) {
    CAPTURE(ascending[i], ascending[i + 1]);
    REQUIRE(ascending[i] < ascending[i + 1]);
    REQUIRE(ascending[i + 1] > ascending[i]);
    REQUIRE(ascending[i] != ascending[i + 1]);
  }

  // A fixed pseudo-random sample (few distinct values per field, so ties in the upper fields are common): the order
  // is a strict weak order with equality exactly at equal bits, and sorting by it is sorting by the field tuple.
  std::mt19937_64 rng(20240611);
  std::uniform_int_distribution<unsigned> small(0, 2);
  std::vector<Axis> axes;
  for (int i = 0; i < 500; ++i) {
    axes.push_back(Axis::make(static_cast<std::uint8_t>(small(rng)), static_cast<std::uint8_t>(small(rng)),
                              kDomains[small(rng)], small(rng)));
  }
  for (const Axis a : axes) {
    for (const Axis b : axes) {
      const int relations = int{a < b} + int{a == b} + int{a > b};
      REQUIRE(relations == 1);
      REQUIRE((a == b) == (a.bits() == b.bits()));
      REQUIRE((a < b) == (fields(a) < fields(b)));
    }
  }
  std::vector<Axis> by_axis = axes;
  std::sort(by_axis.begin(), by_axis.end());
  std::vector<Axis> by_fields = axes;
  std::sort(by_fields.begin(), by_fields.end(), [](Axis a, Axis b) { return fields(a) < fields(b); });
  REQUIRE(by_axis == by_fields);
}

TEST_CASE("to_string writes m<machine>.<domain>.<ordinal>, .i<incarnation> when nonzero, and axis(null)", "[axis]") {
  REQUIRE(to_string(Axis::make(0, 3, AxisDomain::kQueue, 42)) == "m3.queue.42");
  REQUIRE(to_string(Axis::make(2, 0, AxisDomain::kCollective, 7)) == "m0.collective.7.i2");
  REQUIRE(to_string(Axis::make(0, 1, AxisDomain::kHost, 9)) == "m1.host.9");
  REQUIRE(to_string(Axis::make(255, 255, AxisDomain::kExternal, Axis::kMaxOrdinal)) ==
          "m255.external.1099511627775.i255");
  REQUIRE(to_string(Axis{}) == "axis(null)");
  // An incarnation alone makes the axis non-null, so it prints as an axis, not as null.
  REQUIRE(to_string(Axis::make(1, 0, AxisDomain::kQueue, 0)) == "m0.queue.0.i1");

  // An axis received from elsewhere may carry a domain this build does not know: it still prints, by number.
  const Axis unknown = Axis::from_bits(std::uint64_t{9} << 40 | 5);
  REQUIRE(to_string(unknown) == "m0.d9.5");
  REQUIRE(to_string(Axis::from_bits(std::uint64_t{1} << 56 | std::uint64_t{255} << 40 | 5)) == "m0.d255.5.i1");
  REQUIRE(std::string(domain_name(unknown.domain())) == "domain?");
  REQUIRE(std::string(domain_name(AxisDomain::kCollective)) == "collective");

  std::ostringstream out;
  out << Axis::make(0, 3, AxisDomain::kQueue, 42) << ' ' << Axis{};
  REQUIRE(out.str() == "m3.queue.42 axis(null)");
}

TEST_CASE("AxisAllocator stamps its machine and incarnation and the requested domain, with fresh nonzero ordinals",
          "[axis]") {
  const AxisAllocator allocator(3, 2);
  REQUIRE(allocator.machine() == 3);
  REQUIRE(allocator.incarnation() == 2);
  for (const AxisDomain domain : kDomains) {
    const Axis first = allocator.allocate(domain);
    const Axis second = allocator.allocate(domain);
    CAPTURE(first, second);
    REQUIRE(first.machine() == 3);
    REQUIRE(first.incarnation() == 2);
    REQUIRE(first.domain() == domain);
    REQUIRE(first.ordinal() != 0);
    // One thread's successive allocations come from the same counter, so they ascend.
    REQUIRE(second.ordinal() > first.ordinal());
  }
  REQUIRE_THROWS_AS(allocator.allocate(static_cast<AxisDomain>(kAxisDomainCount)), std::invalid_argument);
}

TEST_CASE("AxisAllocator never returns the same axis twice, from many threads and many allocators at once", "[axis]") {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 20'000;
  std::vector<std::vector<Axis>> allocated(kThreads);
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Every thread builds its own allocator with the same machine and incarnation: the guarantee is per process,
      // not per allocator object, so these must not collide either.
      const AxisAllocator allocator(1, 0);
      std::vector<Axis>& mine = allocated[static_cast<std::size_t>(t)];
      mine.reserve(kPerThread);
      start.arrive_and_wait();  // all threads allocate at the same time, so the counters are contended
      for (int i = 0; i < kPerThread; ++i) mine.push_back(allocator.allocate(kDomains[i % 4]));
    });
  }
  for (std::thread& thread : threads) thread.join();

  std::set<Axis> distinct;
  for (const std::vector<Axis>& mine : allocated) {
    REQUIRE(mine.size() == static_cast<std::size_t>(kPerThread));
    for (const Axis axis : mine) {
      if (axis.ordinal() == 0 || axis.machine() != 1) FAIL("allocated " << axis);
      distinct.insert(axis);
    }
  }
  REQUIRE(distinct.size() == static_cast<std::size_t>(kThreads) * kPerThread);
}

}  // namespace
}  // namespace depengine
