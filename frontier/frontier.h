// Frontiers: sparse vector clocks over axes (axis.h), in two roles that the type system keeps apart.
//
// A frontier is a set of (axis, epoch) entries, at most one per axis, sorted by axis: "everything on axis A up to
// epoch 7, and on axis B up to epoch 3". It is how a signal carries its causal past to whoever waits on it, how a
// stream decides that a cross-stream wait is already implied by what it knows (dominance), and how a freed buffer
// records what must finish before it may be reused (a death frontier). See docs/architecture.md §4 and IREE's note
// "Causal Dependency Tracking with Vector Clock Frontiers".
//
// Two roles, because a full frontier must lose information in opposite directions depending on what it means:
//
//   KnowledgeFrontier<N>    what a stream, thread or signal KNOWS happened before it. On overflow it evicts its
//                           smallest-epoch entry and is marked tainted: it now knows less than what happened, which
//                           is always safe (a later dominance test can only fail more often, never succeed wrongly).
//   RequirementFrontier<N>  what MUST happen before something may proceed (a wait frontier, a death frontier). It
//                           may never drop a requirement silently: on overflow it is marked tainted and
//                           dominates(x, r) is false for every x from then on, so the consumer takes its conservative
//                           path (explicit per-dependency waits; a buffer not reused until its users complete).
//
// The roles mix only through named conversions: RequirementFrontier::from_knowledge (require everything a knowledge
// frontier knows, e.g. a death frontier from the freeing stream's knowledge; taint carries over) and
// KnowledgeFrontier::merge_satisfied (learn a requirement once it has been waited for). dominates(requirement,
// knowledge) and compare across roles do not compile.
//
// Operations (both roles unless said): merge (component-wise maximum: associative, commutative, idempotent while
// nothing overflows), insert_or_raise, dominates, compare (equal / before / after / concurrent, always consistent
// with dominates in both directions), undominated(reference, target) (the requirement entries still to wait for).
//
// Thread safety: a frontier is a value. Concurrent const calls on one frontier are safe; any mutation needs exclusive
// access (as for std::array). Ownership: entries are stored inline; no heap, ever. Failure: no operation throws
// except validate() (a broken invariant) and to_string (allocation); overflow is not an error but taint.
// Cost: every operation is one pass, O(size of both operands), no allocation; copies move only the live entries.
// Merging with overflow or inserting into a full frontier also selects the entries to keep (O(n) expected).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <span>
#include <string>

#include <depengine/frontier/axis.h>
#include <depengine/frontier/detail/frontier_kernels.h>
#include <depengine/frontier/detail/frontier_storage.h>
#include <depengine/frontier/frontier_entry.h>

// GCC 12 reports -Wmaybe-uninitialized when a frontier whose entries it cannot see written (a fresh or empty one) is
// passed to a kernel that is not inlined: it assumes a pointer-to-const argument reads its whole pointee. The kernels
// read only the first count entries, which are always written, and the entries past the count are uninitialised on
// purpose (detail/frontier_storage.h), so the warning is a false positive at every kernel call. Silenced for the
// frontier headers only; clang has no such warning.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace depengine {

template <std::size_t N>
class RequirementFrontier;

// What a participant knows happened before it. Overflow evicts the smallest epoch and taints (knows less: safe).
template <std::size_t N>
class KnowledgeFrontier : public detail::FrontierStorage<N> {
  using Base = detail::FrontierStorage<N>;

 public:
  KnowledgeFrontier() noexcept = default;

  // The frontier holding `entries`, in any order; repeated axes keep their largest epoch and zero epochs are skipped
  // (an epoch of 0 says nothing). More distinct axes than N overflow as insert_or_raise does.
  KnowledgeFrontier(std::initializer_list<FrontierEntry> entries) noexcept { assign(entries); }
  explicit KnowledgeFrontier(std::span<const FrontierEntry> entries) noexcept { assign(entries); }

  // The same knowledge at another capacity (evicting and tainting if it does not fit).
  template <std::size_t M>
  explicit KnowledgeFrontier(const KnowledgeFrontier<M>& other) noexcept {
    merge(other);
  }

