// The Python class Completion (completion_binding.h).
#include "python/completion_binding.h"

#include <pybind11/pybind11.h>

#include <exception>

#include "python/python_error.h"

namespace py = pybind11;

namespace depengine::python {

void bind_completion(py::module_& module) {
  py::class_<CompletionBinding>(module, "Completion",
                                "Completes an asynchronous op: call it once, from any thread, with no argument for "
                                "success or with an exception instance for failure.")
      .def(
          "__call__",
          [](const CompletionBinding& self, py::object error) {
            std::exception_ptr failure;
            if (!error.is_none()) failure = std::make_exception_ptr(PythonError::from_object(error, self.op));
            py::gil_scoped_release released;
            self.done(failure);
          },
          py::arg("error") = py::none());
}

}  // namespace depengine::python
