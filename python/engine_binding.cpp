// EngineBinding (engine_binding.h): the engine's lifetime, pushes and waits as Python makes them.
#include "python/engine_binding.h"

#include <pybind11/numpy.h>

#include <algorithm>
#include <set>
#include <stdexcept>
#include <utility>

#include <depengine/executors/inline_executor.h>
#include <depengine/executors/threadpool/threadpool_executor.h>

#include "python/array_binding.h"
#include "python/capture_recorder.h"
#include "python/python_error.h"
#include "python/python_op.h"
#include "python/variable_binding.h"

namespace py = pybind11;

namespace depengine::python {
namespace {

// The engines still open, for close_all(). Touched with the GIL held only, so it needs no lock of its own.
std::set<EngineBinding*>& open_engines() {
  static auto* engines = new std::set<EngineBinding*>();  // never destroyed: read by the atexit hook
  return *engines;
}

EngineOptions engine_options(const EngineBinding::Settings& settings) {
  EngineOptions options;
  if (settings.executor == "threads") {
    options.executors.push_back(std::make_unique<ThreadPoolExecutor>(ThreadPoolOptions{.workers = settings.workers}));
  } else if (settings.executor == "inline") {
    options.executors.push_back(std::make_unique<InlineExecutor>());
  } else {
    throw py::value_error("Engine: executor must be 'threads' or 'inline', not '" + settings.executor + "'");
  }
  if (settings.workers < 0) throw py::value_error("Engine: workers must be 0 (the default) or more");
  if (settings.max_in_flight == 0) throw py::value_error("Engine: max_in_flight must be at least 1");
  options.max_in_flight = settings.max_in_flight;
  if (settings.help_above >= settings.max_in_flight) {
    throw py::value_error("Engine: help_above (" + std::to_string(settings.help_above) +
                          ") must be under max_in_flight (" + std::to_string(settings.max_in_flight) +
                          "); 0 turns helping off");
  }
  options.help_above = settings.help_above;
  if (settings.stall_report_after) {
    if (!(*settings.stall_report_after > 0)) throw py::value_error("Engine: stall_report_after must be > 0 seconds");
    options.stall_report_after =
        std::chrono::milliseconds(static_cast<std::int64_t>(*settings.stall_report_after * 1e3));
  }
  options.cancel_on_destruction = settings.cancel_on_destruction;
  if (!settings.error_sink.is_none()) {
    if (!PyCallable_Check(settings.error_sink.ptr())) {
      throw py::type_error("Engine: error_sink must be callable as sink(op_name, exception), or None");
    }
    // Shared: ErrorSink is a std::function, which copies. The engine calls it on the thread of a WaitForAll or of its
    // destruction, with none of its locks held.
    auto sink = std::make_shared<PyRef>(PyRef::borrow(settings.error_sink.ptr()));
    options.error_sink = [sink](const UnreportedError& unreported) {
      GilHold gil;
      try {
        py::handle(sink->get())(py::str(std::string(unreported.op)), exception_object(unreported.error));
      } catch (py::error_already_set& e) {
        e.discard_as_unraisable("depengine: the error sink");
      }
    };
  }
  return options;
}

}  // namespace

// A call from outside the engine's ops: counted in calls_, refused once closing_ is set. A call from inside one of the
// engine's running ops is not counted: the engine outlives its running ops (close() destroys it, and ~Engine waits for
// them), and such a call may push while the engine closes (the rest of the op's work).
class EngineBinding::Call {
 public:
  explicit Call(const EngineBinding& binding) : binding_(const_cast<EngineBinding&>(binding)) {
    if (t_running_engine == &binding_) return;
    counted_ = true;
    // seq_cst: a Dekker pair with close(), which stores closing_ and then loads calls_: either close() sees this call,
    // or this call sees closing_.
    binding_.calls_.fetch_add(1, std::memory_order_seq_cst);
    if (binding_.closing_.load(std::memory_order_seq_cst)) {
      leave();
      throw Error("depengine.Engine: the engine is closed");
    }
  }
  ~Call() {
    if (counted_) leave();
  }
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

