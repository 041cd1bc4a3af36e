#include <stdexcept>

#include <depengine/executors/executor.h>

namespace depengine {

void StreamFacet::replay_recorded(const StreamPlacement& /*where*/, std::unique_ptr<RecordedOps>& /*recorded*/,
                                  void (* /*enqueue*/)(void* context), void* /*context*/) {
  throw std::logic_error(
      "StreamFacet::replay_recorded: this stream executor does not record work (records_work() is "
      "false)");
}

}  // namespace depengine
