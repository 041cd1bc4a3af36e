#include <utility>

#include <depengine/engine/detail/engine_core.h>
#include <depengine/engine/detail/graph_lifetime.h>
#include <depengine/engine/detail/stream_graph.h>

namespace depengine::detail {

GraphLifetime::GraphLifetime(EngineCore& core, std::vector<OwnedVar>& owned) : core_(&core) {
  hook_ = core.diagnostics().at_shutdown([this] { drop(); });
  owned_.swap(owned);
}

GraphLifetime::~GraphLifetime() {
  // True: the engine has not begun calling its shutdown hooks, so it is alive (and the hook will not run).
  if (hook_.cancel()) core_->graphs().delete_all_owned(owned_);
}

void GraphLifetime::drop() noexcept {
  if (plan_ != nullptr) plan_->drop_functions();
  if (streams_ != nullptr) streams_->drop_functions();
  owned_.clear();
}

}  // namespace depengine::detail
