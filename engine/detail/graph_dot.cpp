// Graph DOT (graph_dot.h): a captured graph's ops, the dependencies among them and its boundary variables, for
// Graphviz.
#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <depengine/engine/detail/dot_text.h>
#include <depengine/engine/detail/graph_dot.h>
#include <depengine/engine/detail/graph_plan.h>
#include <depengine/engine/detail/stream_graph.h>

namespace depengine::detail {
namespace {

// An op as the picture needs it, from a GraphPlan or a StreamGraph.
struct DotOp {
  struct Use {
    const VarState* var;
    std::uint32_t tag;
    Access access;
  };
  std::string label;
  std::string group;  // its cluster's label (empty: none)
  std::vector<Use> uses;
};

// A variable's label, as traces write it: "v<slot>", with ".<n>" for the slot's n-th life.
std::string var_label(const VarState* var, std::uint32_t tag) {
  std::string label = "v";  // not "v" + to_string(): GCC 12 warns of a false overlap there (-Wrestrict)
  label += std::to_string(var->slot);
  if (tag != 0) {
    label += '.';
    label += std::to_string(tag);
  }
  return label;
}

std::string op_label(std::string_view name, std::uint32_t index) {
  if (!name.empty()) return std::string(name);
  std::string label = "op ";  // appended, as in var_label()
  label += std::to_string(index);
  return label;
}

// "<label>\n(ends <var>)", "<var>\nfrom before": a node's label of two lines, appended as in var_label().
std::string two_lines(std::string_view first, std::string_view second) {
  std::string label(first);
  label += '\n';
  label += second;
  return label;
}

// What the walk keeps per variable, in captured order (the planning rule of graph_plan.cpp, with the variables kept;
// a group of accumulations stands where one write would, its members not ordered among themselves).
struct VarWalk {
  std::uint32_t tag = 0;
  std::vector<std::uint32_t> last_writer;    // the last write, or every member of the last group
  std::vector<std::uint32_t> head_readers;   // reads before the first write
  std::vector<std::uint32_t> readers_since;  // reads since the last write
  std::vector<std::uint32_t> before_group;   // what the open group's members follow
  bool group_open = false;                   // the last use was an accumulation
};

void write_ops(const std::vector<DotOp>& ops, const std::unordered_set<const VarState*>& owned, bool always_cluster,
               std::ostream& out) {
  std::vector<const VarState*> order;  // the variables, in order of first use
  std::unordered_map<const VarState*, VarWalk> walks;
  std::map<std::pair<std::uint32_t, std::uint32_t>, std::vector<std::string>> edges;  // (from, to) -> variables
  for (std::uint32_t i = 0; i < ops.size(); ++i) {
    for (const DotOp::Use& use : ops[i].uses) {
      const auto [it, fresh] = walks.try_emplace(use.var);
      VarWalk& walk = it->second;
      if (fresh) {
        order.push_back(use.var);
        walk.tag = use.tag;
      }
      auto edge = [&](std::uint32_t from) {
        std::vector<std::string>& vars = edges[{from, i}];
        std::string label = var_label(use.var, use.tag);
        if (vars.empty() || vars.back() != label) vars.push_back(std::move(label));
      };
      if (use.access == Access::kRead) {
        for (const std::uint32_t writer : walk.last_writer) edge(writer);
        if (walk.last_writer.empty()) walk.head_readers.push_back(i);
        walk.readers_since.push_back(i);
        walk.group_open = false;
        continue;
      }
      if (use.access == Access::kAccumulate) {
        if (!walk.group_open) {  // opens a group: its members follow what one write would
          walk.before_group = std::move(walk.last_writer);
          walk.before_group.insert(walk.before_group.end(), walk.readers_since.begin(), walk.readers_since.end());
          walk.last_writer.clear();
          walk.readers_since.clear();
          walk.group_open = true;
        }
        for (const std::uint32_t before : walk.before_group) edge(before);
        walk.last_writer.push_back(i);
        continue;
      }
      for (const std::uint32_t writer : walk.last_writer) edge(writer);
      for (const std::uint32_t reader : walk.readers_since) {
        if (reader != i) edge(reader);
      }
      walk.readers_since.clear();
      walk.last_writer.assign(1, i);
      walk.group_open = false;
    }
  }

  out << "digraph depengine_graph {\n"
         "  node [shape=box, style=rounded, fontname=\"Helvetica\", fontsize=11];\n"
         "  edge [fontname=\"Helvetica\", fontsize=9];\n";
  std::vector<std::string> groups;
  for (const DotOp& op : ops) {
    if (std::find(groups.begin(), groups.end(), op.group) == groups.end()) groups.push_back(op.group);
  }
  const bool clustered = always_cluster || groups.size() > 1;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const char* indent = clustered ? "    " : "  ";
    if (clustered) out << "  subgraph cluster_" << g << " {\n    label=" << dot_quoted(groups[g]) << ";\n";
    for (std::uint32_t i = 0; i < ops.size(); ++i) {
      if (ops[i].group == groups[g]) out << indent << "op" << i << " [label=" << dot_quoted(ops[i].label) << "];\n";
    }
    if (clustered) out << "  }\n";
  }
  for (const auto& [ends, vars] : edges) {
    std::string label;
    for (const std::string& var : vars) {
      if (!label.empty()) label += ' ';
      label += var;
    }
    out << "  op" << ends.first << " -> op" << ends.second << " [label=" << dot_quoted(label) << "];\n";
  }
  // Boundary variables: what a replay reads from before it, and what it leaves for after it.
  for (std::size_t v = 0; v < order.size(); ++v) {
    if (owned.contains(order[v])) continue;
    const VarWalk& walk = walks[order[v]];
    const std::string label = var_label(order[v], walk.tag);
    if (!walk.head_readers.empty()) {
      out << "  in" << v << " [label=" << dot_quoted(two_lines(label, "from before"))
          << ", shape=invhouse, style=dashed];\n";
      for (const std::uint32_t reader : walk.head_readers) out << "  in" << v << " -> op" << reader << ";\n";
    }
    if (!walk.last_writer.empty()) {
      out << "  out" << v << " [label=" << dot_quoted(two_lines(label, "for after"))
          << ", shape=house, style=dashed];\n";
      for (const std::uint32_t writer : walk.last_writer) out << "  op" << writer << " -> out" << v << ";\n";
    }
  }
  out << "}\n";
}

}  // namespace

