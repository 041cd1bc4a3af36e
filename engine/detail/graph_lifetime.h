// GraphLifetime: what ends with a Graph handle (graph.h): the deletion of the variables the graph owns, and, when the
// engine goes first, the graph's functions.
//
// ~GraphLifetime, on the thread that destroys (or assigns over) the Graph, pushes the real DeleteVariable of each
// variable the graph owns (graph.h, "Variables of a graph") with its captured deleter and options, ordered after every
// replay pushed before it, as any deletion is. If the engine is destroyed first, its shutdown hook (after every op has
// completed, before the executors stop) drops what the graph holds that may hold the executors' resources: its ops'
// functions, its recorded device work and its deleters (Buffers' device pools); the variables die with the engine and
// their deleters never run, as for any variable not deleted before ~Engine.
//
// Thread safety: one object per Graph handle, used by the thread that owns the handle; the hook may run on the thread
// destroying the engine, and the destructor waits for it (ShutdownHook::cancel). Destroying the Graph while another
// thread destroys its engine is undefined, as for any use of an engine being destroyed: destroy graphs first.
// Failure: a deletion the engine refuses is reported on stderr; nothing throws.
#pragma once

#include <vector>

#include <depengine/engine/detail/graph_plan.h>
#include <depengine/engine/engine_hook.h>

namespace depengine::detail {

class EngineCore;
class StreamGraph;

class GraphLifetime {
 public:
  // For a graph captured by `core`, which owns `owned` (taken from the vector once nothing can throw; left there if
  // the constructor throws).
  GraphLifetime(EngineCore& core, std::vector<OwnedVar>& owned);
  // The graph's plan or graph of stream ops (one of them), which the Graph handle holds for at least as long as this
  // object lives.
  void hold(GraphPlan* plan, StreamGraph* streams) noexcept {
    plan_ = plan;
    streams_ = streams;
  }
  ~GraphLifetime();
  GraphLifetime(const GraphLifetime&) = delete;
  GraphLifetime& operator=(const GraphLifetime&) = delete;

 private:
  void drop() noexcept;  // the engine is being destroyed: see the file comment

  EngineCore* const core_;
  std::vector<OwnedVar> owned_;
  GraphPlan* plan_ = nullptr;
  StreamGraph* streams_ = nullptr;
  ShutdownHook hook_;  // last: cancelled first
};

}  // namespace depengine::detail
