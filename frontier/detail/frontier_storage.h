// The storage and read-only surface shared by KnowledgeFrontier<N> and RequirementFrontier<N> (frontier.h): a count, a
// taint flag and N inline entries, sorted by axis with no zero epoch. Mutation lives in the role classes, so that the
// overflow rule is fixed by the type; this base has no public mutator, so a reference to it cannot be used to change a
// frontier behind its role's back.
//
// Layout: count and taint first, then the entries, so that a small frontier's live data shares the first cache line.
// Copies move only the live prefix (count entries), never the whole capacity: a 64-entry frontier holding 3 entries
// copies 48 bytes, not 1 KiB. Entries past the count are never read (they are left uninitialised on purpose: zeroing
// them would cost more than most operations).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>

#include <depengine/frontier/detail/frontier_kernels.h>
#include <depengine/frontier/frontier_entry.h>

namespace depengine::detail {

struct FrontierAccess;

template <std::size_t N>
class FrontierStorage {
  static_assert(N >= 1, "a frontier needs a capacity of at least one entry");
  static_assert(N <= (std::size_t{1} << 16), "frontier capacities above 65536 entries are not supported");

 public:
  static constexpr std::size_t kCapacity = N;

  [[nodiscard]] static constexpr std::size_t capacity() noexcept { return N; }
  [[nodiscard]] std::size_t size() const noexcept { return count_; }
  [[nodiscard]] bool empty() const noexcept { return count_ == 0; }
  // See the role classes in frontier.h: a tainted knowledge frontier knows less than happened (safe); a tainted
  // requirement frontier has lost entries and is never dominated.
  [[nodiscard]] bool tainted() const noexcept { return tainted_; }

  // The entries, sorted by strictly ascending axis, every epoch at least 1. Valid until the frontier next changes.
  [[nodiscard]] std::span<const FrontierEntry> entries() const noexcept { return {entries_, count_}; }
  [[nodiscard]] const FrontierEntry* begin() const noexcept { return entries_; }
  [[nodiscard]] const FrontierEntry* end() const noexcept { return entries_ + count_; }
  [[nodiscard]] const FrontierEntry& operator[](std::size_t i) const noexcept { return entries_[i]; }

  // The epoch recorded for `axis`, or 0 when the frontier has no entry for it. O(size).
  [[nodiscard]] std::uint64_t epoch(Axis axis) const noexcept {
    const EntryCount pos = lower_bound(entries_, count_, axis);
    return pos < count_ && entries_[pos].axis == axis ? entries_[pos].epoch : 0;
  }

  // Checks the invariants (strictly ascending axes, no zero epoch, count within capacity). Throws std::logic_error
  // naming the first violation. O(size); for tests and debug checks.
  void validate() const {
    if (count_ > N) throw std::logic_error("frontier: count exceeds capacity");
    for (EntryCount i = 0; i < count_; ++i) {
      if (entries_[i].epoch == 0) {
        throw std::logic_error("frontier: entry " + std::to_string(i) + " (" + to_string(entries_[i].axis) +
                               ") has epoch 0");
      }
      if (i > 0 && !(entries_[i - 1].axis < entries_[i].axis)) {
        throw std::logic_error("frontier: entries " + std::to_string(i - 1) + " and " + std::to_string(i) +
                               " are not in strictly ascending axis order");
      }
    }
  }

 protected:
  FrontierStorage() noexcept {}  // NOLINT: entries_ is deliberately left uninitialised (see the file comment)
  FrontierStorage(const FrontierStorage& other) noexcept : count_(other.count_), tainted_(other.tainted_) {
    std::memcpy(entries_, other.entries_, count_ * sizeof(FrontierEntry));
  }
  FrontierStorage& operator=(const FrontierStorage& other) noexcept {
    count_ = other.count_;
    tainted_ = other.tainted_;
    std::memmove(entries_, other.entries_, count_ * sizeof(FrontierEntry));  // memmove: self-assignment is allowed
    return *this;
  }
  ~FrontierStorage() = default;

  // Stores `n` entries from `source` (sorted, no zero epoch); n <= N.
  void assign_entries(const FrontierEntry* source, EntryCount n) noexcept {
    std::memcpy(entries_, source, n * sizeof(FrontierEntry));
    count_ = n;
  }

  // Merges `other` (sorted, no zero epoch) into this frontier. On overflow keeps the N entries with the largest epochs
  // and returns false; the role decides what that loss means. Never allocates: the slow path merges into a stack
  // buffer of N + M entries.
  template <std::size_t M>
  bool merge_entries(const FrontierEntry* other, EntryCount other_count) noexcept {
    // The steady-state path: same axes, no entry moves. If the axes part ways, the entries raised before that point
    // already hold the maximum, which the merge scan below keeps: stopping half-way loses nothing but the pass.
    if (other_count == count_ && raise_matching(entries_, other, count_) == count_) return true;
    FrontierEntry merged[N + M];
    const EntryCount n = merge_into(entries_, count_, other, other_count, merged);
    if (n <= N) {
      assign_entries(merged, n);
      return true;
    }
    std::uint64_t scratch[N + M];
    assign_entries(merged, keep_newest(merged, n, N, scratch));
    return false;
  }

  // Adds (axis, epoch) or raises the axis's epoch. Returns false when the frontier was full and an entry (possibly the
  // new one) was dropped. `epoch` must not be 0.
  bool insert_or_raise_entry(Axis axis, std::uint64_t epoch) noexcept {
    const EntryCount pos = lower_bound(entries_, count_, axis);
    if (pos < count_ && entries_[pos].axis == axis) {
      if (entries_[pos].epoch < epoch) entries_[pos].epoch = epoch;
      return true;
    }
    if (count_ < N) {
      std::memmove(entries_ + pos + 1, entries_ + pos, (count_ - pos) * sizeof(FrontierEntry));
      entries_[pos] = FrontierEntry{axis, epoch};
      ++count_;
      return true;
    }
    insert_full(pos, axis, epoch);
    return false;
  }

  EntryCount count_ = 0;
  bool tainted_ = false;
  FrontierEntry entries_[N];

 private:
  friend struct FrontierAccess;

  // The overflow path of insert_or_raise_entry, kept out of line so the hot path stays small.
  [[gnu::noinline]] void insert_full(EntryCount pos, Axis axis, std::uint64_t epoch) noexcept {
    FrontierEntry all[N + 1];
    std::memcpy(all, entries_, pos * sizeof(FrontierEntry));
    all[pos] = FrontierEntry{axis, epoch};
    std::memcpy(all + pos + 1, entries_ + pos, (count_ - pos) * sizeof(FrontierEntry));
    std::uint64_t scratch[N + 1];
    assign_entries(all, keep_newest(all, count_ + 1, N, scratch));
  }
};

// Lets the free functions of frontier.h build results in place (undominated writes straight into its return value).
struct FrontierAccess {
  template <class Frontier>
  static FrontierEntry* entries(Frontier& frontier) noexcept {
    return frontier.entries_;
  }
  template <class Frontier>
  static void set(Frontier& frontier, EntryCount count, bool tainted) noexcept {
    frontier.count_ = count;
    frontier.tainted_ = tainted;
  }
};

}  // namespace depengine::detail