 private:
  void leave() noexcept {
    counted_ = false;
    // release: pairs with the acquire load in close(), which then destroys the engine this call used.
    if (binding_.calls_.fetch_sub(1, std::memory_order_release) == 1) binding_.calls_.notify_all();
  }
  EngineBinding& binding_;
  bool counted_ = false;
};

EngineBinding::EngineBinding(Settings settings) : engine_(nullptr) {
  EngineOptions options = engine_options(settings);
  {
    py::gil_scoped_release released;  // starting the executors may take a while; an env knob may throw Error
    engine_ = new Engine(std::move(options));
  }
  if (settings.trace) {
    try {
      engine_->StartTrace(*settings.trace);
    } catch (...) {
      py::gil_scoped_release released;
      delete engine_;
      throw;
    }
  }
  open_engines().insert(this);
}

EngineBinding::~EngineBinding() { close(false); }

bool EngineBinding::closed() const noexcept {
  // relaxed: a hint for Python's `closed` property; calls check through Call.
  return closing_.load(std::memory_order_relaxed);
}

Var EngineBinding::new_variable() {
  Call call(*this);
  py::gil_scoped_release released;  // takes the engine's mutex
  return engine_->NewVariable();
}

PushArguments EngineBinding::parse(py::handle reads, py::handle mutates, std::string name, std::int32_t priority,
                                   bool no_skip, const ScopeHandle& scope) const {
  PushArguments arguments;
  std::vector<py::object> arrays;
  std::uint64_t read_only = 0;
  auto gather = [&](py::handle list, const char* what, std::vector<Var>& vars, bool reading) {
    if (list.is_none()) return;
    if (!py::isinstance<py::sequence>(list) && !py::isinstance<py::iterable>(list)) {
      throw py::type_error(std::string(what) + " must be a list of depengine.Variable or depengine.Array, not " +
                           std::string(py::str(py::type::handle_of(list).attr("__name__"))));
    }
    std::size_t index = 0;
    for (py::handle item : list) {
      if (py::isinstance<VariableBinding>(item)) {
        vars.push_back(item.cast<const VariableBinding&>().var);
      } else if (py::isinstance<ArrayBinding>(item)) {
        const auto& array = item.cast<const ArrayBinding&>();
        array.check_engine(*this, what);
        vars.push_back(array.var());
        if (arrays.size() == 64) throw py::value_error("a push lists at most 64 engine arrays");
        if (reading) read_only |= std::uint64_t{1} << arrays.size();
        arrays.push_back(array.data());
      } else {
        throw py::type_error(std::string(what) + "[" + std::to_string(index) +
                             "]: expected a depengine.Variable or depengine.Array, got " +
                             std::string(py::str(py::type::handle_of(item).attr("__name__"))));
      }
      ++index;
    }
  };
  gather(reads, "reads", arguments.reads, true);
  gather(mutates, "mutates", arguments.mutates, false);
  if (!arrays.empty()) {
    arguments.arrays = py::tuple(arrays.size());
    for (std::size_t i = 0; i < arrays.size(); ++i) arguments.arrays[i] = std::move(arrays[i]);
  }
  arguments.read_only = read_only;
  arguments.lists[0] = reads;
  arguments.lists[1] = mutates;
  arguments.options.name = name;
  arguments.options.priority = priority;
  arguments.options.no_skip = no_skip;
  arguments.scope = scope;
  return arguments;
}

void EngineBinding::push(py::handle fn, PushArguments arguments, bool async) {
  if (!PyCallable_Check(fn.ptr())) {
    throw py::type_error(std::string(async ? "push_async" : "push") + ": fn must be callable, not " +
                         std::string(py::str(py::type::handle_of(fn).attr("__name__"))));
  }
  Call call(*this);
  if (arguments.scope) record_scope(arguments.scope);
  arguments.options.scope = arguments.scope ? arguments.scope.get() : &all_;
  PythonOp op(PyRef::borrow(fn.ptr()), PyRef::borrow(arguments.arrays ? arguments.arrays.ptr() : nullptr),
              arguments.read_only, this);
  if (CaptureRecorder* recorder = CaptureRecorder::active(*this); recorder != nullptr) {
    recorder->record(std::move(op), arguments, async);
    return;
  }
  py::gil_scoped_release released;
  if (async) {
    engine_->PushAsync(std::move(op), arguments.reads, arguments.mutates, arguments.options);
  } else {
    engine_->Push(std::move(op), arguments.reads, arguments.mutates, arguments.options);
  }
}

void EngineBinding::delete_variable(Var var, PyRef keep, bool from_array) {
  if (!from_array && CaptureRecorder::active(*this) != nullptr) {
    throw Error("delete_variable inside a capture: delete after the capture");
  }
  Call call(*this);
  py::gil_scoped_release released;
  // The deletion is in `all_`, so that wait_for_all's first step waits for it too.
  engine_->DeleteVariable(
      var, [keep = std::move(keep)]() mutable { keep.reset(); }, PushOptions{.scope = &all_});
}

void EngineBinding::refuse_inside(const char* api) const {
  if (CaptureRecorder::active(*this) != nullptr) {
    throw Error(std::string(api) +
                " inside a capture: the captured ops run only when the graph is replayed; wait "
                "after the replay");
  }
  if (t_running_engine == this) {
    throw Error(std::string(api) +
                " called from inside a running op of the same engine: it would wait for that op, or for work queued "
                "behind it, and never return; push a dependent op instead");
  }
}

void EngineBinding::wait_for_var(Var var) {
  refuse_inside("wait_var");
  Call call(*this);
  auto signal = std::make_shared<Signal>();
  {
    py::gil_scoped_release released;
    // The marker reads `var`: it runs once every mutation pushed on it before has completed; no_skip, so that it runs
    // on a variable carrying an error too (the wait below then rethrows that error).
    engine_->Push([signal] { signal->notify(); }, {var}, {},
                  PushOptions{.name = "depengine.wait_var", .no_skip = true});
  }
  wait_interruptibly(*signal);
  py::gil_scoped_release released;
  engine_->WaitForVar(var);
}

void EngineBinding::wait_for_all() {
  refuse_inside("wait_all");
  Call call(*this);
  if (engine_->InFlight() != 0) {
    std::vector<ScopeHandle> scopes;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      scopes = scopes_;
    }
    // The helper holds what it uses, not `this`: after a KeyboardInterrupt it may outlive the call (close() joins it).
    wait_on_helper([engine = engine_, all = all_, scopes = std::move(scopes)] {
      engine->WaitForScope(all);
      for (const ScopeHandle& scope : scopes) engine->WaitForScope(*scope);
    });
  }
  py::gil_scoped_release released;
  engine_->WaitForAll();
}

