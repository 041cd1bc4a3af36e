#include <stdexcept>
#include <string>

#include <depengine/executors/executor.h>

namespace depengine {

void Executor::replay_recorded(const StreamPlacement& /*where*/, std::unique_ptr<RecordedOps>& /*recorded*/,
                               void (* /*enqueue*/)(void* context), void* /*context*/) {
  throw std::logic_error("Executor::replay_recorded: executor '" + std::string(name()) +
                         "' does not record work (records_work() is false)");
}

}  // namespace depengine
