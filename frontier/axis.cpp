#include <array>
#include <atomic>
#include <cstdio>
#include <ostream>

#include <depengine/frontier/axis.h>

namespace depengine {
namespace {

// One ordinal counter per domain for the whole process. A process-wide counter (rather than one per allocator) is
// what lets the guarantee "never the same axis twice in a process" hold however many allocators callers build; it is
// a counter, not a service, so it carries none of a singleton's configuration or lifetime problems. Ordinals start
// at 1: ordinal 0 is reserved so that Axis{} is never allocated.
std::array<std::atomic<std::uint64_t>, kAxisDomainCount> g_next_ordinal = {1, 1, 1, 1};

}  // namespace

const char* domain_name(AxisDomain domain) noexcept {
  switch (domain) {
    case AxisDomain::kQueue:
      return "queue";
    case AxisDomain::kCollective:
      return "collective";
    case AxisDomain::kHost:
      return "host";
    case AxisDomain::kExternal:
      return "external";
  }
  return "domain?";
}

std::string to_string(Axis axis) {
  if (axis.is_null()) return "axis(null)";
  // snprintf into a buffer rather than string concatenation: shorter, and GCC 12 misreports `"m" + std::string` as
  // an overlapping memcpy (-Wrestrict) under -O2.
  char domain[16];  // the longest name, "collective", and "d255" fit
  if (static_cast<unsigned>(axis.domain()) < kAxisDomainCount) {
    std::snprintf(domain, sizeof domain, "%s", domain_name(axis.domain()));
  } else {
    std::snprintf(domain, sizeof domain, "d%u", static_cast<unsigned>(axis.domain()));
  }
  char out[64];
  const int n = std::snprintf(out, sizeof out, "m%u.%s.%llu", static_cast<unsigned>(axis.machine()), domain,
                              static_cast<unsigned long long>(axis.ordinal()));
  std::string text(out, static_cast<std::size_t>(n));
  if (axis.incarnation() != 0) text += ".i" + std::to_string(axis.incarnation());
  return text;
}

std::ostream& operator<<(std::ostream& out, Axis axis) { return out << to_string(axis); }

Axis AxisAllocator::allocate(AxisDomain domain) const {
  const auto index = static_cast<unsigned>(domain);
  if (index >= kAxisDomainCount) throw std::invalid_argument("AxisAllocator::allocate: unknown domain");
  // relaxed: only the atomicity of the increment matters (each caller gets a distinct ordinal); the axis value
  // publishes nothing else, so no ordering with other memory is needed.
  const std::uint64_t ordinal = g_next_ordinal[index].fetch_add(1, std::memory_order_relaxed);
  if (ordinal > Axis::kMaxOrdinal) {
    throw std::overflow_error(std::string("AxisAllocator::allocate: the 2^40 - 1 ordinals of domain '") +
                              domain_name(domain) + "' are spent in this process");
  }
  return Axis::make(incarnation_, machine_, domain, ordinal);
}

}  // namespace depengine