void EngineBinding::wait_for_scope(const ScopeHandle& scope) {
  refuse_inside("wait_scope");
  Call call(*this);
  if (scope->pending() != 0) wait_on_helper([engine = engine_, scope] { engine->WaitForScope(*scope); });
  py::gil_scoped_release released;
  engine_->WaitForScope(*scope);
}

void EngineBinding::replay(const Graph& graph, const std::vector<ScopeHandle>& captured_scopes,
                           const ScopeHandle& scope) {
  if (CaptureRecorder::active(*this) != nullptr) throw Error("replay inside a capture");
  Call call(*this);
  if (scope) {
    record_scope(scope);
  } else {
    for (const ScopeHandle& captured : captured_scopes) record_scope(captured);
  }
  py::gil_scoped_release released;
  engine_->Replay(graph, ReplayOptions{.scope = scope.get()});
}

Graph EngineBinding::capture(CaptureRecorder& recorder) {
  Call call(*this);
  py::gil_scoped_release released;
  return engine_->Capture([this, &recorder] { recorder.push_recorded(*engine_); });
}

std::string EngineBinding::in_flight_report() const {
  Call call(*this);
  py::gil_scoped_release released;
  return engine_->InFlightReport();
}

std::size_t EngineBinding::in_flight() const {
  Call call(*this);
  return engine_->InFlight();
}

