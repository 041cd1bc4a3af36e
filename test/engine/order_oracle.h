// An oracle for the order in which an engine ran ops pushed by several threads at once.
//
// The contract (engine.h, "Order" and "Any thread may push"): every variable's ops take effect in one total order of
// all pushes that respects each pushing thread's program order. With several pushers that order is the engine's
// choice, so the test cannot predict it; it can observe it. While it runs, each op records, for each variable it
// uses, how many mutations of that variable completed before it (ops that mutate the variable bump the count, under
// the exclusivity the engine guarantees). After the run, total_order() rebuilds the order those observations imply:
//
//   - each variable's mutations must have seen 0, 1, 2, ... (two mutations that saw the same count overlapped);
//   - a read that saw c mutations sits after the c-th mutation and before the next;
//   - each pusher's ops follow its program order.
//
// These constraints form a graph; a topological order of it is a total order the engine's behaviour is consistent
// with, and a cycle proves there is none (MXNet's per-variable appends could order two variables oppositely). A
// serial replay in that order must then reproduce every value the ops computed, bit for bit.
//
// Thread safety: observe() from the running ops (each op touches its own slot; the per-variable counts are protected
// by the engine's ordering, which is what the test checks, with TSAN's help); the rest from one thread after the
// engine has finished.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

namespace depengine::test {

// One op of a generated workload: the variables it names as pushed (duplicates and overlap allowed) and how.
struct OpSpec {
  std::vector<std::uint32_t> reads;
  std::vector<std::uint32_t> mutates;
  std::uint32_t executor = 0;  // PushOptions::context.executor
  std::int32_t priority = 0;
  bool async = false;  // PushAsync, completed from another thread
};

struct UseSpec {
  std::uint32_t var;
  bool write;
};

// The distinct variables of `op`, folded as the engine folds them: named twice counts once, read and mutated counts
// as mutated. In order of first appearance.
[[nodiscard]] inline std::vector<UseSpec> fold(const OpSpec& op) {
  std::vector<UseSpec> uses;
  auto add = [&uses](std::uint32_t var, bool write) {
    for (UseSpec& use : uses) {
      if (use.var == var) {
        use.write = use.write || write;
        return;
      }
    }
    uses.push_back({var, write});
  };
  for (std::uint32_t var : op.reads) add(var, false);
  for (std::uint32_t var : op.mutates) add(var, true);
  return uses;
}

class OrderOracle {
 public:
  // `programs[p]` is what pusher p pushes, in order. Op ids are dense: pusher 0's ops first.
  OrderOracle(std::size_t num_vars, const std::vector<std::vector<OpSpec>>& programs) : mutations_(num_vars, 0) {
    for (const auto& program : programs) {
      offsets_.push_back(uses_.size());
      for (const OpSpec& op : program) {
        uses_.push_back(fold(op));
        seen_.emplace_back(uses_.back().size(), 0);
      }
    }
    offsets_.push_back(uses_.size());
  }

  [[nodiscard]] std::size_t id(std::size_t pusher, std::size_t index) const { return offsets_[pusher] + index; }
  [[nodiscard]] std::size_t size() const { return uses_.size(); }

  // Called by op `op_id` while it runs, before it completes.
  void observe(std::size_t op_id) {
    const std::vector<UseSpec>& uses = uses_[op_id];
    for (std::size_t i = 0; i < uses.size(); ++i) {
      std::uint64_t& count = mutations_[uses[i].var];
      seen_[op_id][i] = count;
      if (uses[i].write) ++count;
    }
  }

  struct Result {
    std::vector<std::size_t> order;  // every op id, in a total order consistent with all observations
    std::string failure;             // empty on success
  };

  [[nodiscard]] Result total_order() const {
    const std::size_t n = uses_.size();
    std::vector<std::vector<std::size_t>> after(n);  // edges: op -> ops that must come after it
    std::vector<std::size_t> indegree(n, 0);
    auto edge = [&](std::size_t from, std::size_t to) {
      after[from].push_back(to);
      ++indegree[to];
    };
    for (std::size_t p = 0; p + 1 < offsets_.size(); ++p) {
      for (std::size_t op = offsets_[p]; op + 1 < offsets_[p + 1]; ++op) edge(op, op + 1);
    }
    std::vector<std::vector<std::pair<std::uint64_t, std::size_t>>> writers(mutations_.size()),
        readers(mutations_.size());
    for (std::size_t op = 0; op < n; ++op) {
      for (std::size_t i = 0; i < uses_[op].size(); ++i) {
        auto& list = uses_[op][i].write ? writers : readers;
        list[uses_[op][i].var].emplace_back(seen_[op][i], op);
      }
    }
    for (std::size_t var = 0; var < mutations_.size(); ++var) {
      auto& w = writers[var];
      std::sort(w.begin(), w.end());
      for (std::size_t k = 0; k < w.size(); ++k) {
        if (w[k].first != k) {
          return {{},
                  "variable " + std::to_string(var) + ": its mutations saw counts that are not 0.." +
                      std::to_string(w.size() - 1) + " (position " + std::to_string(k) + " saw " +
                      std::to_string(w[k].first) + "): two mutations overlapped, or one was not counted"};
        }
        if (k > 0) edge(w[k - 1].second, w[k].second);
      }
      for (const auto& [count, op] : readers[var]) {
        if (count > w.size()) {
          return {{}, "variable " + std::to_string(var) + ": a read saw more mutations than there were"};
        }
        if (count > 0) edge(w[count - 1].second, op);
        if (count < w.size()) edge(op, w[count].second);
      }
    }
    Result result;
    std::deque<std::size_t> ready;
    for (std::size_t op = 0; op < n; ++op) {
      if (indegree[op] == 0) ready.push_back(op);
    }
    while (!ready.empty()) {
      const std::size_t op = ready.front();
      ready.pop_front();
      result.order.push_back(op);
      for (std::size_t next : after[op]) {
        if (--indegree[next] == 0) ready.push_back(next);
      }
    }
    if (result.order.size() != n) {
      result.failure = "no total order of the pushes explains what the ops observed (" +
                       std::to_string(n - result.order.size()) +
                       " ops on a cycle): variables ordered the same pushes differently, or against a pusher's "
                       "program order";
    }
    return result;
  }

 private:
  std::vector<std::vector<UseSpec>> uses_;        // per op id; immutable
  std::vector<std::vector<std::uint64_t>> seen_;  // per op id and use; written by that op
  std::vector<std::uint64_t> mutations_;          // per variable; written by the ops that mutate it
  std::vector<std::size_t> offsets_;              // first op id of each pusher, then the total
};

}  // namespace depengine::test
