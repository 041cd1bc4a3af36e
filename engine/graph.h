// Graph: a step of pushes captured once (Engine::Capture) and replayed any number of times (Engine::Replay).
//
//   depengine::Graph step = engine.Capture([&] {
//     engine.Push(forward, {w, x}, {y});
//     engine.Push(backward, {w, y}, {g});
//     engine.Push(update, {g}, {w});
//   });
//   for (int k = 0; k < steps; ++k) engine.Replay(step);  // as if the three were pushed again, at a fraction of the
//   cost
//
// A replay behaves as if the captured ops were pushed again, in captured order, with the same functions, variables
// and options: the same order against everything pushed before and after it on the variables it shares, the same
// errors (skipping, poisoning, no_skip, rethrow at waits), the same back-pressure, waits from inside ops refused the
// same way. The dependencies among the graph's own ops are found once, at capture. At replay the graph joins the queue
// of each variable it uses, so its first users of a variable wait only for what was pushed before on that variable,
// and later pushes on it wait only for the graph's last users of it, not for the whole graph. An op learns which
// replay runs it from RunContext::replay (0 for the first replay of its graph; replays from several threads are
// numbered in the order they take effect on the graph's variables).
//
// Graphs of stream ops. On an engine with a stream executor, a capture holds stream ops of one executor, one device
// and one kind of stream, and a replay is one stream op: it uses every variable of the graph (mutating those that any
// of its ops mutates), orders against pushes as that one op, and is issued on one stream with the device waits that
// op needs. Its issue runs the captured ops there in captured order: on host streams by calling their functions, with
// errors step by step as if each were pushed; on CUDA and HIP (StreamFacet::records_work) the first replay records the
// work the functions enqueue into a graph (stream capture) and every replay launches that graph, so later replays do
// not call the functions (their RunContext::replay is the recording replay's), an input error skips the whole replay,
// and a function that throws while being recorded, or makes its stream wait (StreamPlacement::wait_for), fails it.
// What only the one op can see is the whole replay's: a failed stream it waits for skips it whole, and a device
// failure while it runs reaches every variable it mutates. Versions count every captured mutation, run or skipped. A
// replay counts one op in flight, and takes its RunContext::replay number when it is issued (one skipped whole takes
// none).
//
// Variables of a graph. A variable made inside the capture (NewVariable in the body) is a variable like any other,
// which every replay uses: the captured functions hold its handle, so they name the same variable each time. One that
// the body also deletes (DeleteVariable in the body) belongs to the graph, like a step's temporary: each replay ends
// it where the deletion was captured, clearing the error the replay left on it (the next replay starts with a clean
// variable, as a pushed step would with a new one), and its deleter runs once, when the Graph is destroyed, as the
// variable's real deletion, ordered after every replay. Every handle to it is dead from the captured deletion on,
// outside the graph as inside it. So the objects the captured functions hold (made once, at capture) are released
// once, after the last replay: Buffers allocated and freed inside a capture keep their blocks from the first replay
// to the graph's end, and later replays do no pool work (buffers/buffer.h). Deleting a variable made before
// the capture inside it is an Error (every replay would delete it again).
//
// Cancel scopes. An op captured with PushOptions::scope belongs to that scope in every replay that names no scope of
// its own: the replay counts it in (WaitForScope waits for it), and once the scope is cancelled every later such
// replay completes it with Cancelled, unrun. A replay given ReplayOptions::scope puts every one of its ops in that
// scope instead, whatever scope they were captured with (one scope per epoch: a graph captured inside an epoch that was
// cancelled runs again in the next, replayed with the next epoch's scope). A graph of stream ops replays as one op: its
// ops must share one scope, or have none, when captured (a push that differs throws Error), and the replay's op
// belongs to the replay's scope if it names one, else to that one; cancelled before it is issued, the whole replay
// completes with Cancelled; once issued, its steps all run (they may poll RunContext::cancelled()).
//
// A Graph is a move-only handle. It belongs to the engine that captured it and names that engine's variables; it may
// be destroyed while replays of it are in flight (they keep what they need). Replaying it after a variable it names
// was deleted is an Error. Destroy it before its engine, or the variables it owns die with the engine and their
// deleters never run (as for any variable not deleted before ~Engine); the engine's destruction then destroys the
// graph's functions before it stops its executors.
//
// Thread safety: Replay(graph) from any thread, concurrently, even of the same graph. Cost: see Engine::Replay.
#pragma once

#include <cstddef>
#include <iosfwd>
#include <memory>
#include <utility>

namespace depengine {

class CancelScope;

// Options of one replay (Engine::Replay).
struct ReplayOptions {
  // The CancelScope every op of this replay belongs to, instead of the scopes its ops were captured with (see "Cancel
  // scopes" above); null: those. Borrowed for the call: the replay's ops keep the scope's state alive themselves.
  const CancelScope* scope = nullptr;
};

namespace detail {
class GraphPlan;
class StreamGraph;
class GraphLifetime;
class GraphRunner;
}  // namespace detail

class Graph {
 public:
  Graph() noexcept;  // an empty graph: replaying it is an Error
  // Moves the graph; the moved-from one is empty.
  Graph(Graph&&) noexcept;
  Graph& operator=(Graph&&) noexcept;  // deletes the variables this graph owned first
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  ~Graph();

  // The number of ops a replay runs (0 for an empty graph).
  [[nodiscard]] std::size_t size() const noexcept;
  [[nodiscard]] bool empty() const noexcept { return size() == 0; }

  // Writes the graph as a Graphviz DOT digraph to `out` (render it with `dot -Tsvg` or `dot -Tpng`): a node per op,
  // named after PushOptions::name ("op <i>", its place in captured order, when it has none); an edge per dependency
  // among the graph's ops, labelled with the variables that order them ("v7", as traces name variables); the
  // boundary variables as nodes of their own, "from before" (read by the graph before it writes them, so a replay
  // waits for what was pushed before it) and "for after" (written by it for what is pushed after); the ops of a graph
  // of stream ops in a cluster for their device and stream. An empty graph writes an empty digraph.
  // docs/pictures.md shows one. Any thread, also while replays of the graph are in flight; allocates. Writes through
  // `out`, whose errors are the stream's (its state, or its exceptions if it enables them).
  void write_dot(std::ostream& out) const;

 private:
  friend class detail::GraphRunner;
  Graph(std::shared_ptr<detail::GraphPlan> plan, std::shared_ptr<detail::StreamGraph> streams,
        std::unique_ptr<detail::GraphLifetime> lifetime) noexcept;

  std::shared_ptr<detail::GraphPlan> plan_;          // a graph of CPU ops
  std::shared_ptr<detail::StreamGraph> streams_;     // or a graph of stream ops (at most one of the two is set)
  std::unique_ptr<detail::GraphLifetime> lifetime_;  // last: destroyed first, while plan_ and streams_ are alive
};

}  // namespace depengine