  // Not from a requirement: a requirement becomes knowledge only once waited for (merge_satisfied). Deleted rather
  // than left out: a frontier is a contiguous range of entries, so the span constructor would otherwise accept one
  // and drop its taint.
  template <std::size_t M>
  explicit KnowledgeFrontier(const RequirementFrontier<M>&) = delete;

  // Records that `axis` reached `epoch` (a no-op when epoch is 0 or not above the recorded one). If the frontier is
  // full and the axis is new, the entry with the smallest epoch (possibly the new one) is evicted and the frontier is
  // tainted. O(size).
  void insert_or_raise(Axis axis, std::uint64_t epoch) noexcept {
    if (epoch == 0) return;
    if (!this->insert_or_raise_entry(axis, epoch)) this->tainted_ = true;
  }

  // Learns everything `other` knows: the component-wise maximum. Overflow evicts the smallest epochs and taints;
  // taint is inherited from `other` (if it knew less than happened, so does the result). O(size + other.size()).
  template <std::size_t M>
  void merge(const KnowledgeFrontier<M>& other) noexcept {
    this->tainted_ |= other.tainted();
    if (!this->template merge_entries<M>(other.entries().data(), static_cast<detail::EntryCount>(other.size()))) {
      this->tainted_ = true;
    }
  }

  // Learns a requirement that has been satisfied (after waiting for it): its entries are now facts. A tainted
  // requirement names only part of what was waited for, so the result is tainted too (it knows less than it could).
  template <std::size_t M>
  void merge_satisfied(const RequirementFrontier<M>& satisfied) noexcept {
    this->tainted_ |= satisfied.tainted();
    if (!this->template merge_entries<M>(satisfied.entries().data(),
                                         static_cast<detail::EntryCount>(satisfied.size()))) {
      this->tainted_ = true;
    }
  }

  // Marks the frontier as knowing less than happened (e.g. an import whose exact history is gone). Always safe.
  void mark_tainted() noexcept { this->tainted_ = true; }

  // Forgets every entry and the taint.
  void clear() noexcept {
    this->count_ = 0;
    this->tainted_ = false;
  }

 private:
  template <class Range>
  void assign(const Range& entries) noexcept {
    for (const FrontierEntry& e : entries) insert_or_raise(e.axis, e.epoch);
  }
};

// What must have happened before something may proceed. Overflow taints, and a tainted requirement is never dominated.
template <std::size_t N>
class RequirementFrontier : public detail::FrontierStorage<N> {
  using Base = detail::FrontierStorage<N>;

 public:
  RequirementFrontier() noexcept = default;

  // The requirement holding `entries`, in any order; repeated axes keep their largest epoch and zero epochs are
  // skipped. More distinct axes than N taint it (see insert_or_raise).
  RequirementFrontier(std::initializer_list<FrontierEntry> entries) noexcept { assign(entries); }
  explicit RequirementFrontier(std::span<const FrontierEntry> entries) noexcept { assign(entries); }

  // The same requirement at another capacity (tainted if it does not fit).
  template <std::size_t M>
  explicit RequirementFrontier(const RequirementFrontier<M>& other) noexcept {
    merge(other);
  }

  // Not from knowledge: that is from_knowledge, which carries the taint over. Deleted rather than left out: the span
  // constructor would otherwise accept a knowledge frontier (a contiguous range of entries) and drop its taint, so a
  // death frontier recorded from a stream that forgot part of its past would be dominated too early.
  template <std::size_t M>
  explicit RequirementFrontier(const KnowledgeFrontier<M>&) = delete;

  // Requires everything `known` knows (e.g. a death frontier recorded from the freeing stream's knowledge). A tainted
  // knowledge frontier forgot some of its past, which the requirement would then miss, so the result is tainted too.
  template <std::size_t M>
  [[nodiscard]] static RequirementFrontier from_knowledge(const KnowledgeFrontier<M>& known) noexcept {
    RequirementFrontier result;
    result.tainted_ = known.tainted();
    if (!result.template merge_entries<M>(known.entries().data(), static_cast<detail::EntryCount>(known.size()))) {
      result.tainted_ = true;
    }
    return result;
  }

