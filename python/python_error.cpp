// PythonError and the translation of the engine's exceptions to Python (python_error.h).
#include "python/python_error.h"

#include <string>
#include <utility>

#include <depengine/engine/errors.h>

namespace py = pybind11;

namespace depengine::python {
namespace {

// The module's Error and Cancelled classes: references owned for the life of the process (never dropped, so nothing
// runs at interpreter exit), set once when the module is imported, read only with the GIL held.
PyObject* g_error_type = nullptr;
PyObject* g_cancelled_type = nullptr;

// "ValueError: message" (or the type's name alone), computed with the GIL held; never throws.
std::string describe(PyObject* exception) noexcept {
  try {
    py::handle object(exception);
    std::string text = py::str(py::type::handle_of(object).attr("__name__"));
    std::string message = py::str(object);
    if (!message.empty()) text += ": " + message;
    return text;
  } catch (py::error_already_set& e) {
    e.discard_as_unraisable("depengine: describing an op's exception");
    return "a Python exception";
  } catch (...) {
    return "a Python exception";
  }
}

// Attaches the op's name where the user will look: a note in the traceback's text, and an attribute for code. Failing
// to attach them (an exception class with __slots__) loses nothing but the name.
void name_exception(PyObject* value, std::string_view op) noexcept {
  const std::string name(op.empty() ? std::string("<unnamed>") : std::string(op));
  const std::string note = "depengine: raised by op '" + name + "'";
  if (PyObject* result = PyObject_CallMethod(value, "add_note", "s", note.c_str()); result != nullptr) {
    Py_DECREF(result);
  } else {
    PyErr_Clear();
  }
  if (PyObject* attribute = PyUnicode_FromStringAndSize(op.data(), static_cast<Py_ssize_t>(op.size()));
      attribute != nullptr) {
    if (PyObject_SetAttrString(value, "depengine_op", attribute) != 0) PyErr_Clear();
    Py_DECREF(attribute);
  } else {
    PyErr_Clear();
  }
}

}  // namespace

PythonError PythonError::raise_from_op(std::string_view op) {
  PyObject* type = nullptr;
  PyObject* value = nullptr;
  PyObject* traceback = nullptr;
  PyErr_Fetch(&type, &value, &traceback);
  PyErr_NormalizeException(&type, &value, &traceback);
  if (traceback != nullptr && value != nullptr) PyException_SetTraceback(value, traceback);
  Py_XDECREF(type);
  Py_XDECREF(traceback);
  if (value == nullptr) {  // an error indicator without a value cannot happen after a failed call; be defensive
    value = PyObject_CallFunction(PyExc_RuntimeError, "s", "depengine: an op failed without an exception");
  }
  name_exception(value, op);
  return PythonError(value, describe(value));
}

PythonError PythonError::from_object(py::handle exception, std::string_view op) {
  if (!PyExceptionInstance_Check(exception.ptr())) {
    throw py::type_error("depengine: a completion's error must be an exception instance, not " +
                         std::string(py::str(py::type::handle_of(exception).attr("__name__"))));
  }
  name_exception(exception.ptr(), op);
  return PythonError(exception.inc_ref().ptr(), describe(exception.ptr()));
}

void install_translators(py::handle error, py::handle cancelled) {
  g_error_type = error.inc_ref().ptr();
  g_cancelled_type = cancelled.inc_ref().ptr();
  // Translators run newest first: PythonError and Cancelled are tried before their base Error.
  py::register_exception_translator([](std::exception_ptr thrown) {
    try {
      if (thrown) std::rethrow_exception(thrown);
    } catch (const depengine::Error& e) {
      PyErr_SetString(g_error_type, e.what());
    }
  });
  py::register_exception_translator([](std::exception_ptr thrown) {
    try {
      if (thrown) std::rethrow_exception(thrown);
    } catch (const depengine::Cancelled& e) {
      PyErr_SetString(g_cancelled_type, e.what());
    }
  });
  py::register_exception_translator([](std::exception_ptr thrown) {
    try {
      if (thrown) std::rethrow_exception(thrown);
    } catch (const PythonError& e) {
      // The very object the op raised: its type, its traceback (extended by the frames it travels through now).
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(e.object())), e.object());
    }
  });
}

py::object exception_object(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const PythonError& e) {
    return py::reinterpret_borrow<py::object>(e.object());
  } catch (const depengine::Cancelled& e) {
    return py::reinterpret_borrow<py::object>(g_cancelled_type)(e.what());
  } catch (const std::exception& e) {
    return py::reinterpret_borrow<py::object>(g_error_type)(e.what());
  } catch (...) {
    return py::reinterpret_borrow<py::object>(g_error_type)(
        "an op failed with an exception that is not a std::exception");
  }
}

}  // namespace depengine::python
