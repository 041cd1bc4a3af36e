// The frontier algorithms on raw sorted arrays of entries, shared by both frontier roles and every capacity.
//
// Every input is a sorted array (strictly ascending axes, no zero epoch) given as a pointer and a count; outputs are
// written to caller-provided storage large enough for the stated bound. The kernels know nothing of capacity or taint:
// frontier.h applies the role's overflow and taint rules around them.
//
// Speed: these run on every push, signal and wait, so each is a single forward pass over small arrays with no
// allocation. Steady-state frontiers usually name the same axes as their partner (a stream merging the next signal
// of the streams it always talks to), so merge, dominates, compare and undominated first try "same axes in the same
// order" with a straight loop over the epochs (merge raises as it checks); otherwise they fall back to a merge scan.
// Cost: O(na + nb) for every kernel; keep_newest is O(n) expected (nth_element).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include <depengine/frontier/frontier_entry.h>

namespace depengine::detail {

using EntryCount = std::uint32_t;

// True when a and b (n entries each) name the same axes in the same order. It stops at the first difference: in the
// steady state the axes match, so the branch is always predicted. (An OR of the differences over every entry, without
// a branch, is vectorized by GCC into SSE2 code whose set-up costs more than the loop at 4 entries.)
[[nodiscard]] inline bool same_axes(const FrontierEntry* a, const FrontierEntry* b, EntryCount n) noexcept {
  for (EntryCount i = 0; i < n; ++i) {
    if (a[i].axis != b[i].axis) return false;
  }
  return true;
}

// The index of the first entry whose axis is not below `axis` (n when every axis is below). Counting rather than
// searching: no data-dependent branch, and the compiler keeps several compares in flight.
[[nodiscard]] inline EntryCount lower_bound(const FrontierEntry* e, EntryCount n, Axis axis) noexcept {
  EntryCount pos = 0;
  for (EntryCount i = 0; i < n; ++i) pos += static_cast<EntryCount>(e[i].axis < axis);
  return pos;
}

// Writes the component-wise maximum of a and b to `out` (room for na + nb entries, disjoint from both) and returns
// its size.
[[nodiscard]] inline EntryCount merge_into(const FrontierEntry* a, EntryCount na, const FrontierEntry* b, EntryCount nb,
                                           FrontierEntry* out) noexcept {
  EntryCount i = 0;
  EntryCount j = 0;
  EntryCount k = 0;
  while (i < na && j < nb) {
    const std::uint64_t x = a[i].axis.bits();
    const std::uint64_t y = b[j].axis.bits();
    if (x < y) {
      out[k++] = a[i++];
    } else if (y < x) {
      out[k++] = b[j++];
    } else {
      out[k++] = FrontierEntry{a[i].axis, std::max(a[i].epoch, b[j].epoch)};
      ++i;
      ++j;
    }
  }
  if (i < na) std::memcpy(out + k, a + i, (na - i) * sizeof(FrontierEntry));
  if (j < nb) std::memcpy(out + k + (na - i), b + j, (nb - j) * sizeof(FrontierEntry));
  return k + (na - i) + (nb - j);
}

// Raises a[i].epoch to b[i].epoch along the leading entries whose axes match, stopping at the first that does not;
// returns how many matched (n when a and b name the same axes in the same order). One pass that checks and raises,
// rather than same_axes() followed by a raising loop: the merge's steady-state path reads each entry once.
[[nodiscard]] inline EntryCount raise_matching(FrontierEntry* a, const FrontierEntry* b, EntryCount n) noexcept {
  for (EntryCount i = 0; i < n; ++i) {
    if (a[i].axis != b[i].axis) return i;
    a[i].epoch = std::max(a[i].epoch, b[i].epoch);
  }
  return n;
}

// True when every entry of `target` is covered by `reference`: same axis present with an epoch at least as large.
[[nodiscard]] inline bool covers(const FrontierEntry* reference, EntryCount nr, const FrontierEntry* target,
                                 EntryCount nt) noexcept {
  if (nr == nt) {
    std::uint64_t diff = 0;
    bool ok = true;
    for (EntryCount i = 0; i < nt; ++i) {
      diff |= reference[i].axis.bits() ^ target[i].axis.bits();
      ok &= reference[i].epoch >= target[i].epoch;
    }
    if (diff == 0) return ok;
  }
  if (nt > nr) return false;  // some axis of target is missing from reference
  EntryCount i = 0;
  for (EntryCount j = 0; j < nt; ++j) {
    while (i < nr && reference[i].axis < target[j].axis) ++i;
    if (i == nr || reference[i].axis != target[j].axis || reference[i].epoch < target[j].epoch) return false;
    ++i;
  }
  return true;
}

// Both directions of coverage in one pass: a_covers_b means every entry of b is covered by a.
struct Coverage {
  bool a_covers_b;
  bool b_covers_a;
};

[[nodiscard]] inline Coverage coverage(const FrontierEntry* a, EntryCount na, const FrontierEntry* b,
                                       EntryCount nb) noexcept {
  bool a_less = false;     // some axis where a is behind b (or missing from a)
  bool a_greater = false;  // some axis where a is ahead of b (or missing from b)
  if (na == nb) {
    std::uint64_t diff = 0;
    for (EntryCount i = 0; i < na; ++i) {
      diff |= a[i].axis.bits() ^ b[i].axis.bits();
      a_less |= a[i].epoch < b[i].epoch;
      a_greater |= a[i].epoch > b[i].epoch;
    }
    if (diff == 0) return {!a_less, !a_greater};
    a_less = a_greater = false;
  }
  EntryCount i = 0;
  EntryCount j = 0;
  while (i < na && j < nb) {
    if (a[i].axis < b[j].axis) {
      a_greater = true;
      ++i;
    } else if (b[j].axis < a[i].axis) {
      a_less = true;
      ++j;
    } else {
      a_less |= a[i].epoch < b[j].epoch;
      a_greater |= a[i].epoch > b[j].epoch;
      ++i;
      ++j;
    }
  }
  a_greater |= i < na;
  a_less |= j < nb;
  return {!a_less, !a_greater};
}

// Writes the entries of `target` that `reference` does not cover to `out` (room for nt entries) and returns how many.
[[nodiscard]] inline EntryCount uncovered(const FrontierEntry* reference, EntryCount nr, const FrontierEntry* target,
                                          EntryCount nt, FrontierEntry* out) noexcept {
  EntryCount k = 0;
  if (nr == nt && same_axes(reference, target, nt)) {
    for (EntryCount i = 0; i < nt; ++i) {
      out[k] = target[i];  // written unconditionally, kept only when uncovered: no branch on the epochs
      k += static_cast<EntryCount>(target[i].epoch > reference[i].epoch);
    }
    return k;
  }
  EntryCount i = 0;
  for (EntryCount j = 0; j < nt; ++j) {
    while (i < nr && reference[i].axis < target[j].axis) ++i;
    const bool covered = i < nr && reference[i].axis == target[j].axis && reference[i].epoch >= target[j].epoch;
    out[k] = target[j];
    k += static_cast<EntryCount>(!covered);
  }
  return k;
}

// Shrinks e[0, n) to its `capacity` entries with the largest epochs, keeping axis order, and returns the new size.
// Among equal epochs at the cut, the entries with the smallest axes go first (deterministic). `scratch` has room for
// n epochs. Precondition: n > capacity. The overflow path of both roles: never on a steady-state hot path.
[[nodiscard]] inline EntryCount keep_newest(FrontierEntry* e, EntryCount n, EntryCount capacity,
                                            std::uint64_t* scratch) noexcept {
  const EntryCount drop = n - capacity;
  for (EntryCount i = 0; i < n; ++i) scratch[i] = e[i].epoch;
  std::nth_element(scratch, scratch + (drop - 1), scratch + n);
  const std::uint64_t cut = scratch[drop - 1];  // the drop-th smallest epoch
  EntryCount below = 0;
  for (EntryCount i = 0; i < n; ++i) below += static_cast<EntryCount>(e[i].epoch < cut);
  EntryCount ties_to_drop = drop - below;
  EntryCount k = 0;
  for (EntryCount i = 0; i < n; ++i) {
    if (e[i].epoch < cut) continue;
    if (e[i].epoch == cut && ties_to_drop > 0) {
      --ties_to_drop;
      continue;
    }
    e[k++] = e[i];
  }
  return k;
}

}  // namespace depengine::detail