  // Adds the requirement (axis, epoch) or raises the axis's epoch (a no-op when epoch is 0). If the frontier is full
  // and the axis is new, it is tainted: a requirement has been lost, and no frontier will dominate it again. O(size).
  void insert_or_raise(Axis axis, std::uint64_t epoch) noexcept {
    if (epoch == 0) return;
    if (!this->insert_or_raise_entry(axis, epoch)) this->tainted_ = true;
  }

  // Requires everything either requires: the component-wise maximum. Overflow or a tainted `other` taints.
  template <std::size_t M>
  void merge(const RequirementFrontier<M>& other) noexcept {
    this->tainted_ |= other.tainted();
    if (!this->template merge_entries<M>(other.entries().data(), static_cast<detail::EntryCount>(other.size()))) {
      this->tainted_ = true;
    }
  }

  // Marks the requirement as incomplete: no frontier dominates it from now on. Always safe (only more conservative).
  void mark_tainted() noexcept { this->tainted_ = true; }

  // Forgets every entry and the taint.
  void clear() noexcept {
    this->count_ = 0;
    this->tainted_ = false;
  }

 private:
  template <class Range>
  void assign(const Range& entries) noexcept {
    for (const FrontierEntry& e : entries) insert_or_raise(e.axis, e.epoch);
  }
};

// ---- dominance -------------------------------------------------------------------------------------------------

// True when `known` covers every entry of `required` (same axis, epoch at least as large) and `required` is not
// tainted: "everything required has happened, as far as `known` knows". The scheduling predicate: a stream whose
// knowledge dominates an op's wait frontier elides the wait. A tainted `known` is still sound (it knows less).
template <std::size_t N, std::size_t M>
[[nodiscard]] bool dominates(const KnowledgeFrontier<N>& known, const RequirementFrontier<M>& required) noexcept {
  return !required.tainted() &&
         detail::covers(known.entries().data(), static_cast<detail::EntryCount>(known.size()),
                        required.entries().data(), static_cast<detail::EntryCount>(required.size()));
}

// The order of knowledge: a knows at least everything b records. Taint is not consulted (a tainted knowledge
// frontier knows less than happened, which never makes its recorded entries wrong).
template <std::size_t N, std::size_t M>
[[nodiscard]] bool dominates(const KnowledgeFrontier<N>& a, const KnowledgeFrontier<M>& b) noexcept {
  return detail::covers(a.entries().data(), static_cast<detail::EntryCount>(a.size()), b.entries().data(),
                        static_cast<detail::EntryCount>(b.size()));
}

// Subsumption of requirements: satisfying a satisfies b. False whenever b is tainted (b's true content is unknown).
// A tainted a is still sound here: its true content only requires more than its entries do.
template <std::size_t N, std::size_t M>
[[nodiscard]] bool dominates(const RequirementFrontier<N>& a, const RequirementFrontier<M>& b) noexcept {
  return !b.tainted() && detail::covers(a.entries().data(), static_cast<detail::EntryCount>(a.size()),
                                        b.entries().data(), static_cast<detail::EntryCount>(b.size()));
}

// "Does a requirement dominate a knowledge frontier" has no meaning; convert explicitly (from_knowledge) if a
// knowledge frontier is to be treated as a requirement.
template <std::size_t N, std::size_t M>
bool dominates(const RequirementFrontier<N>&, const KnowledgeFrontier<M>&) = delete;

// ---- compare ---------------------------------------------------------------------------------------------------

namespace detail {
[[nodiscard]] constexpr FrontierOrder order_of(bool a_dominates_b, bool b_dominates_a) noexcept {
  if (a_dominates_b) return b_dominates_a ? FrontierOrder::kEqual : FrontierOrder::kAfter;
  return b_dominates_a ? FrontierOrder::kBefore : FrontierOrder::kConcurrent;
}
}  // namespace detail

// compare(a, b) == order_of(dominates(a, b), dominates(b, a)), computed in one pass.
template <std::size_t N, std::size_t M>
[[nodiscard]] FrontierOrder compare(const KnowledgeFrontier<N>& a, const KnowledgeFrontier<M>& b) noexcept {
  const detail::Coverage c = detail::coverage(a.entries().data(), static_cast<detail::EntryCount>(a.size()),
                                              b.entries().data(), static_cast<detail::EntryCount>(b.size()));
  return detail::order_of(c.a_covers_b, c.b_covers_a);
}

