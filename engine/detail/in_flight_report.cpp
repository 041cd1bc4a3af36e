#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <depengine/engine/detail/dot_text.h>
#include <depengine/engine/detail/graph_plan.h>
#include <depengine/engine/detail/in_flight_report.h>
#include <depengine/engine/detail/op_record.h>

namespace depengine::detail {
namespace {

constexpr std::size_t kMaxListedVars = 32;  // variables named in full; the rest are counted

// An op as the report saw it: copied under the lock of a variable it waits in.
struct SeenOp {
  std::string name;                   // "op #3 'forward'" or "op #3"; WaitForVar's and WaitForAll's own ops say so
  std::string label;                  // the name, and in brackets whether it runs or waits for its Completion
  std::string running;                // "running for 2.0 s" while its function runs; else empty
  bool completion_pending = false;    // an async op whose function returned: it waits for its Completion alone
  std::vector<std::string> states;    // what it holds and waits for, for a trace's marks
  std::vector<Fence> unreached;       // wait fences not reached when seen
  std::vector<Fence> signals;         // signal fences
  std::vector<std::size_t> waits_on;  // ops (indices) it waits for
  std::vector<std::string> why;       // per entry of waits_on: "waits on v3 behind ", to be followed by its label
  std::vector<std::string> via;       // per entry of waits_on, for a picture's edge: "v3", "fence value 1"
};

struct SeenVar {
  std::uint32_t slot;
  std::int32_t running_reads;
  std::vector<std::pair<std::size_t, Access>> uses;  // ops (indices) in queue order; the first may hold it
};

std::string fence_text(const Fence& fence) {
  char text[96];
  std::snprintf(text, sizeof text, "fence (timeline %p, value %llu; at %llu)", static_cast<const void*>(fence.timeline),
                static_cast<unsigned long long>(fence.value), static_cast<unsigned long long>(fence.timeline->query()));
  return text;
}

// A fence as a picture's edge names it: its value and what the timeline has reached.
std::string fence_label(const Fence& fence) {
  return "fence value " + std::to_string(fence.value) + " (at " + std::to_string(fence.timeline->query()) + ")";
}

const char* access_text(Access access) {
  switch (access) {
    case Access::kRead:
      return "read";
    case Access::kAccumulate:
      return "accumulate";
    case Access::kWrite:
      return "write";
    case Access::kSync:
      return "wait";
  }
  return "?";
}

class Builder {
 public:
  explicit Builder(const RunClock& clock) : clock_(clock) {}

  void visit(VarState& var) {
    var.inspect([&](std::int32_t reads, const VarUse* first) {
      if (first == nullptr) return;
      SeenVar seen{var.slot, reads, {}};
      for (const VarUse* use = first; use != nullptr; use = VarQueue::next_in_list(*use)) {
        seen.uses.emplace_back(see(use->op), use->access);
      }
      vars_.push_back(std::move(seen));
    });
  }

  InFlightSnapshot finish(std::size_t in_flight) {
    draw_edges();
    InFlightSnapshot snapshot;
    std::string& out = snapshot.text;
    out = "depengine: " + std::to_string(in_flight) + " ops in flight; " + std::to_string(vars_.size()) +
          " variables with ops waiting\n";
    if (ops_.size() < in_flight) {
      out +=
          "  (named below: the ops that hold or wait for a variable; running ops that only read, counted per "
          "variable, ops of no variable, and ready ops not started yet are in flight too)\n";
    }
    for (std::size_t i = 0; i < vars_.size() && i < kMaxListedVars; ++i) out += var_line(vars_[i]);
    if (vars_.size() > kMaxListedVars) {
      out += "  ... and " + std::to_string(vars_.size() - kMaxListedVars) + " more variables\n";
    }
    for (const SeenOp& op : ops_) {
      for (const Fence& fence : op.unreached) out += "  " + op.label + " waits for " + fence_text(fence) + "\n";
    }
    const std::string cycle = cycle_text();
    out += cycle;
    note_states();
    snapshot.stuck = !cycle.empty();
    for (SeenOp& op : ops_) {
      snapshot.running += op.running.empty() ? 0 : 1;
      snapshot.stuck = snapshot.stuck || op.completion_pending || !op.unreached.empty();
      std::string state;
      for (const std::string& part : op.states) {
        if (!state.empty()) state += "; ";
        state += part;
      }
      snapshot.ops.push_back(InFlightSnapshot::Op{std::move(op.name), std::move(state)});
    }
    return snapshot;
  }

