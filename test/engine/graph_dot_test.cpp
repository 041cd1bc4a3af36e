// Pictures (docs/pictures.md, "Graphs as DOT"): Graph::write_dot and Engine::InFlightReportDot, parsed back; and, where
// Graphviz is installed, rendered by `dot -Tsvg` (the hidden tag [dot], run by the ctest engine_dot_renders).
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <utility>

#include <depengine/engine/engine.h>
#include <depengine/frontier/timeline.h>

#include "test/engine/test_support.h"
#include "test/executors/executor_factories.h"

namespace depengine::test {
namespace {

// A DOT digraph as the engine writes it, read back: node id -> its label (or attributes), edge -> its attributes.
struct ParsedDot {
  std::map<std::string, std::string> nodes;                          // id -> the attribute list
  std::map<std::pair<std::string, std::string>, std::string> edges;  // (from, to) -> the attribute list
  std::map<std::string, std::string> labels;                         // id -> label
  int clusters = 0;

  [[nodiscard]] std::string id_of(const std::string& label) const {
    for (const auto& [id, text] : labels) {
      if (text == label) return id;
    }
    return "(no node labelled '" + label + "')";
  }
  // The label of the edge between the nodes labelled `from` and `to`, or "(none)".
  [[nodiscard]] std::string edge_label(const std::string& from, const std::string& to) const {
    const auto found = edges.find({id_of(from), id_of(to)});
    if (found == edges.end()) return "(none)";
    std::smatch label;
    return std::regex_search(found->second, label, std::regex(R"#(label="([^"]*)")#")) ? label[1].str() : "";
  }
};

ParsedDot parse_dot(const std::string& dot) {
  ParsedDot parsed;
  REQUIRE(dot.rfind("digraph ", 0) == 0);
  REQUIRE(dot.substr(dot.size() - 2) == "}\n");
  const std::regex edge(R"(^\s*(\w+) -> (\w+)(?: \[(.*)\])?;$)");
  const std::regex node(R"(^\s*(\w+) \[(.*)\];$)");
  const std::regex label(R"#(label="((?:[^"\\]|\\.)*)")#");
  std::istringstream lines(dot);
  for (std::string line; std::getline(lines, line);) {
    std::smatch match;
    if (std::regex_match(line, match, edge)) {
      parsed.edges[{match[1].str(), match[2].str()}] = match[3].str();
    } else if (std::regex_match(line, match, node) && match[1] != "node" && match[1] != "edge") {
      parsed.nodes[match[1].str()] = match[2].str();
      const std::string attributes = match[2].str();
      std::smatch text;
      if (std::regex_search(attributes, text, label)) parsed.labels[match[1].str()] = text[1].str();
    } else if (line.find("subgraph cluster_") != std::string::npos) {
      ++parsed.clusters;
    }
  }
  return parsed;
}

// One training step's shape: load, forward, backward, update, over variables made before the capture.
Graph capture_step(Engine& engine, const Var& w, const Var& x, const Var& y, const Var& g) {
  return engine.Capture([&] {
    engine.Push([] {}, {}, {x}, {.name = "load"});
    engine.Push([] {}, {w, x}, {y}, {.name = "forward"});
    engine.Push([] {}, {w, y}, {g}, {.name = "backward"});
    engine.Push([] {}, {g}, {w}, {.name = "update"});
  });
}

std::string dot_of(const Graph& graph) {
  std::ostringstream out;
  graph.write_dot(out);
  return out.str();
}

std::string label_of(const char* var) { return var; }

TEST_CASE("a captured graph writes its ops, its edges by variable and its boundary as DOT", "[engine][graph][dot]") {
  Engine engine(threadpool_factory(2).options());
  const Var w = engine.NewVariable(), x = engine.NewVariable(), y = engine.NewVariable(), g = engine.NewVariable();
  const Graph step = capture_step(engine, w, x, y, g);  // slots 0 to 3: v0 = w, v1 = x, v2 = y, v3 = g
  const std::string dot = dot_of(step);
  CAPTURE(dot);
  const ParsedDot parsed = parse_dot(dot);
  // 4 ops; w read from before (by forward and backward); w, x, y, g written for after.
  CHECK(parsed.nodes.size() == 9);
  CHECK(parsed.edges.size() == 10);
  CHECK(parsed.clusters == 0);  // one executor
  CHECK(parsed.edge_label("load", "forward") == "v1");
  CHECK(parsed.edge_label("forward", "backward") == "v2");
  CHECK(parsed.edge_label("forward", "update") == "v0");
  CHECK(parsed.edge_label("backward", "update") == "v0 v3");  // in the order of the variables' slots
  CHECK(parsed.edge_label("load", "update") == "(none)");
  CHECK(parsed.edge_label("v0\\nfrom before", "forward").empty());
  CHECK(parsed.edge_label("v0\\nfrom before", "backward").empty());
  CHECK(parsed.edge_label("v0\\nfrom before", "load") == "(none)");
  for (const auto& [var, writer] : {std::pair{"v0", "update"}, {"v1", "load"}, {"v2", "forward"}, {"v3", "backward"}}) {
    CHECK(parsed.edge_label(writer, label_of(var) + "\\nfor after").empty());
  }
  CHECK(parsed.nodes.at(parsed.id_of("v0\\nfrom before")).find("shape=invhouse") != std::string::npos);
  CHECK(parsed.nodes.at(parsed.id_of("v1\\nfor after")).find("shape=house") != std::string::npos);
  engine.Replay(step);
  engine.WaitForAll();
}

TEST_CASE("a graph's own variables are no boundary, and unnamed ops are numbered", "[engine][graph][dot]") {
  Engine engine(inline_factory().options());
  const Var in = engine.NewVariable();  // v0
  const Graph step = engine.Capture([&] {
    const Var temp = engine.NewVariable();  // v1: made and deleted in the capture, the graph's
    engine.Push([] {}, {in}, {temp});
    engine.Push([] {}, {temp}, {}, {.name = "use \"temp\""});
    engine.DeleteVariable(temp, [] {}, {.name = "free"});
  });
  const std::string dot = dot_of(step);
  CAPTURE(dot);
  const ParsedDot parsed = parse_dot(dot);
  CHECK(parsed.nodes.size() == 4);  // 3 ops and v0 from before: v1 is the graph's
  CHECK(parsed.edges.size() == 4);  // the deletion follows the last write and the read since (the queue's rule)
  CHECK(parsed.edge_label("op 0", "use \\\"temp\\\"") == "v1.1");
  CHECK(parsed.edge_label("use \\\"temp\\\"", "free\\n(ends v1.1)") == "v1.1");
  CHECK(parsed.edge_label("op 0", "free\\n(ends v1.1)") == "v1.1");
  CHECK(parsed.edge_label("v0\\nfrom before", "op 0").empty());
}

TEST_CASE("a captured group's members are drawn unordered among themselves", "[engine][graph][dot][accumulate]") {
  Engine engine(inline_factory().options());
  const Var sum = engine.NewVariable();  // v0
  const Graph step = engine.Capture([&] {
    engine.Push([] {}, {}, {sum}, {.name = "zero"});
    engine.PushAccumulate([] {}, {}, {}, {sum}, {.name = "add 1"});
    engine.PushAccumulate([] {}, {}, {}, {sum}, {.name = "add 2"});
    engine.Push([] {}, {sum}, {}, {.name = "use"});
  });
  const std::string dot = dot_of(step);
  CAPTURE(dot);
  const ParsedDot parsed = parse_dot(dot);
  CHECK(parsed.edge_label("zero", "add 1") == "v0");
  CHECK(parsed.edge_label("zero", "add 2") == "v0");
  CHECK(parsed.edge_label("add 1", "add 2") == "(none)");  // a group: any order
  CHECK(parsed.edge_label("add 1", "use") == "v0");
  CHECK(parsed.edge_label("add 2", "use") == "v0");
  // Those four, and one from each member to v0's node for after the graph: a later use follows both.
  CHECK(parsed.edges.size() == 6);
}

TEST_CASE("a graph of stream ops is drawn in one cluster for its stream", "[engine][graph][dot][streams]") {
  Engine engine(host_stream_factory().options());
  const Var a = engine.NewVariable(), b = engine.NewVariable();
  const Graph step = engine.Capture([&] {
    engine.Push([] {}, {a}, {b}, {.name = "copy"});
    engine.Push([] {}, {b}, {a}, {.name = "scale"});
  });
  const std::string dot = dot_of(step);
  CAPTURE(dot);
  const ParsedDot parsed = parse_dot(dot);
  CHECK(parsed.clusters == 1);
  CHECK_THAT(dot, Catch::Contains("label=\"device 0, compute stream (chosen at each replay)\""));
  CHECK(parsed.nodes.size() == 5);  // 2 ops; a from before; a and b for after
  CHECK(parsed.edge_label("copy", "scale") == "v0 v1");
}

TEST_CASE("an empty graph writes an empty digraph", "[engine][graph][dot]") {
  const ParsedDot parsed = parse_dot(dot_of(Graph()));
  CHECK(parsed.nodes.empty());
  CHECK(parsed.edges.empty());
}

// The scenario of in_flight_report_test.cpp: `waiter` holds v and waits on t; `signaller` queued behind it on v.
TEST_CASE("the in-flight report's DOT draws the wait cycle in red", "[engine][report][dot][fences]") {
  Watchdog watchdog("in-flight DOT");
  Engine engine(threadpool_factory(2).options());
  Timeline t;
  const Var v = engine.NewVariable(), unrelated = engine.NewVariable();
  engine.Push([] {}, {}, {v}, {.name = "waiter", .wait_fences = {{&t, 1}}});
  engine.Push([] {}, {}, {v}, {.name = "signaller", .signal_fences = {{&t, 1}}});
  engine.Push([] {}, {v}, {unrelated}, {.name = "bystander"});
  const std::string dot = engine.InFlightReportDot();
  CAPTURE(dot);
  const ParsedDot parsed = parse_dot(dot);
  CHECK(parsed.nodes.size() == 3);
  CHECK(parsed.edges.size() == 3);
  const std::string waiter = parsed.id_of("op #1 'waiter'"), signaller = parsed.id_of("op #2 'signaller'"),
                    bystander = parsed.id_of("op #3 'bystander'");
  CHECK(parsed.edge_label("op #2 'signaller'", "op #1 'waiter'") == "v0");
  CHECK(parsed.edge_label("op #1 'waiter'", "op #2 'signaller'") == "fence value 1 (at 0)");
  CHECK(parsed.edge_label("op #3 'bystander'", "op #2 'signaller'") == "v0");
  CHECK_THAT(parsed.edges.at({signaller, waiter}), Catch::Contains("color=red"));
  CHECK_THAT(parsed.edges.at({waiter, signaller}), Catch::Contains("color=red"));
  CHECK_THAT(parsed.edges.at({bystander, signaller}), !Catch::Contains("red"));
  CHECK_THAT(parsed.nodes.at(waiter), Catch::Contains("color=red"));
  CHECK_THAT(parsed.nodes.at(bystander), !Catch::Contains("red"));
  CHECK_THAT(dot, Catch::Contains("a wait cycle (red)"));
  t.signal_external(1);
  engine.WaitForAll();
  const ParsedDot after = parse_dot(engine.InFlightReportDot());
  CHECK(after.nodes.empty());
  CHECK(after.edges.empty());
}

TEST_CASE("the in-flight report's DOT draws a fence nobody signals as a node", "[engine][report][dot][fences]") {
  Watchdog watchdog("in-flight DOT without a cycle");
  Engine engine(inline_factory().options());
  Timeline t;
  const Var v = engine.NewVariable();
  engine.Push([] {}, {}, {v}, {.name = "stuck", .wait_fences = {{&t, 5}}});
  engine.Push([] {}, {v}, {}, {.name = "reader"});
  const std::string dot = engine.InFlightReportDot();
  CAPTURE(dot);
  const ParsedDot parsed = parse_dot(dot);
  CHECK(parsed.nodes.size() == 3);  // the two ops and the fence
  CHECK(parsed.edge_label("op #2 'reader'", "op #1 'stuck'") == "v0");
  CHECK_THAT(dot, !Catch::Contains("red"));
  CHECK_THAT(dot, Catch::Contains("shape=diamond"));
  t.signal_external(5);
  engine.WaitForAll();
}

// Hidden: run by the ctest engine_dot_renders, which skips (SKIP_RETURN_CODE) where Graphviz's dot is not installed.
// The files go to the temporary directory (named for this process) and are removed once read: a run from the source
// tree leaves nothing in it.
void render(const std::string& dot, const std::string& name) {
  const std::filesystem::path stem =
      std::filesystem::temp_directory_path() / ("depengine-" + name + "-" + std::to_string(::getpid()));
  const std::string dot_path = stem.string() + ".dot", svg_path = stem.string() + ".svg";
  {
    std::ofstream file(dot_path);
    file << dot;
  }
  const std::string command = "dot -Tsvg '" + dot_path + "' -o '" + svg_path + "'";
  CAPTURE(command);
  const int status = std::system(command.c_str());
  std::string first;
  {
    std::ifstream svg(svg_path);
    std::getline(svg, first);
  }
  std::filesystem::remove(dot_path);
  std::filesystem::remove(svg_path);
  REQUIRE(status == 0);
  CHECK_THAT(first, Catch::Contains("<?xml"));
}

TEST_CASE("dot -Tsvg accepts the DOT of a graph and of an in-flight report", "[.][dot]") {
  Engine engine(host_stream_factory().options());
  const Var w = engine.NewVariable(), x = engine.NewVariable(), y = engine.NewVariable(), g = engine.NewVariable();
  render(dot_of(capture_step(engine, w, x, y, g)), "graph_dot_test_step");
  Timeline t;
  engine.Push([] {}, {}, {w}, {.name = "waiter \"quoted\"", .wait_fences = {{&t, 1}}});
  engine.Push([] {}, {}, {w}, {.name = "signaller", .signal_fences = {{&t, 1}}});
  render(engine.InFlightReportDot(), "graph_dot_test_cycle");
  t.signal_external(1);
  engine.WaitForAll();
}

}  // namespace
}  // namespace depengine::test
