// CaptureRecorder (capture_recorder.h).
#include "python/capture_recorder.h"

#include <algorithm>
#include <utility>

namespace depengine::python {
namespace {

// The recorder of this thread's capture, if any: one at a time per thread, as in C++.
thread_local CaptureRecorder* t_recorder = nullptr;

}  // namespace

CaptureRecorder* CaptureRecorder::active(const EngineBinding& engine) noexcept {
  return t_recorder != nullptr && t_recorder->engine_ == &engine ? t_recorder : nullptr;
}

void CaptureRecorder::begin() {
  if (t_recorder != nullptr) throw Error("capture: this thread is already capturing (captures do not nest)");
  if (t_running_engine != nullptr) {
    throw Error("capture called from inside a running op: capture on the thread that replays, outside ops");
  }
  t_recorder = this;
  active_ = true;
}

void CaptureRecorder::end() noexcept {
  if (active_ && t_recorder == this) t_recorder = nullptr;
  active_ = false;
}

void CaptureRecorder::record(PythonOp op, PushArguments& arguments, bool async) {
  if (arguments.scope && std::find(scopes_.begin(), scopes_.end(), arguments.scope) == scopes_.end()) {
    scopes_.push_back(arguments.scope);
  }
  for (pybind11::handle list : arguments.lists) lists_.push_back(pybind11::reinterpret_borrow<pybind11::object>(list));
  entries_.push_back(Entry{std::move(op), std::move(arguments.reads), std::move(arguments.mutates),
                           std::move(arguments.options), async});
}

void CaptureRecorder::push_recorded(Engine& engine) {
  for (Entry& entry : entries_) {
    if (entry.async) {
      engine.PushAsync(std::move(entry.op), entry.reads, entry.mutates, entry.options);
    } else {
      engine.Push(std::move(entry.op), entry.reads, entry.mutates, entry.options);
    }
  }
}

}  // namespace depengine::python