 private:
  // A replay's joins stand for its graph's ops: one entry per replay.
  std::size_t see(const OpNode* node) {
    if (node->owner_kind == kGraphJoin) {
      const GraphInstance* instance = static_cast<const GraphJoin*>(node)->instance;
      const auto [it, fresh] = index_.try_emplace(instance, ops_.size());
      if (fresh) {
        SeenOp seen;
        seen.name = "op #" + std::to_string(ops_.size() + 1) + " (replay " + std::to_string(instance->replay) +
                    " of a graph of " + std::to_string(instance->plan.size()) + " ops)";
        seen.label = seen.name;
        ops_.push_back(std::move(seen));
      }
      return it->second;
    }
    const auto* op = static_cast<const OpRecord*>(node);
    const auto [it, fresh] = index_.try_emplace(op, ops_.size());
    if (!fresh) return it->second;
    SeenOp seen;
    seen.name = "op #" + std::to_string(ops_.size() + 1);
    if (op->internal) {
      seen.name += " (a wait of the engine's own: WaitForVar or WaitForAll)";
    } else if (!op->name_view().empty()) {
      seen.name += " '" + std::string(op->name_view()) + "'";
    }
    seen.label = seen.name;
    // relaxed, both: a snapshot for the report; the record stays the op's while it is in the queue.
    if (const RunClock::Tick since = op->run_stamp.load(std::memory_order_relaxed); since != 0) {
      seen.running = clock_.period().count() > 0 ? "running for " + duration_text(clock_.elapsed(since)) : "running";
      seen.label += " [" + seen.running + "]";
    } else if (op->async && !op->replay_completion && op->holds.load(std::memory_order_relaxed) == 1) {
      // An async op seen in a queue has not completed (its completion would need the queue's locks, held here); one
      // hold left means its function has returned (completion.cpp, release_hold): it waits for its Completion alone.
      seen.completion_pending = true;
      seen.label += " [async: its function returned; its Completion has not been called]";
    }
    if (op->waits_fences) {
      for (const Fence& fence : op->wait_fences) {
        if (fence.timeline->query() < fence.value) seen.unreached.push_back(fence);
      }
    }
    if (op->signals_fences) seen.signals.assign(op->signal_fences.begin(), op->signal_fences.end());
    ops_.push_back(std::move(seen));
    return it->second;
  }

  void draw_edges() {
    for (const SeenVar& var : vars_) {
      for (std::size_t i = 1; i < var.uses.size(); ++i) {
        std::string v = "v";  // not "v" + to_string(): GCC 12 warns of a false overlap there (-Wrestrict)
        v += std::to_string(var.slot);
        add_edge(var.uses[i].first, var.uses[i - 1].first, "waits on " + v + " behind ", v);
      }
    }
    for (SeenOp& waiter : ops_) {
      for (const Fence& fence : waiter.unreached) {
        for (std::size_t j = 0; j < ops_.size(); ++j) {
          const std::vector<Fence>& signals = ops_[j].signals;
          if (std::any_of(signals.begin(), signals.end(), [&](const Fence& signal) {
                return signal.timeline == fence.timeline && signal.value >= fence.value;
              })) {
            add_edge(static_cast<std::size_t>(&waiter - ops_.data()), j,
                     "waits for " + fence_text(fence) + ", which is signalled by ", fence_label(fence));
          }
        }
      }
    }
  }

  // Each op's state in words, for the trace's marks: running or waiting for its Completion, what it holds, and what
  // it waits for.
  void note_states() {
    for (SeenOp& op : ops_) {
      if (!op.running.empty()) op.states.push_back(op.running);
      if (op.completion_pending) op.states.emplace_back("its function returned; its Completion has not been called");
    }
    for (const SeenVar& var : vars_) {
      std::string v = "v";  // not "v" + to_string(): GCC 12 warns of a false overlap there (-Wrestrict)
      v += std::to_string(var.slot);
      const auto& [first, access] = var.uses.front();
      if (var.running_reads > 0) {
        ops_[first].states.push_back("waits on " + v + " behind " + std::to_string(var.running_reads) +
                                     " reads running");
      } else if (access != Access::kRead) {
        ops_[first].states.push_back("holds " + v + " (" + access_text(access) + ")");
      }
      for (std::size_t i = 1; i < var.uses.size(); ++i) {
        ops_[var.uses[i].first].states.push_back("waits on " + v + " behind " + ops_[var.uses[i - 1].first].label);
      }
    }
    for (SeenOp& op : ops_) {
      for (const Fence& fence : op.unreached) op.states.push_back("waits for " + fence_text(fence));
    }
  }