std::uint64_t EngineBinding::version(Var var) const {
  Call call(*this);
  return engine_->Version(var);
}

void EngineBinding::start_trace(std::string path) {
  Call call(*this);
  py::gil_scoped_release released;  // takes the engine's trace mutex
  engine_->StartTrace(std::move(path));
}

void EngineBinding::stop_trace() {
  Call call(*this);
  py::gil_scoped_release released;  // waits for every op in flight
  engine_->StopTrace();
}

void EngineBinding::record_scope(const ScopeHandle& scope) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (std::find(scopes_.begin(), scopes_.end(), scope) != scopes_.end()) return;
  // Forget the scopes seen drained, so that a scope per epoch does not grow the list for ever. A forgotten scope
  // pushed into again is recorded again here.
  std::erase_if(scopes_, [](const ScopeHandle& kept) { return kept->pending() == 0; });
  scopes_.push_back(scope);
}

void EngineBinding::wait_on_helper(std::function<void()> blocking) {
  auto done = std::make_shared<Signal>();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    helpers_.push_back(Helper{std::thread([blocking = std::move(blocking), done] {
                                try {
                                  blocking();
                                } catch (...) {
                                  // WaitForScope throws only when called from inside an op, which a helper is not
                                }
                                done->notify();
                              }),
                              done});
  }
  wait_interruptibly(*done);
  join_helpers(false);
}

void EngineBinding::join_helpers(bool all) {
  std::list<Helper> finished;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = helpers_.begin(); it != helpers_.end();) {
      auto next = std::next(it);
      if (all || it->done->notified()) finished.splice(finished.end(), helpers_, it);
      it = next;
    }
  }
  py::gil_scoped_release released;
  for (Helper& helper : finished) helper.thread.join();
}

void EngineBinding::close(bool interruptible) {
  if (destroyed_) return;
  if (interruptible && !closing_.load(std::memory_order_relaxed)) {
    // Ctrl-C here leaves the engine open and untouched. (relaxed: only this GIL-holding path reads it early.)
    if (engine_->InFlight() != 0) {
      wait_on_helper([engine = engine_, all = all_] { engine->WaitForScope(all); });
    }
  }
  // seq_cst: the other half of Call's Dekker pair.
  closing_.store(true, std::memory_order_seq_cst);
  open_engines().erase(this);
  destroyed_ = true;
  if (t_running_engine == this) {
    // Dropped by one of its own ops (the last reference was in what the op held): ~Engine waits for that op, so it
    // cannot run here. A thread of its own ends the engine once the op has returned; it owns everything it touches.
    std::thread([engine = engine_, helpers = std::move(helpers_)]() mutable {
      for (Helper& helper : helpers) helper.thread.join();
      delete engine;
    }).detach();
    return;
  }
  py::gil_scoped_release released;
  // acquire: pairs with the release decrement in Call::leave(); the calls' use of the engine happens before its end.
  for (std::uint32_t left; (left = calls_.load(std::memory_order_acquire)) != 0;) {
    calls_.wait(left, std::memory_order_acquire);
  }
  {
    py::gil_scoped_acquire gil;
    join_helpers(true);
  }
  // Runs what is still queued (Python ops take the GIL), hands unreported errors to the sink, stops the executors.
  // engine_ stays readable meanwhile for ops that push the rest of their work.
  delete engine_;
}

void EngineBinding::close_all() {
  std::vector<EngineBinding*> engines(open_engines().begin(), open_engines().end());
  for (EngineBinding* engine : engines) engine->close(false);
}

}  // namespace depengine::python
