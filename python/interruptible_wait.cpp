// wait_interruptibly (interruptible_wait.h).
#include "python/interruptible_wait.h"

#include <pybind11/pybind11.h>

namespace py = pybind11;

namespace depengine::python {

void wait_interruptibly(Signal& signal) {
  for (;;) {
    bool done = false;
    {
      py::gil_scoped_release released;
      done = signal.wait_for(kTick);
    }
    if (done) return;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
}

}  // namespace depengine::python
