// PythonOp: the function of an op pushed from Python, as the engine stores and calls it.
//
// It holds the Python callable and the engine arrays the op lists (a tuple of their ndarrays, with a bit per array
// saying whether the op only reads it), all as PyRefs, in 32 bytes: it fits the engine's inline op storage, so a push
// allocates nothing for it. When the engine calls it, on whatever thread runs the op, it takes the GIL for exactly the
// call: it builds the arguments (a read-only view of each array the op reads, a writable view of each it mutates, in
// the order they were listed, reads first), calls the callable, and turns an exception into a PythonError carrying the
// exception object, with the op's name attached (python_error.h). A pushed op runs once, so it then drops its
// references while it still holds the GIL; a captured one keeps them for the next replay, and they go when the Graph
// does (a PyRef takes the GIL itself). An op skipped for an input error or cancelled is never called: its PyRefs go
// with the op's record.
//
// An asynchronous op (push_async) passes a Completion object first: fn(done, *views).
#pragma once

#include <Python.h>

#include <cstdint>

#include <depengine/engine/run_context.h>

#include "python/gil.h"

namespace depengine::python {

class EngineBinding;

// Set while a Python op runs on this thread: the engine it belongs to, so that a push it makes is known to come from
// inside a running op (which may push while the engine is being closed; see EngineBinding).
inline thread_local const EngineBinding* t_running_engine = nullptr;

class PythonOp {
 public:
  // Requires the GIL. `views` is null or a tuple of ndarrays; bit i of `read_only` marks view i read-only.
  PythonOp(PyRef fn, PyRef arrays, std::uint64_t read_only, const EngineBinding* engine) noexcept
      : fn_(std::move(fn)), arrays_(std::move(arrays)), read_only_(read_only), engine_(engine) {}
  PythonOp(PythonOp&&) noexcept = default;
  PythonOp& operator=(PythonOp&&) noexcept = default;

  void operator()(const RunContext& ctx) { call(ctx, nullptr); }
  void operator()(const RunContext& ctx, Completion done) { call(ctx, &done); }

 private:
  void call(const RunContext& ctx, const Completion* done);

  PyRef fn_;
  PyRef arrays_;
  std::uint64_t read_only_;
  const EngineBinding* engine_;  // not owned: the binding outlives every op of its engine
};

}  // namespace depengine::python
