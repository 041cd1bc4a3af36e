// ArrayBinding (array_binding.h) and its Python class.
#include "python/array_binding.h"

#include <string>
#include <utility>

#include "python/engine_binding.h"
#include "python/gil.h"
#include "python/variable_binding.h"

namespace py = pybind11;

namespace depengine::python {

ArrayBinding::ArrayBinding(py::object engine_object, EngineBinding& engine, py::array data)
    : engine_object_(std::move(engine_object)), engine_(&engine), var_(engine.new_variable()), data_(std::move(data)) {}

ArrayBinding::~ArrayBinding() {
  if (engine_->closed()) return;  // the engine ran every op and is gone (or going): nothing to order
  try {
    engine_->delete_variable(var_, PyRef::borrow(data_.ptr()), /*from_array=*/true);
  } catch (const std::exception&) {
    // Closed meanwhile by another thread: the engine's end ran or runs every op, and the data dies with this object.
  }
}

void ArrayBinding::check_engine(const EngineBinding& engine, const char* what) const {
  if (&engine != engine_) {
    throw py::value_error(std::string(what) + ": a depengine.Array of another engine");
  }
}

py::array ArrayBinding::numpy() {
  if (!engine_->closed()) engine_->wait_for_var(var_);
  return py::array(data_.attr("copy")());
}

void ArrayBinding::assign(py::handle value) {
  py::module_ numpy = py::module_::import("numpy");
  py::array source = py::array::ensure(value);
  if (!source) throw py::type_error("Array.assign: the value must be convertible to a NumPy array");
  if (!numpy.attr("can_cast")(source.dtype(), data_.dtype(), "same_kind").cast<bool>()) {
    throw py::type_error("Array.assign: cannot cast " + std::string(py::str(source.dtype())) + " to the array's " +
                         std::string(py::str(data_.dtype())));
  }
  if (!source.attr("shape").equal(data_.attr("shape"))) {
    throw py::value_error("Array.assign: shape " + std::string(py::str(source.attr("shape"))) +
                          " does not match the array's " + std::string(py::str(data_.attr("shape"))));
  }
  py::array copy = py::array(numpy.attr("array")(source, data_.dtype()));  // the value as it is now
  py::cpp_function fn([copy](py::array target) { target[py::ellipsis()] = copy; });
  PushArguments arguments =
      engine_->parse(py::none(), py::make_tuple(py::cast(this, py::return_value_policy::reference)),
                     "depengine.Array.assign", 0, false, nullptr);
  engine_->push(fn, std::move(arguments), false);
}

void ArrayBinding::bind(py::module_& module) {
  py::class_<ArrayBinding>(module, "Array", "A NumPy array ordered by the engine: an ndarray plus a variable.")
      .def_property_readonly("shape", [](const ArrayBinding& self) { return self.data_.attr("shape"); })
      .def_property_readonly("dtype", [](const ArrayBinding& self) { return self.data_.dtype(); })
      .def_property_readonly("ndim", [](const ArrayBinding& self) { return self.data_.ndim(); })
      .def_property_readonly("size", [](const ArrayBinding& self) { return self.data_.size(); })
      .def_property_readonly("variable", [](const ArrayBinding& self) { return VariableBinding{self.var_}; })
      .def_property_readonly("engine", [](const ArrayBinding& self) { return self.engine_object_; })
      .def("numpy", &ArrayBinding::numpy, "Waits for this array's writers and returns a copy of its data.")
      .def(
          "__array__",
          [](ArrayBinding& self, py::object dtype) {
            py::array data = self.numpy();
            return dtype.is_none() ? data : py::array(data.attr("astype")(dtype));
          },
          py::arg("dtype") = py::none())
      .def(
          "__dlpack__", [](ArrayBinding& self, py::object) { return self.numpy().attr("__dlpack__")(); },
          py::arg("stream") = py::none())
      .def("__dlpack_device__", [](const ArrayBinding&) { return py::make_tuple(1, 0); })  // kDLCPU, device 0
      .def("assign", &ArrayBinding::assign, py::arg("value"),
           "Pushes an op that copies value (same shape; a dtype that casts within its kind) into this array.")
      .def("__repr__", [](const ArrayBinding& self) {
        return "depengine.Array(shape=" + std::string(py::str(self.data_.attr("shape"))) +
               ", dtype=" + std::string(py::str(self.data_.dtype())) + ")";
      });
}

}  // namespace depengine::python
