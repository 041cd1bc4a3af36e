// The Python module `depengine`: its classes and functions, documented for Python users in depengine.pyi.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <depengine/engine/version.h>

#include "python/array_binding.h"
#include "python/capture_recorder.h"
#include "python/completion_binding.h"
#include "python/engine_binding.h"
#include "python/python_error.h"
#include "python/variable_binding.h"

namespace py = pybind11;
using namespace depengine::python;

namespace {

// A captured graph: the engine's Graph, the Python engine it belongs to (kept alive), and the user's scopes its ops
// were captured with (a replay without a scope of its own puts them there: the engine's wait_all must know them).
struct GraphBinding {
  py::object engine_object;
  EngineBinding* engine;
  std::optional<depengine::Graph> graph;
  std::vector<ScopeHandle> scopes;
  std::vector<py::object> lists;  // the captured pushes' reads and mutates: keeps their Arrays alive

  GraphBinding(py::object owner, EngineBinding* binding) : engine_object(std::move(owner)), engine(binding) {}
  ~GraphBinding() {
    // Destroying a Graph may delete the variables it owns: an engine call, so without the GIL (its functions' PyRefs
    // take it back themselves).
    {
      py::gil_scoped_release released;
      graph.reset();
    }
    lists.clear();  // the Arrays' deletions come after the graph's own end
  }
};

// The object `engine.capture()` returns: a context manager whose block is captured into the Graph its __enter__
// returns (capture_recorder.h).
struct CaptureBinding {
  py::object engine_object;
  EngineBinding* engine;
  std::unique_ptr<CaptureRecorder> recorder;
  py::object graph;  // a GraphBinding, filled at the block's end
};

EngineBinding& binding_of(const py::object& engine) { return engine.cast<EngineBinding&>(); }

py::object make_array(py::object engine, py::array data) {
  EngineBinding& binding = binding_of(engine);
  return py::cast(std::make_unique<ArrayBinding>(std::move(engine), binding, std::move(data)));
}

py::array contiguous_copy(py::handle data, py::handle dtype) {
  py::module_ numpy = py::module_::import("numpy");
  py::array array =
      py::array(numpy.attr("array")(data, py::arg("dtype") = dtype, py::arg("copy") = true, py::arg("order") = "C"));
  if (array.dtype().attr("hasobject").cast<bool>()) {
    throw py::type_error(
        "depengine.Array: object arrays are not supported (their elements are Python objects); "
        "use a numeric dtype");
  }
  return array;
}

depengine::Var var_of(py::handle item, const char* api) {
  if (py::isinstance<VariableBinding>(item)) return item.cast<const VariableBinding&>().var;
  if (py::isinstance<ArrayBinding>(item)) return item.cast<const ArrayBinding&>().var();
  throw py::type_error(std::string(api) + ": expected a depengine.Variable or depengine.Array, got " +
                       std::string(py::str(py::type::handle_of(item).attr("__name__"))));
}

void bind_engine(py::module_& m) {
  py::class_<EngineBinding>(m, "Engine", "A dependency engine: runs pushed functions as their variables allow.")
      .def(py::init([](int workers, std::string executor, std::size_t max_in_flight, std::size_t help_above,
                       std::optional<std::string> trace, py::object error_sink,
                       std::optional<double> stall_report_after, bool cancel_on_destruction) {
             return std::make_unique<EngineBinding>(
                 EngineBinding::Settings{workers, std::move(executor), max_in_flight, help_above, std::move(trace),
                                         std::move(error_sink), stall_report_after, cancel_on_destruction});
           }),
           py::kw_only(), py::arg("workers") = 0, py::arg("executor") = "threads",
           py::arg("max_in_flight") = std::size_t{1} << 16, py::arg("help_above") = 0, py::arg("trace") = py::none(),
           py::arg("error_sink") = py::none(), py::arg("stall_report_after") = py::none(),
           py::arg("cancel_on_destruction") = false)
      .def("variable", [](EngineBinding& self) { return VariableBinding{self.new_variable()}; })
      .def("delete_variable",
           [](EngineBinding& self, const VariableBinding& var) { self.delete_variable(var.var, PyRef()); })
      .def(
          "array",
          [](py::object self, py::handle data, py::handle dtype) {
            return make_array(std::move(self), contiguous_copy(data, dtype));
          },
          py::arg("data"), py::arg("dtype") = py::none())
      .def(
          "empty",
          [](py::object self, py::object shape, py::handle dtype) {
            py::module_ numpy = py::module_::import("numpy");
            return make_array(std::move(self), contiguous_copy(numpy.attr("empty")(shape, dtype), dtype));
          },
          py::arg("shape"), py::arg("dtype") = "float64")
      .def(
          "zeros",
          [](py::object self, py::object shape, py::handle dtype) {
            py::module_ numpy = py::module_::import("numpy");
            return make_array(std::move(self), contiguous_copy(numpy.attr("zeros")(shape, dtype), dtype));
          },
          py::arg("shape"), py::arg("dtype") = "float64")
      .def(
          "push",
          [](EngineBinding& self, py::handle fn, py::handle reads, py::handle mutates, std::string name,
             std::int32_t priority, bool no_skip, ScopeHandle scope) {
            self.push(fn, self.parse(reads, mutates, std::move(name), priority, no_skip, scope), false);
          },
          py::arg("fn"), py::arg("reads") = py::tuple(), py::arg("mutates") = py::tuple(), py::kw_only(),
          py::arg("name") = "", py::arg("priority") = 0, py::arg("no_skip") = false, py::arg("scope") = py::none())
      .def(
          "push_async",
          [](EngineBinding& self, py::handle fn, py::handle reads, py::handle mutates, std::string name,
             std::int32_t priority, bool no_skip, ScopeHandle scope) {
            self.push(fn, self.parse(reads, mutates, std::move(name), priority, no_skip, scope), true);
          },
          py::arg("fn"), py::arg("reads") = py::tuple(), py::arg("mutates") = py::tuple(), py::kw_only(),
          py::arg("name") = "", py::arg("priority") = 0, py::arg("no_skip") = false, py::arg("scope") = py::none())
      .def(
          "wait_var", [](EngineBinding& self, py::handle var) { self.wait_for_var(var_of(var, "wait_var")); },
          py::arg("var"))
      .def("wait_all", &EngineBinding::wait_for_all)
      .def("wait_scope", &EngineBinding::wait_for_scope, py::arg("scope"))
      .def(
          "version", [](const EngineBinding& self, py::handle var) { return self.version(var_of(var, "version")); },
          py::arg("var"))
      .def("capture",
           [](py::object self) {
             EngineBinding& binding = binding_of(self);
             CaptureBinding capture{self, &binding, std::make_unique<CaptureRecorder>(binding),
                                    py::cast(std::make_unique<GraphBinding>(self, &binding))};
             return capture;
           })
      .def(
          "replay",
          [](EngineBinding& self, GraphBinding& graph, ScopeHandle scope) {
            if (graph.engine != &self) throw py::value_error("replay: a graph captured on another engine");
            if (!graph.graph) throw depengine::Error("replay: the graph's capture has not ended");
            self.replay(*graph.graph, graph.scopes, scope);
          },
          py::arg("graph"), py::arg("scope") = py::none())
      .def("in_flight_report", &EngineBinding::in_flight_report)
      .def_property_readonly("in_flight", &EngineBinding::in_flight)
      .def("start_trace", &EngineBinding::start_trace, py::arg("path"))
      .def("stop_trace", &EngineBinding::stop_trace)
      .def("close", [](EngineBinding& self) { self.close(true); })
      .def_property_readonly("closed", &EngineBinding::closed)
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](EngineBinding& self, py::handle type, py::handle, py::handle) {
        // Without an exception in the block: wait (raising the ops' first unreported error), then close. With one:
        // close without raising over it (the ops' errors go to the error sink).
        if (type.is_none()) {
          try {
            self.wait_for_all();
          } catch (...) {
            self.close(false);
            throw;
          }
        }
        self.close(type.is_none());
        return false;
      });
}

