#include "engine/graph.h"

#include "engine/detail/graph_plan.h"
#include "engine/detail/stream_graph.h"

namespace depengine {

Graph::~Graph() = default;

std::size_t Graph::size() const noexcept {
  return plan_ != nullptr ? plan_->size() : streams_ != nullptr ? streams_->size() : 0;
}

}  // namespace depengine