  void add_edge(std::size_t from, std::size_t to, std::string why, std::string via) {
    ops_[from].waits_on.push_back(to);
    ops_[from].why.push_back(std::move(why));
    ops_[from].via.push_back(std::move(via));
  }

  std::string var_line(const SeenVar& var) const {
    std::string line = "  v" + std::to_string(var.slot) + ": ";
    std::size_t first_waiting = 0;
    if (var.running_reads > 0) {
      line += std::to_string(var.running_reads) + " reads running";
    } else if (var.uses.front().second != Access::kRead) {
      line += "held by " + ops_[var.uses.front().first].label + " (" + access_text(var.uses.front().second) + ")";
      first_waiting = 1;
    }
    if (first_waiting < var.uses.size()) {
      line += first_waiting == 0 && var.running_reads == 0 ? "waiting: " : "; waiting: ";
      for (std::size_t i = first_waiting; i < var.uses.size(); ++i) {
        if (i > first_waiting) line += ", ";
        line += ops_[var.uses[i].first].label + " (" + access_text(var.uses[i].second) + ")";
      }
    }
    return line + "\n";
  }

  // The first cycle of the wait-for graph, by depth-first search: each op on it and the index of its edge to the next
  // (the last one's leads back to the first); empty when there is none.
  std::vector<std::pair<std::size_t, std::size_t>> find_cycle() const {
    enum class Mark : std::uint8_t { kNew, kOnPath, kDone };
    std::vector<Mark> marks(ops_.size(), Mark::kNew);
    std::vector<std::pair<std::size_t, std::size_t>> path;  // (op, index of the edge taken next)
    for (std::size_t root = 0; root < ops_.size(); ++root) {
      if (marks[root] != Mark::kNew) continue;
      path.emplace_back(root, 0);
      marks[root] = Mark::kOnPath;
      while (!path.empty()) {
        auto& [op, edge] = path.back();
        if (edge == ops_[op].waits_on.size()) {
          marks[op] = Mark::kDone;
          path.pop_back();
          continue;
        }
        const std::size_t next = ops_[op].waits_on[edge++];
        if (marks[next] == Mark::kOnPath) {
          std::vector<std::pair<std::size_t, std::size_t>> cycle;
          bool in_cycle = false;
          for (const auto& [on_path, taken] : path) {
            in_cycle = in_cycle || on_path == next;
            if (in_cycle) cycle.emplace_back(on_path, taken - 1);
          }
          return cycle;
        }
        if (marks[next] == Mark::kNew) {
          marks[next] = Mark::kOnPath;
          path.emplace_back(next, 0);
        }
      }
    }
    return {};
  }

  // The first cycle in words; empty when there is none.
  std::string cycle_text() const {
    const std::vector<std::pair<std::size_t, std::size_t>> cycle = find_cycle();
    if (cycle.empty()) return {};
    std::string out = "  a wait cycle (these ops can never run):\n";
    for (const auto& [op, edge] : cycle) {
      out += "    " + ops_[op].label + " " + ops_[op].why[edge] + ops_[ops_[op].waits_on[edge]].label + "\n";
    }
    return out;
  }

