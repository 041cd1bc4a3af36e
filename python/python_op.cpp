// PythonOp::call (python_op.h).
#include "python/python_op.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <utility>

#include "python/completion_binding.h"
#include "python/python_error.h"

namespace py = pybind11;

namespace depengine::python {
namespace {

// The call's arguments, a new reference (null with a Python error set): the Completion if any, then a view of each
// array. A view rather than the array itself, so that the op cannot flip the read-only flag of what it only reads for
// later ops, and what it keeps of it is an ordinary NumPy view.
PyObject* make_arguments(PyObject* arrays, std::uint64_t read_only, const Completion* done, std::string_view op) {
  const Py_ssize_t count = arrays != nullptr ? PyTuple_GET_SIZE(arrays) : 0;
  const Py_ssize_t first = done != nullptr ? 1 : 0;
  PyObject* args = PyTuple_New(first + count);
  if (args == nullptr) return nullptr;
  if (done != nullptr) {
    try {
      PyTuple_SET_ITEM(args, 0, py::cast(CompletionBinding{*done, std::string(op)}).release().ptr());
    } catch (py::error_already_set& e) {
      e.restore();
      Py_DECREF(args);
      return nullptr;
    }
  }
  for (Py_ssize_t i = 0; i < count; ++i) {
    PyObject* view = PyObject_CallMethod(PyTuple_GET_ITEM(arrays, i), "view", nullptr);
    if (view == nullptr) {
      Py_DECREF(args);
      return nullptr;
    }
    if ((read_only >> i) & 1U) {
      py::detail::array_proxy(view)->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
    }
    PyTuple_SET_ITEM(args, first + i, view);  // steals
  }
  return args;
}

}  // namespace

void PythonOp::call(const RunContext& ctx, const Completion* done) {
  GilHold gil;
  PyObject* result = nullptr;
  if (PyObject* args = make_arguments(arrays_.get(), read_only_, done, ctx.name); args != nullptr) {
    const EngineBinding* outer = std::exchange(t_running_engine, engine_);
    result = PyObject_Call(fn_.get(), args, nullptr);
    Py_DECREF(args);
    // A pushed op runs once: drop what it holds now, while the GIL is held, rather than take it again when the engine
    // recycles the record. A replayed op keeps them for the next replay. Still marked as running: what this drops may
    // be the last reference to the engine itself, whose closing must then not wait for this op (EngineBinding::close).
    if (ctx.replay < 0) {
      fn_.reset_holding_gil();
      arrays_.reset_holding_gil();
    }
    t_running_engine = outer;
  } else if (ctx.replay < 0) {
    fn_.reset_holding_gil();
    arrays_.reset_holding_gil();
  }
  if (result == nullptr) throw PythonError::raise_from_op(ctx.name);
  Py_DECREF(result);
}

}  // namespace depengine::python
