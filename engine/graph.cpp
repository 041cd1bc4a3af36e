#include <ostream>

#include <depengine/engine/detail/graph_dot.h>
#include <depengine/engine/detail/graph_lifetime.h>
#include <depengine/engine/detail/graph_plan.h>
#include <depengine/engine/detail/stream_graph.h>
#include <depengine/engine/graph.h>

namespace depengine {

Graph::Graph(std::shared_ptr<detail::GraphPlan> plan, std::shared_ptr<detail::StreamGraph> streams,
             std::unique_ptr<detail::GraphLifetime> lifetime) noexcept
    : plan_(std::move(plan)), streams_(std::move(streams)), lifetime_(std::move(lifetime)) {}

Graph::Graph() noexcept = default;
Graph::Graph(Graph&&) noexcept = default;

Graph& Graph::operator=(Graph&& other) noexcept {
  if (this != &other) {
    lifetime_.reset();  // while this graph's plan is alive (graph_lifetime.h)
    plan_ = std::move(other.plan_);
    streams_ = std::move(other.streams_);
    lifetime_ = std::move(other.lifetime_);
  }
  return *this;
}

Graph::~Graph() = default;

std::size_t Graph::size() const noexcept {
  return plan_ != nullptr ? plan_->size() : streams_ != nullptr ? streams_->size() : 0;
}

void Graph::write_dot(std::ostream& out) const {
  if (plan_ != nullptr) {
    detail::write_dot(*plan_, out);
  } else if (streams_ != nullptr) {
    detail::write_dot(*streams_, out);
  } else {
    out << "digraph depengine_graph {\n}\n";
  }
}

}  // namespace depengine
