// CaptureRecorder: how `with engine.capture() as graph:` captures the pushes of its block.
//
// Engine::Capture(body) captures what a C++ body pushes, but a with-block is not a function the binding can call. So
// while the block runs, the binding's pushes from this thread on this engine are recorded here instead of pushed,
// and at the block's end Engine::Capture replays the records into the engine as its body: the Graph holds exactly
// those pushes, in order, with the same checks. Waits, replays and variable deletions inside the block raise
// depengine.Error (as Capture's body would). An exception leaving the block drops the records: nothing is captured.
//
// Thread safety: a recorder belongs to the thread that entered it; pushes from other threads are not captured (as in
// C++). Nested captures on one thread raise depengine.Error.
#pragma once

#include <vector>

#include <depengine/engine/engine.h>

#include "python/engine_binding.h"
#include "python/python_op.h"

namespace depengine::python {

class CaptureRecorder {
 public:
  explicit CaptureRecorder(const EngineBinding& engine) noexcept : engine_(&engine) {}
  CaptureRecorder(const CaptureRecorder&) = delete;
  CaptureRecorder& operator=(const CaptureRecorder&) = delete;
  ~CaptureRecorder() { end(); }

  // The recorder capturing `engine`'s pushes on this thread, or null.
  [[nodiscard]] static CaptureRecorder* active(const EngineBinding& engine) noexcept;
  void begin();              // Error if this thread already captures
  void end() noexcept;       // stops recording (the records stay for push_recorded)
  void discard() noexcept {  // requires the GIL
    entries_.clear();
    lists_.clear();
  }

  void record(PythonOp op, PushArguments& arguments, bool async);
  // Engine::Capture's body: pushes every record, in order (the GIL released).
  void push_recorded(Engine& engine);
  // The user's scopes the records name (a replay without a scope of its own puts their ops in them).
  [[nodiscard]] const std::vector<ScopeHandle>& scopes() const noexcept { return scopes_; }
  // The records' reads and mutates lists, for the Graph to keep: the Arrays they name live as long as it does (a
  // replay of a graph whose variable was deleted is an Error).
  [[nodiscard]] std::vector<pybind11::object> take_lists() noexcept { return std::move(lists_); }

 private:
  struct Entry {
    PythonOp op;
    std::vector<Var> reads;
    std::vector<Var> mutates;
    PushOptions options;
    bool async;
  };
  const EngineBinding* engine_;  // not owned: the capture's Python object keeps the engine's alive
  std::vector<Entry> entries_;
  std::vector<ScopeHandle> scopes_;      // keeps the scopes that entries_' options point to alive
  std::vector<pybind11::object> lists_;  // the records' reads and mutates lists (engine_binding.h, PushArguments)
  bool active_ = false;
};

}  // namespace depengine::python
