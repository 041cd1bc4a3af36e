// PythonError: an exception a Python op raised, carried through the engine as a C++ exception and rethrown to Python
// as the same object.
//
// The engine keeps an op's error as a std::exception_ptr on the variables the op mutates and rethrows it from the wait
// that reports it (engine.h, "Errors"). A Python op's exception becomes a PythonError holding the exception object;
// the module's exception translator (install_translators) raises that very object again at the wait, so `except
// ValueError as e` catches what the op raised, traceback and all. The op's name is attached to the object when the op
// raises it (raise_from_op): a note (BaseException.add_note) "depengine: raised by op 'name'", and the attribute
// `depengine_op`.
//
// Thread safety: a PythonError may be copied and destroyed on any thread (its object is a shared PyRef); what() needs
// no GIL (the text is made when the error is).
#pragma once

#include <Python.h>
#include <pybind11/pybind11.h>

#include <exception>
#include <memory>
#include <string>
#include <string_view>

#include "python/gil.h"

namespace depengine::python {

class PythonError : public std::exception {
 public:
  // Takes the Python exception being raised now (the GIL held, PyErr_Occurred()), clearing it, and names `op` in it.
  static PythonError raise_from_op(std::string_view op);
  // Wraps `exception` (an instance of BaseException, else TypeError; the GIL held), as given to the Completion of
  // op `op`, and names `op` in it.
  static PythonError from_object(pybind11::handle exception, std::string_view op);

  [[nodiscard]] const char* what() const noexcept override { return what_.c_str(); }
  // The exception object (a borrowed reference, alive while this error is).
  [[nodiscard]] PyObject* object() const noexcept { return object_->get(); }

 private:
  PythonError(PyObject* owned, std::string what)
      : object_(std::make_shared<PyRef>(PyRef::steal(owned))), what_(std::move(what)) {}

  std::shared_ptr<PyRef> object_;  // shared: std::exception_ptr copies exceptions, and a copy must not touch the GIL
  std::string what_;               // "ValueError: message", for the engine's stderr lines
};

// Registers translators that turn the engine's exceptions into Python ones: PythonError into its own object,
// depengine::Cancelled into `cancelled` and depengine::Error into `error` (both Python classes of the module).
void install_translators(pybind11::handle error, pybind11::handle cancelled);

// The Python object for an op's error as the error sink hands it on: a PythonError's own object, or an instance of
// the module's Error (or Cancelled) carrying a C++ exception's message. Requires the GIL.
pybind11::object exception_object(const std::exception_ptr& error);

}  // namespace depengine::python
