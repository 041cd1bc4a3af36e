// EngineBinding: the C++ object behind the Python class depengine.Engine.
//
// It owns one depengine::Engine and is the only way Python reaches it, so it is where the GIL rules are kept:
//   - every call that enters the engine releases the GIL first (a push may wait at max_in_flight, or run a ready op
//     on the calling thread; a wait blocks), so no thread ever holds the GIL while it waits for the engine, and a
//     worker may always take the GIL to run a Python op (gil.h);
//   - waits block interruptibly (interruptible_wait.h): a first step waits for a Signal in ticks, a second makes the
//     engine's own call, which then returns at once. WaitForVar's Signal is a marker op that reads the variable
//     (no_skip: it runs after the variable's last writer, failed or not); WaitForAll's and WaitForScope's are a
//     helper thread blocked in WaitForScope: every op pushed through this binding belongs to a scope, the user's or
//     the binding's own `all_`, so that "every scope this binding pushed into is drained" means "nothing pushed is
//     left";
//   - closing (close(), the context manager's exit, garbage collection, the interpreter's exit) refuses new calls
//     from outside the engine's ops, waits for the calls under way, then destroys the engine with the GIL released:
//     the ops still queued run (Python ones take the GIL), and may still push the rest of their work.
//
// Thread safety: every method from any Python thread (with the GIL, as Python calls them); a running op may call them
// too. Lifetime: the Python object owns this; arrays and graphs hold a reference to the Python object, so it outlives
// them unless closed explicitly, after which they refuse to use it.
#pragma once

#include <pybind11/pybind11.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <depengine/engine/engine.h>

#include "python/gil.h"
#include "python/interruptible_wait.h"

namespace depengine::python {

class CaptureRecorder;

// A Python CancelScope: a shared handle, so that the binding can keep the scopes it pushed into and compare them.
using ScopeHandle = std::shared_ptr<CancelScope>;

// What Python passes to a push, parsed: the variables, the arrays the function receives, the options.
struct PushArguments {
  std::vector<Var> reads;
  std::vector<Var> mutates;
  pybind11::tuple arrays;       // the ndarrays the function receives, reads first
  std::uint64_t read_only = 0;  // bit i: arrays[i] is only read
  PushOptions options;
  ScopeHandle scope;  // the user's, or null
  // The lists as Python passed them, borrowed for the call: a capture keeps them, and its Graph then, so that the
  // Arrays they name live as long as the graph that uses them.
  pybind11::handle lists[2];
};

class EngineBinding {
 public:
  struct Settings {
    int workers = 0;                   // 0: DEPENGINE_CPU_WORKERS, else the hardware threads
    std::string executor = "threads";  // "threads" (the oneTBB pool) or "inline"
    std::size_t max_in_flight = std::size_t{1} << 16;
    std::size_t help_above = 0;                // EngineOptions::help_above; 0: off
    std::optional<std::string> trace;          // a trace file, started at once
    pybind11::object error_sink;               // None: stderr
    std::optional<double> stall_report_after;  // seconds; None: the engine's default
    bool cancel_on_destruction = false;
  };

  explicit EngineBinding(Settings settings);  // requires the GIL
  ~EngineBinding();                           // closes; requires the GIL
  EngineBinding(const EngineBinding&) = delete;
  EngineBinding& operator=(const EngineBinding&) = delete;

  [[nodiscard]] Var new_variable();
  // Parses a push's lists and options (TypeError/ValueError for what is not a Variable or Array, more than 64 arrays).
  [[nodiscard]] PushArguments parse(pybind11::handle reads, pybind11::handle mutates, std::string name,
                                    std::int32_t priority, bool no_skip, const ScopeHandle& scope) const;
  void push(pybind11::handle fn, PushArguments arguments, bool async);
  // Schedules the deletion of `var`; `keep` (may be null) is dropped by the deleter. `from_array`: an engine array's
  // own deletion, which is never captured (it happens whenever Python drops the array).
  void delete_variable(Var var, PyRef keep, bool from_array = false);
  void wait_for_var(Var var);
  void wait_for_all();
  void wait_for_scope(const ScopeHandle& scope);
  void replay(const Graph& graph, const std::vector<ScopeHandle>& captured_scopes, const ScopeHandle& scope);
  // Captures what `recorder` recorded into a Graph (CaptureRecorder::finish).
  [[nodiscard]] Graph capture(CaptureRecorder& recorder);
  [[nodiscard]] std::string in_flight_report() const;
  [[nodiscard]] std::size_t in_flight() const;
  [[nodiscard]] std::uint64_t version(Var var) const;
  void start_trace(std::string path);
  void stop_trace();
  // Closes the engine (see above). `interruptible`: wait for the ops first as wait_for_all's first step does, so that
  // Ctrl-C can stop the wait (and leave the engine open). Idempotent.
  void close(bool interruptible);
  [[nodiscard]] bool closed() const noexcept;

  // Closes every engine still open: the module's atexit hook, before the interpreter stops letting threads in.
  static void close_all();

 private:
  friend class CaptureRecorder;
  class Call;  // a call from outside the engine's ops, counted in calls_ (engine_binding.cpp)

  void record_scope(const ScopeHandle& scope);
  // Throws Error for a wait inside a capture on this thread or from inside a running op of this engine.
  void refuse_inside(const char* api) const;
  // Runs `blocking` on a helper thread and waits, interruptibly, until it returned.
  void wait_on_helper(std::function<void()> blocking);
  void join_helpers(bool all);

  Engine* engine_;   // owned; deleted by close(), and read until then by calls (Call) and running ops
  CancelScope all_;  // the scope of every op pushed without one of the user's
  // Set by close() before it waits for calls_ to drain; seq_cst on both sides (see Call): a Dekker pair with calls_.
  std::atomic<bool> closing_{false};
  std::atomic<std::uint32_t> calls_{0};  // calls under way from outside the engine's ops
  bool destroyed_ = false;               // the engine is gone; written by close() with the GIL held

  std::mutex mutex_;                 // guards scopes_ and helpers_
  std::vector<ScopeHandle> scopes_;  // the user's scopes pushed into, until seen drained
  struct Helper {
    std::thread thread;
    std::shared_ptr<Signal> done;
  };
  std::list<Helper> helpers_;
};

}  // namespace depengine::python
