// CompletionBinding: the Python face of an asynchronous op's Completion, the first argument of a push_async function.
//
// Call it once, from any Python thread, when the op's work is done: done() for success, done(exc) with an exception
// instance for failure (a wait then raises that very object). A second call raises depengine.Error. The call releases
// the GIL, since completing an op may run the ops it made ready on the calling thread (the inline executor does).
#pragma once

#include <string>

#include <depengine/engine/run_context.h>

namespace pybind11 {
class module_;
}

namespace depengine::python {

struct CompletionBinding {
  Completion done;
  std::string op;  // the op's name, attached to the exception it completes with
};

void bind_completion(pybind11::module_& module);

}  // namespace depengine::python
