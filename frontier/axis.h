// An axis names one timeline participant: a FIFO stream or device queue, a collective channel, a host thread or
// pool, or a source outside the engine. Every (axis, epoch) pair names one point on that participant's timeline, and
// frontiers (frontier.h) are sorted sets of such pairs. Axes exist so that a point on a timeline can be named by value,
// compared, shipped to another machine and stored in a death frontier long after the stream that owned it is gone.
//
// Layout (64 bits, most significant first; the same split as IREE's, so sorting by bits groups by incarnation, then
// machine, then domain):
//
//   | incarnation (8) | machine (8) | domain (8) | ordinal (40) |
//
//   - incarnation: bumped when a process or peer restarts, so that a restarted peer's axes cannot alias the axes of
//     its previous life that may still sit in other machines' frontiers;
//   - machine: the machine index in a cluster (0 on a single machine), for routing and locality decisions;
//   - domain: what kind of participant (AxisDomain);
//   - ordinal: unique within (incarnation, machine, domain). Ordinal 0 is reserved: AxisAllocator never returns it,
//     so the all-zero value Axis{} is never an allocated axis (it serves as "no axis").
//
// Uniqueness: AxisAllocator never returns the same axis twice in a process (its ordinals come from one process-wide
// counter per domain, so even two allocators built with equal machine and incarnation cannot collide). Axes are never
// reused, which is what makes an (axis, epoch) pair an ABA-free name: a recycled stream gets a new axis.
//
// Thread safety: Axis is an immutable value. AxisAllocator::allocate may be called from any number of threads at once.
// Ownership: none; axes are plain values. Failure: make() throws std::invalid_argument for an out-of-range ordinal or
// an unknown domain; allocate() throws std::overflow_error once a domain's 2^40 - 1 ordinals are spent.
// Cost: accessors and comparisons are single integer operations; allocate() is one relaxed fetch_add on a shared
// counter; to_string allocates (for traces and error messages only).
#pragma once

#include <compare>
#include <cstdint>
#include <iosfwd>
#include <stdexcept>
#include <string>

namespace depengine {

// What kind of timeline participant an axis names.
enum class AxisDomain : std::uint8_t {
  kQueue = 0,       // a FIFO stream or device queue (CUDA/HIP stream, host stream)
  kCollective = 1,  // a collective channel: one axis shared by every participant of a collective
  kHost = 2,        // a host thread or a thread pool
  kExternal = 3,    // a source outside the engine (an imported event, another process)
};
// The number of AxisDomain values.
inline constexpr unsigned kAxisDomainCount = 4;

// "queue", "collective", "host", "external", or "domain?" for a value outside the enumeration.
[[nodiscard]] const char* domain_name(AxisDomain domain) noexcept;

// An axis: a totally ordered source of epochs (a stream, a channel, a thread), named by 64 bits (see the
// file comment).
class Axis {
 public:
  // Bits of the ordinal, and the largest ordinal.
  static constexpr unsigned kOrdinalBits = 40;
  static constexpr std::uint64_t kMaxOrdinal = (std::uint64_t{1} << kOrdinalBits) - 1;

  // Default-initialised like an integer (indeterminate); value-initialise (Axis{}) for the null axis. This keeps
  // frontier storage free of per-construction zeroing, as std::chrono::duration does for its count.
  Axis() = default;

  // The axis with exactly these bits (e.g. one received from another machine). Never throws.
  [[nodiscard]] static constexpr Axis from_bits(std::uint64_t bits) noexcept {
    Axis axis;
    axis.bits_ = bits;
    return axis;
  }

  // The axis (incarnation, machine, domain, ordinal). Use it for axes agreed by topology (a collective channel that
  // every machine names alike); use AxisAllocator for fresh local axes. Throws std::invalid_argument if `ordinal`
  // exceeds kMaxOrdinal or `domain` is not an AxisDomain enumerator.
  [[nodiscard]] static constexpr Axis make(std::uint8_t incarnation, std::uint8_t machine, AxisDomain domain,
                                           std::uint64_t ordinal) {
    if (ordinal > kMaxOrdinal) throw std::invalid_argument("Axis::make: ordinal does not fit in 40 bits");
    if (static_cast<unsigned>(domain) >= kAxisDomainCount) throw std::invalid_argument("Axis::make: unknown domain");
    return from_bits(std::uint64_t{incarnation} << 56 | std::uint64_t{machine} << 48 |
                     std::uint64_t{static_cast<std::uint8_t>(domain)} << 40 | ordinal);
  }

  // The whole 64 bits, and the incarnation and machine fields of them.
  [[nodiscard]] constexpr std::uint64_t bits() const noexcept { return bits_; }
  [[nodiscard]] constexpr std::uint8_t incarnation() const noexcept { return static_cast<std::uint8_t>(bits_ >> 56); }
  [[nodiscard]] constexpr std::uint8_t machine() const noexcept { return static_cast<std::uint8_t>(bits_ >> 48); }
  // May be outside the enumeration for an axis built by from_bits.
  [[nodiscard]] constexpr AxisDomain domain() const noexcept { return static_cast<AxisDomain>(bits_ >> 40); }
  [[nodiscard]] constexpr std::uint64_t ordinal() const noexcept { return bits_ & kMaxOrdinal; }
  [[nodiscard]] constexpr bool is_null() const noexcept { return bits_ == 0; }

  // The total order of the bits: by incarnation, machine, domain, then ordinal. Frontiers sort their entries by it.
  friend constexpr bool operator==(Axis a, Axis b) noexcept { return a.bits_ == b.bits_; }
  friend constexpr std::strong_ordering operator<=>(Axis a, Axis b) noexcept { return a.bits_ <=> b.bits_; }

 private:
  std::uint64_t bits_;
};

// "m<machine>.<domain>.<ordinal>", with ".i<incarnation>" appended when the incarnation is not 0, e.g. "m3.queue.42"
// or "m0.collective.7.i2"; "axis(null)" for Axis{}. Allocates.
[[nodiscard]] std::string to_string(Axis axis);
std::ostream& operator<<(std::ostream& out, Axis axis);

// Hands out fresh axes for one (machine, incarnation).
//
// Thread safety: allocate() may run concurrently on any threads and on any number of allocators.
// Uniqueness: process-wide (see the file comment); the allocator object holds only its machine and incarnation, so it
// is cheap to copy and needs no lifetime management.
class AxisAllocator {
 public:
  // An allocator of axes for `machine` (a process's rank) and `incarnation`.
  explicit AxisAllocator(std::uint8_t machine = 0, std::uint8_t incarnation = 0) noexcept
      : machine_(machine), incarnation_(incarnation) {}

  // A fresh axis of `domain`, never returned before in this process. Throws std::invalid_argument for an unknown
  // domain and std::overflow_error once the domain's ordinals are spent (2^40 - 1 axes per domain per process).
  [[nodiscard]] Axis allocate(AxisDomain domain) const;

  // The machine and incarnation of the axes it hands out.
  [[nodiscard]] std::uint8_t machine() const noexcept { return machine_; }
  [[nodiscard]] std::uint8_t incarnation() const noexcept { return incarnation_; }

 private:
  std::uint8_t machine_;
  std::uint8_t incarnation_;
};

}  // namespace depengine