 public:
  // The wait-for graph as DOT (Engine::InFlightReportDot): a node per op named, an edge from each op to each op it
  // waits for, labelled with the variable or fence; a fence no op seen signals is a node of its own; the first wait
  // cycle, if any, in red.
  std::string dot(std::size_t in_flight) {
    draw_edges();
    const std::vector<std::pair<std::size_t, std::size_t>> cycle = find_cycle();
    std::string out = "digraph depengine_in_flight {\n  label=" +
                      dot_quoted(std::to_string(in_flight) + " ops in flight" +
                                 (cycle.empty() ? std::string() : std::string(", a wait cycle (red)"))) +
                      ";\n  labelloc=t;\n  node [shape=box, style=rounded, fontname=\"Helvetica\", fontsize=11];\n"
                      "  edge [fontname=\"Helvetica\", fontsize=9];\n";
    auto on_cycle = [&](std::size_t op, std::size_t edge) {
      return std::any_of(cycle.begin(), cycle.end(), [&](const auto& step) {
        return step.first == op && (edge == SIZE_MAX || step.second == edge);
      });
    };
    for (std::size_t i = 0; i < ops_.size(); ++i) {
      const SeenOp& op = ops_[i];
      std::string label = op.name;
      if (!op.running.empty()) label += "\n" + op.running;
      if (op.completion_pending) label += "\nwaits for its Completion";
      out += "  op" + std::to_string(i) + " [label=" + dot_quoted(label);
      if (!op.running.empty()) out += ", style=\"rounded,bold\"";
      if (op.completion_pending) out += ", style=\"rounded,dashed\"";
      if (on_cycle(i, SIZE_MAX)) out += ", color=red, fontcolor=red";
      out += "];\n";
    }
    std::size_t fences = 0;
    for (std::size_t i = 0; i < ops_.size(); ++i) {
      const SeenOp& op = ops_[i];
      for (std::size_t e = 0; e < op.waits_on.size(); ++e) {
        out +=
            "  op" + std::to_string(i) + " -> op" + std::to_string(op.waits_on[e]) + " [label=" + dot_quoted(op.via[e]);
        if (on_cycle(i, e)) out += ", color=red, fontcolor=red, penwidth=2";
        out += "];\n";
      }
      for (const Fence& fence : op.unreached) {
        const std::string label = fence_label(fence);
        if (std::find(op.via.begin(), op.via.end(), label) != op.via.end()) continue;  // its signaller is drawn
        const std::string node = "fence" + std::to_string(fences++);
        out += "  " + node + " [shape=diamond, label=" + dot_quoted(fence_text(fence)) + "];\n";
        out += "  op" + std::to_string(i) + " -> " + node + " [label=\"waits for\"];\n";
      }
    }
    return out + "}\n";
  }

 private:
  const RunClock& clock_;
  std::vector<SeenOp> ops_;
  std::unordered_map<const void*, std::size_t> index_;  // an OpRecord or a GraphInstance
  std::vector<SeenVar> vars_;
};

}  // namespace

InFlightSnapshot build_in_flight_report(VarTable& vars, std::size_t in_flight, const RunClock& clock) {
  Builder builder(clock);
  vars.for_each([&builder](VarState& var) { builder.visit(var); });
  return builder.finish(in_flight);
}

std::string build_in_flight_dot(VarTable& vars, std::size_t in_flight, const RunClock& clock) {
  Builder builder(clock);
  vars.for_each([&builder](VarState& var) { builder.visit(var); });
  return builder.dot(in_flight);
}

void add_blocked(InFlightSnapshot& snapshot, const InFlight::Blocked& blocked, std::size_t in_flight, std::size_t max) {
  std::string state = "blocked at EngineOptions::max_in_flight (" + std::to_string(max) + ") for " +
                      duration_text(blocked.waited) + ", on thread " + blocked.thread + ": it waits for the " +
                      std::to_string(in_flight) + " ops in flight to fall to " + std::to_string(blocked.resumes_at);
  snapshot.text += "  " + blocked.what + " is " + state +
                   " (if that thread is the one to complete them, with a Completion or a fence, it never will: do that "
                   "from another thread, or raise the bound)\n";
  snapshot.ops.push_back(InFlightSnapshot::Op{blocked.what, std::move(state)});
}

std::string duration_text(std::chrono::nanoseconds duration) {
  const double seconds = std::chrono::duration<double>(duration).count();
  char text[32];
  if (seconds < 1) {
    std::snprintf(text, sizeof text, "%.0f ms", seconds * 1e3);
  } else if (seconds < 10) {
    std::snprintf(text, sizeof text, "%.1f s", seconds);
  } else if (seconds < 600) {
    std::snprintf(text, sizeof text, "%.0f s", seconds);
  } else {
    std::snprintf(text, sizeof text, "%.0f min", seconds / 60);
  }
  return text;
}

}  // namespace depengine::detail
