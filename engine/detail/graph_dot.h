// Graph DOT: a captured graph drawn for Graphviz (Graph::write_dot; docs/pictures.md, "Graphs as DOT").
//
// Each op is a node named after PushOptions::name ("op <i>" when it has none; <i> is its place in captured order).
// Each edge is a dependency among the graph's ops, found by the rule the engine orders ops by (a read follows the last
// write before it; a write follows that write and every read since), labelled with the variables that order the two
// ops ("v7": variable slot 7, "v7.2" its third life, as in traces; the engine keeps no other names for variables).
// Boundary variables are nodes of their own: "from before" (a house upside down) for a variable whose first use in the
// graph is a read, the value a replay reads from what was pushed before it, with an edge to each op that reads it
// first; "for after" (a house) for a variable the graph writes and leaves to what is pushed after it, with an edge
// from its last writer. A variable made and deleted inside the capture is the graph's own: never a boundary. The ops
// of a graph of stream ops are in one cluster, labelled with their device and stream, since a replay issues them all
// on one stream; a graph of CPU ops on more than one executor has a cluster per executor.
//
// Thread safety: reads only what capture made immutable (names, executors, variable lists), so it may run while
// replays of the graph are in flight. Allocation: freely; a diagnostic, off every op's path.
#pragma once

#include <ostream>

namespace depengine::detail {

class GraphPlan;
class StreamGraph;

void write_dot(const GraphPlan& plan, std::ostream& out);
void write_dot(const StreamGraph& graph, std::ostream& out);

}  // namespace depengine::detail
