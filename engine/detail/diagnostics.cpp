// Diagnostics: the stall watch and its report, the in-flight report with the report hooks, the shutdown hooks, and
// flushing the trace (diagnostics.h).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include <depengine/engine/detail/diagnostics.h>
#include <depengine/engine/engine.h>

namespace depengine::detail {

void Diagnostics::start(std::function<void(std::string_view)> stall_sink) {
  if (const char* path = std::getenv("DEPENGINE_TRACE"); path != nullptr && *path != '\0') {
    trace_.start(EngineTrace::env_path(path));
  }
  if (stall_after_ == EngineOptions::kNoStallReport) return;
  if (stall_sink == nullptr) {
    stall_sink = [](std::string_view report) {
      std::fprintf(stderr, "%.*s", static_cast<int>(report.size()), report.data());
    };
  }
  stall_watch_ = std::make_unique<StallWatch>(
      stall_after_, clock_,
      StallWatch::Probe{.retired = [this] { return std::uint64_t{in_flight_.retired()}; },
                        .in_flight = [this] { return in_flight_.upper_bound(); },
                        .report = [this](std::chrono::nanoseconds quiet) { return stall_report(quiet); },
                        .sink = std::move(stall_sink)});
}

// The headline says which kind of quiet this is: ops waiting for what has not happened (a stall), or only ops that run
// long, which a user should not be told is a hang; the footer, how to change or silence these reports.
std::string Diagnostics::stall_report(std::chrono::nanoseconds quiet) {
  const InFlightSnapshot snapshot = snapshot_in_flight();
  const std::string quiet_text = "no op has completed for " + duration_text(quiet);
  std::string out;
  if (snapshot.stuck) {
    out = "depengine: stalled: " + quiet_text + ", and ops in flight wait for what has not happened (below)\n";
  } else if (snapshot.running > 0) {
    out = "depengine: " + quiet_text + ", while " + std::to_string(snapshot.running) +
          " ops run (below, with how long): busy, not a stall, unless a function waits inside for what will not come\n";
  } else {
    out = "depengine: " + quiet_text + "\n";
  }
  out += snapshot.text;
  out += flush_trace_for_report(snapshot);
  out += "  (stall reports come after EngineOptions::stall_report_after without a completion: here " +
         duration_text(stall_after_) + ", by default " + duration_text(EngineOptions::kDefaultStallReportAfter) +
         "; DEPENGINE_STALL_REPORT=<seconds> sets the time, and DEPENGINE_STALL_REPORT=0 turns them off, as does "
         "EngineOptions::kNoStallReport)\n";
  return out;
}

void Diagnostics::flush_trace() const {
  TraceRecorder* recorder = trace_.recorder();
  if (recorder == nullptr) throw Error("FlushTrace: no trace is on");
  recorder->write();
}

// For a stall report: writes the trace on, if any, with the ops in flight marked, and says where (or why it could not).
std::string Diagnostics::flush_trace_for_report(const InFlightSnapshot& snapshot) const {
  TraceRecorder* recorder = trace_.recorder();
  if (recorder == nullptr) return {};
  try {
    std::vector<TraceRecorder::Mark> marks;
    marks.reserve(snapshot.ops.size());
    for (const InFlightSnapshot::Op& op : snapshot.ops) marks.push_back(TraceRecorder::Mark{op.name, op.state});
    recorder->write(marks);
    return "the trace so far is in " + recorder->path() + "\n";
  } catch (const Error& e) {
    return std::string("the trace so far could not be written: ") + e.what() + "\n";
  }
}

ShutdownHook Diagnostics::at_shutdown(std::function<void()> fn) {
  auto state = std::make_shared<ShutdownHook::State>();
  state->fn = std::move(fn);
  std::lock_guard lock(hooks_mutex_);
  // A state the engine alone holds belongs to a hook destroyed (cancelled) since: drop it.
  std::erase_if(hooks_, [](const std::shared_ptr<ShutdownHook::State>& hook) { return hook.use_count() == 1; });
  hooks_.push_back(state);
  return ShutdownHook(std::move(state));
}

ReportHook Diagnostics::at_report(std::function<std::string()> describe) {
  auto state = std::make_shared<ReportHook::State>();
  state->fn = std::move(describe);
  std::lock_guard lock(hooks_mutex_);
  std::erase_if(report_hooks_, [](const std::shared_ptr<ReportHook::State>& hook) { return hook.use_count() == 1; });
  report_hooks_.push_back(state);
  return ReportHook(std::move(state));
}

std::string Diagnostics::in_flight_dot() { return build_in_flight_dot(vars_, in_flight_.now(), clock_); }

InFlightSnapshot Diagnostics::snapshot_in_flight() {
  const std::size_t count = in_flight_.now();
  InFlightSnapshot snapshot = build_in_flight_report(vars_, count, clock_);
  for (const InFlight::Blocked& blocked : in_flight_.blocked()) add_blocked(snapshot, blocked, count, in_flight_.max());
  std::vector<std::shared_ptr<ReportHook::State>> hooks;
  {
    std::lock_guard lock(hooks_mutex_);
    hooks = report_hooks_;
  }
  for (const auto& hook : hooks) {
    std::lock_guard lock(hook->mutex);  // a cancel() meanwhile waits for the call to return
    if (!hook->done) snapshot.text += hook->fn();
  }
  return snapshot;
}

// Calls every hook not cancelled, each under its own mutex (a cancel() meanwhile waits for the call to return).
void Diagnostics::call_hooks() noexcept {
  std::vector<std::shared_ptr<ShutdownHook::State>> hooks;
  {
    std::lock_guard lock(hooks_mutex_);
    hooks.swap(hooks_);
  }
  for (const auto& hook : hooks) {
    std::lock_guard lock(hook->mutex);
    if (hook->done) continue;
    hook->done = true;
    try {
      hook->fn();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "depengine: a shutdown hook threw: %s\n", e.what());
    } catch (...) {
      std::fprintf(stderr, "depengine: a shutdown hook threw an exception not derived from std::exception\n");
    }
    hook->fn = nullptr;
  }
}

Observers* Diagnostics::observe(std::vector<Observer*> observers, bool statistics,
                                const std::vector<std::unique_ptr<Executor>>& executors) {
  for (std::size_t i = 0; i < observers.size(); ++i) {
    if (observers[i] == nullptr) throw Error("EngineOptions::observers[" + std::to_string(i) + "] is null");
  }
  if (observers.empty() && !statistics) return nullptr;
  observers_ = std::make_unique<Observers>(std::move(observers), statistics, executors);
  return observers_.get();
}

}  // namespace depengine::detail