void bind_graph(py::module_& m) {
  py::class_<GraphBinding>(m, "Graph", "Pushes captured once (Engine.capture) and replayed (Engine.replay).")
      .def("__len__", [](const GraphBinding& self) { return self.graph ? self.graph->size() : 0; });
  py::class_<CaptureBinding>(m, "Capture", "The context manager of Engine.capture().")
      .def("__enter__",
           [](CaptureBinding& self) {
             self.recorder->begin();
             return self.graph;
           })
      .def("__exit__", [](CaptureBinding& self, py::handle type, py::handle, py::handle) {
        self.recorder->end();
        if (type.is_none()) {
          GraphBinding& graph = self.graph.cast<GraphBinding&>();
          graph.graph = self.engine->capture(*self.recorder);
          graph.scopes = self.recorder->scopes();
          graph.lists = self.recorder->take_lists();
        }
        self.recorder->discard();
        return false;
      });
}

void bind_scope(py::module_& m) {
  py::class_<depengine::CancelScope, ScopeHandle>(m, "CancelScope", "A group of ops cancelled and waited for together.")
      .def(py::init([] { return std::make_shared<depengine::CancelScope>(); }))
      .def("cancel", &depengine::CancelScope::Cancel)
      .def_property_readonly("cancelled", &depengine::CancelScope::cancelled)
      .def_property_readonly("pending", &depengine::CancelScope::pending);
}

}  // namespace

PYBIND11_MODULE(depengine, m) {
  m.doc() = "depengine: a dependency engine for ML runtimes (see depengine.pyi)";
  m.attr("__version__") = DEPENGINE_VERSION_STRING;

  py::object error = py::reinterpret_steal<py::object>(PyErr_NewExceptionWithDoc(
      "depengine.Error", "Misuse of the engine: a dead variable, a closed engine, a wait that would deadlock.",
      PyExc_RuntimeError, nullptr));
  py::object cancelled = py::reinterpret_steal<py::object>(PyErr_NewExceptionWithDoc(
      "depengine.Cancelled", "The error of an op cancelled before it ran (its CancelScope was cancelled).", error.ptr(),
      nullptr));
  m.attr("Error") = error;
  m.attr("Cancelled") = cancelled;
  install_translators(error, cancelled);

  py::class_<VariableBinding>(m, "Variable", "A handle of one engine variable (Engine.variable()).");
  bind_completion(m);
  ArrayBinding::bind(m);
  bind_scope(m);
  bind_graph(m);
  bind_engine(m);

  // Close every engine still open while the interpreter still lets threads take the GIL (gil.h).
  py::module_::import("atexit").attr("register")(py::cpp_function([] { EngineBinding::close_all(); }));
}
