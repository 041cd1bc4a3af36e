// Diagnostics: what an engine tells about itself, in one object: the error log (which errors no wait reported yet,
// and the error sink: error_log.h), the trace (engine_trace.h), the in-flight report (Engine::InFlightReport, with
// what report hooks add: in_flight_report.h), the stall watch that prints that report when nothing completes for a
// while (stall_watch.h), the shutdown hooks (Engine::AtShutdown), and the observers (observers.h), which the core
// reaches through a pointer of its own, null when there are none.
//
// The op paths reach the error log and the trace through errors() and trace(), members of this object with no
// indirection; everything else here is off those paths.
//
// Thread safety: every member from any thread, but start() (once, by the engine's constructor) and stop_watch() (once,
// by its shutdown, once every op has completed). Lifetime: the engine's; `vars`, `in_flight` and `clock` are the
// engine's and outlive it.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <depengine/engine/detail/engine_trace.h>
#include <depengine/engine/detail/error_log.h>
#include <depengine/engine/detail/in_flight.h>
#include <depengine/engine/detail/in_flight_report.h>
#include <depengine/engine/detail/observers.h>
#include <depengine/engine/detail/run_clock.h>
#include <depengine/engine/detail/stall_watch.h>
#include <depengine/engine/detail/var_table.h>
#include <depengine/engine/engine_hook.h>

namespace depengine::detail {

class Diagnostics {
 public:
  // Errors go to `sink` (EngineOptions::error_sink); stall reports come after `stall_after` without a completion
  // (EngineOptions::kNoStallReport: never).
  Diagnostics(ErrorSink sink, std::chrono::milliseconds stall_after, VarTable& vars, InFlight& in_flight,
              RunClock& clock) noexcept
      : errors_(std::move(sink)), stall_after_(stall_after), vars_(vars), in_flight_(in_flight), clock_(clock) {}
  Diagnostics(const Diagnostics&) = delete;
  Diagnostics& operator=(const Diagnostics&) = delete;

  [[nodiscard]] ErrorLog& errors() noexcept { return errors_; }
  [[nodiscard]] EngineTrace& trace() noexcept { return trace_; }
  // The observers (observers.h): makes them from `observers` and `statistics` (EngineOptions), unless there are none;
  // returns them, or null. Once, by the engine's constructor, before its executors start.
  [[nodiscard]] Observers* observe(std::vector<Observer*> observers, bool statistics,
                                   const std::vector<std::unique_ptr<Executor>>& executors);
  [[nodiscard]] Observers* observers() const noexcept { return observers_.get(); }

  // Starts a trace DEPENGINE_TRACE names, and the stall watch unless reports are off (its reports to `stall_sink`, or
  // stderr if null).
  void start(std::function<void(std::string_view)> stall_sink);
  // Stops the stall watch; the engine's shutdown, once every op has completed.
  void stop_watch() noexcept { stall_watch_.reset(); }

  // What the ops in flight wait for (in_flight_report.h), the pushes blocked at the bound, and what the report hooks
  // add.
  [[nodiscard]] InFlightSnapshot snapshot_in_flight();
  // The ops in flight and what each waits for, as DOT (Engine::InFlightReportDot).
  [[nodiscard]] std::string in_flight_dot();
  // Engine::FlushTrace: writes the trace on now as recorded so far; throws Error if none is on.
  void flush_trace() const;

  // Engine::AtShutdown and Engine::AtReport (engine_hook.h).
  [[nodiscard]] ShutdownHook at_shutdown(std::function<void()> fn);
  [[nodiscard]] ReportHook at_report(std::function<std::string()> describe);
  // Calls every shutdown hook not cancelled, each under its own mutex (a cancel() meanwhile waits for the call).
  void call_hooks() noexcept;

 private:
  // The stall watch's report, after `quiet` without a completion; writes the trace on, if any, with the ops in flight.
  [[nodiscard]] std::string stall_report(std::chrono::nanoseconds quiet);
  [[nodiscard]] std::string flush_trace_for_report(const InFlightSnapshot& snapshot) const;

  ErrorLog errors_;
  EngineTrace trace_;
  const std::chrono::milliseconds stall_after_;
  VarTable& vars_;
  InFlight& in_flight_;
  RunClock& clock_;
  // The engine's share of each hook; those whose handle is gone are dropped at the next registration.
  std::mutex hooks_mutex_;
  std::vector<std::shared_ptr<ShutdownHook::State>> hooks_;       // guarded by hooks_mutex_
  std::vector<std::shared_ptr<ReportHook::State>> report_hooks_;  // guarded by hooks_mutex_
  std::unique_ptr<Observers> observers_;                          // null: none
  // Null when stall reports are off, and once stop_watch() has run.
  std::unique_ptr<StallWatch> stall_watch_;
};

}  // namespace depengine::detail
