// NvtxObserver: an NVTX process range per op, from its start to its end.
#include <nvtx3/nvToolsExt.h>

#include <string>
#include <string_view>

#include <depengine/engine/nvtx_observer.h>

namespace depengine {
namespace {

// The calling thread's copy of an op's name, NUL-terminated as NVTX wants it; reused from op to op.
thread_local std::string t_name;

}  // namespace

void NvtxObserver::OnStart(const OpEvent& op) noexcept {
  nvtxRangeId_t range = 0;
  try {
    t_name.assign(op.name.empty() ? std::string_view("(unnamed)") : op.name);
    range = nvtxRangeStartA(t_name.c_str());
    const std::lock_guard lock(mutex_);
    open_.emplace(op.id, range);
    ++started_;
  } catch (...) {  // out of memory: the op gets no range (one started is ended at once)
    if (range != 0) nvtxRangeEnd(range);
  }
}

void NvtxObserver::OnEnd(const OpEvent& op) noexcept {
  nvtxRangeId_t range = 0;
  {  // an op that did not run (skipped, cancelled) has no range
    const std::lock_guard lock(mutex_);
    const auto found = open_.find(op.id);
    if (found == open_.end()) return;
    range = found->second;
    open_.erase(found);
  }
  nvtxRangeEnd(range);
}

std::size_t NvtxObserver::OpenRanges() const {
  const std::lock_guard lock(mutex_);
  return open_.size();
}

std::uint64_t NvtxObserver::RangesStarted() const {
  const std::lock_guard lock(mutex_);
  return started_;
}

}  // namespace depengine
