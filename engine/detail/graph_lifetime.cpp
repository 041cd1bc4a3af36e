#include "engine/detail/graph_lifetime.h"

#include <cstdio>
#include <utility>

#include "engine/detail/engine_core.h"
#include "engine/detail/stream_graph.h"

namespace depengine::detail {

GraphLifetime::GraphLifetime(EngineCore& core, std::vector<OwnedVar> owned) : core_(&core), owned_(std::move(owned)) {
  hook_ = core.at_shutdown([this] { drop(); });
}

GraphLifetime::~GraphLifetime() {
  // True: the engine has not begun calling its shutdown hooks, so it is alive (and the hook will not run).
  if (!hook_.cancel()) return;
  for (OwnedVar& owned : owned_) {
    try {
      core_->delete_owned(owned);
    } catch (const std::exception& e) {  // the engine is being destroyed on another thread: the variable dies with it
      std::fprintf(stderr, "depengine: ~Graph: %s\n", e.what());
    }
  }
}

void GraphLifetime::drop() noexcept {
  if (plan_ != nullptr) plan_->drop_functions();
  if (streams_ != nullptr) streams_->drop_functions();
  owned_.clear();
}

}  // namespace depengine::detail