// As above; a tainted requirement is dominated by nothing, so it is never equal to or before anything.
template <std::size_t N, std::size_t M>
[[nodiscard]] FrontierOrder compare(const RequirementFrontier<N>& a, const RequirementFrontier<M>& b) noexcept {
  const detail::Coverage c = detail::coverage(a.entries().data(), static_cast<detail::EntryCount>(a.size()),
                                              b.entries().data(), static_cast<detail::EntryCount>(b.size()));
  return detail::order_of(c.a_covers_b && !b.tainted(), c.b_covers_a && !a.tainted());
}

template <std::size_t N, std::size_t M>
FrontierOrder compare(const KnowledgeFrontier<N>&, const RequirementFrontier<M>&) = delete;
template <std::size_t N, std::size_t M>
FrontierOrder compare(const RequirementFrontier<N>&, const KnowledgeFrontier<M>&) = delete;

// ---- undominated -----------------------------------------------------------------------------------------------

// The entries of `target` that `reference` does not cover: the waits still to issue. The result keeps `target`'s
// taint, so dominates(reference, target) == dominates(KnowledgeFrontier<1>{}, result): a tainted target never
// yields an empty, untainted result, and its caller knows the listed waits are not all it needs.
template <std::size_t N, std::size_t M>
[[nodiscard]] RequirementFrontier<M> undominated(const KnowledgeFrontier<N>& reference,
                                                 const RequirementFrontier<M>& target) noexcept {
  RequirementFrontier<M> result;
  const detail::EntryCount n = detail::uncovered(
      reference.entries().data(), static_cast<detail::EntryCount>(reference.size()), target.entries().data(),
      static_cast<detail::EntryCount>(target.size()), detail::FrontierAccess::entries(result));
  detail::FrontierAccess::set(result, n, target.tainted());
  return result;
}

// ---- functional forms, equality, formatting --------------------------------------------------------------------

// a merged with b, at a's capacity.
template <std::size_t N, std::size_t M>
[[nodiscard]] KnowledgeFrontier<N> merged(KnowledgeFrontier<N> a, const KnowledgeFrontier<M>& b) noexcept {
  a.merge(b);
  return a;
}
// The same for requirements.
template <std::size_t N, std::size_t M>
[[nodiscard]] RequirementFrontier<N> merged(RequirementFrontier<N> a, const RequirementFrontier<M>& b) noexcept {
  a.merge(b);
  return a;
}

// Same entries and same taint (capacity does not matter).
template <std::size_t N, std::size_t M>
[[nodiscard]] bool operator==(const KnowledgeFrontier<N>& a, const KnowledgeFrontier<M>& b) noexcept {
  return a.tainted() == b.tainted() && std::ranges::equal(a.entries(), b.entries());
}
// The same for requirements.
template <std::size_t N, std::size_t M>
[[nodiscard]] bool operator==(const RequirementFrontier<N>& a, const RequirementFrontier<M>& b) noexcept {
  return a.tainted() == b.tainted() && std::ranges::equal(a.entries(), b.entries());
}

namespace detail {
// "{m0.queue.1:5, m0.queue.2:3}", followed by " tainted" when tainted. Allocates.
[[nodiscard]] std::string format_frontier(std::span<const FrontierEntry> entries, bool tainted);
}  // namespace detail

// For traces, error messages and test output: "knowledge{m0.queue.1:5}" / "requirement{...} tainted".
template <std::size_t N>
[[nodiscard]] std::string to_string(const KnowledgeFrontier<N>& f) {
  return "knowledge" + detail::format_frontier(f.entries(), f.tainted());
}
// The same for requirements.
template <std::size_t N>
[[nodiscard]] std::string to_string(const RequirementFrontier<N>& f) {
  return "requirement" + detail::format_frontier(f.entries(), f.tainted());
}
// Writes to_string(f).
template <std::size_t N>
std::ostream& operator<<(std::ostream& out, const KnowledgeFrontier<N>& f) {
  return out << to_string(f);
}
// Writes to_string(f).
template <std::size_t N>
std::ostream& operator<<(std::ostream& out, const RequirementFrontier<N>& f) {
  return out << to_string(f);
}

}  // namespace depengine

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