void write_dot(const GraphPlan& plan, std::ostream& out) {
  std::vector<DotOp> ops(plan.size());
  std::unordered_set<const VarState*> owned;
  for (std::uint32_t i = 0; i < plan.size(); ++i) {
    const GraphPlan::Op& op = plan.op(i);
    DotOp& dot = ops[i];
    dot.label = op_label(plan.name_of(op), i);
    dot.group = op.executor != nullptr ? std::string(op.executor->name()) : std::string();
    const GraphPlan::Use* uses = plan.uses(op);
    for (std::uint32_t u = 0; u < op.uses.end - op.uses.begin; ++u) {
      dot.uses.push_back({uses[u].var, uses[u].tag, uses[u].access});
      if (uses[u].clears) {  // a captured deletion: the variable is the graph's (graph.h, "Variables of a graph")
        owned.insert(uses[u].var);
        dot.label = two_lines(dot.label, "(ends " + var_label(uses[u].var, uses[u].tag) + ")");
      }
    }
  }
  write_ops(ops, owned, false, out);
}

void write_dot(const StreamGraph& graph, std::ostream& out) {
  const std::vector<StreamGraph::Step>& steps = graph.steps();
  const Context& where = graph.options().context;
  static constexpr const char* kKinds[] = {"compute", "copy", "collective"};
  std::string group = "device " + std::to_string(where.device) + ", " +
                      kKinds[static_cast<std::size_t>(where.stream_kind)] + " stream " +
                      (where.stream >= 0 ? std::to_string(where.stream) : std::string("(chosen at each replay)"));
  std::vector<DotOp> ops(steps.size());
  std::unordered_set<const VarState*> owned;
  for (std::uint32_t i = 0; i < steps.size(); ++i) {
    const StreamGraph::Step& step = steps[i];
    DotOp& dot = ops[i];
    dot.label = op_label(step.name_view(), i);
    dot.group = group;
    const StreamGraph::Use* uses = graph.step_uses(step);
    for (std::uint32_t u = 0; u < step.uses_end - step.uses_begin; ++u) {
      dot.uses.push_back({uses[u].var, uses[u].tag, uses[u].access});
    }
    if (step.ends_var) {  // its one use: the variable is the graph's
      owned.insert(uses[0].var);
      dot.label = two_lines(dot.label, "(ends " + var_label(uses[0].var, uses[0].tag) + ")");
    }
  }
  write_ops(ops, owned, true, out);
}

}  // namespace depengine::detail
