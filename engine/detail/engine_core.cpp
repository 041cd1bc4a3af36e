#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <depengine/engine/detail/engine_core.h>
#include <depengine/engine/detail/late_completions.h>

namespace depengine::detail {
namespace {

std::atomic<std::uint32_t> g_next_engine_id{1};

// EngineOptions::stall_report_after, unless DEPENGINE_STALL_REPORT overrides it: a number of seconds above 0, or 0 (or
// "off") for EngineOptions::kNoStallReport.
std::chrono::milliseconds stall_report_after(std::chrono::milliseconds option) {
  if (option.count() == 0) {
    throw Error(
        "EngineOptions::stall_report_after is 0, which meant off when stall reports were off by default; they are on "
        "now: write EngineOptions::kNoStallReport to turn them off, or give a time");
  }
  if (option.count() < 0) throw Error("EngineOptions::stall_report_after is negative");
  const char* seconds = std::getenv("DEPENGINE_STALL_REPORT");
  if (seconds == nullptr || *seconds == '\0') return option;
  if (std::string_view(seconds) == "off") return EngineOptions::kNoStallReport;
  char* end = nullptr;
  const double value = std::strtod(seconds, &end);
  if (end == seconds || *end != '\0' || !(value >= 0) || value > 1e6) {
    throw Error("DEPENGINE_STALL_REPORT='" + std::string(seconds) +
                "': expected a number of seconds, or 0 (or off) to turn stall reports off");
  }
  if (value == 0) return EngineOptions::kNoStallReport;
  return std::chrono::milliseconds(std::max<std::int64_t>(1, static_cast<std::int64_t>(value * 1000)));
}

// The run clock's period for a stall watch reporting after `after` (none when reports are off): a fraction of it, so
// that "running for" is told to that fraction, but not below a millisecond, a watch that wakes at most 1,000 times a
// second even when a test sets a few milliseconds.
std::chrono::nanoseconds run_clock_period(std::chrono::milliseconds after) {
  if (after == EngineOptions::kNoStallReport) return std::chrono::nanoseconds{0};
  return std::max<std::chrono::nanoseconds>(after / RunClock::kTicksPerReport, std::chrono::milliseconds(1));
}

// Whether an executor issues ahead (a stream executor): the engine then carries signals. Null entries are skipped here
// and refused by the constructor.
bool any_issues_ahead(const std::vector<std::unique_ptr<Executor>>& executors) noexcept {
  for (const auto& executor : executors) {
    if (executor != nullptr && executor->issues_ahead()) return true;
  }
  return false;
}

// DEPENGINE_ENGINE_TYPE=NaiveEngine (MXNet's switch for debugging): every CPU executor is replaced by an inline
// executor, so each op runs on the thread that makes it ready, before the push returns when it is ready. Stream
// executors stay, and so do executors whose ops need a thread of their own (Executor::inline_replaceable). Unset or
// ThreadedEngine: the executors as given.
std::vector<std::unique_ptr<Executor>> apply_engine_type(std::vector<std::unique_ptr<Executor>> executors) {
  const char* type = std::getenv("DEPENGINE_ENGINE_TYPE");
  if (type == nullptr || *type == '\0' || std::string_view(type) == "ThreadedEngine") return executors;
  if (std::string_view(type) != "NaiveEngine") {
    throw Error("DEPENGINE_ENGINE_TYPE='" + std::string(type) + "': expected NaiveEngine or ThreadedEngine");
  }
  for (auto& executor : executors) {
    if (executor != nullptr && executor->inline_replaceable()) executor = std::make_unique<InlineExecutor>();
  }
  return executors;
}

// DEPENGINE_PROFILE: unset, empty or 0: off; 1: statistics on, and their table printed at the engine's destruction.
bool profile_from_env() {
  const char* value = std::getenv("DEPENGINE_PROFILE");
  if (value == nullptr || *value == '\0' || std::string_view(value) == "0") return false;
  if (std::string_view(value) == "1") return true;
  throw Error("DEPENGINE_PROFILE='" + std::string(value) +
              "': expected 1 (per-name statistics, printed at the engine's destruction) or 0");
}

}  // namespace

EngineCore::EngineCore(EngineOptions options)
    : executors_(apply_engine_type(std::move(options.executors))),
      has_streams_(any_issues_ahead(executors_)),
      gate_(options.cancel_on_destruction),
      stall_after_(stall_report_after(options.stall_report_after)),
      run_clock_(run_clock_period(stall_after_)),
      vars_(g_next_engine_id.fetch_add(1, std::memory_order_relaxed), has_streams_),  // relaxed: only uniqueness
      tracker_(TrackerOptions{.max_axes = kMaxEngineAxes}),
      diagnostics_(std::move(options.error_sink), stall_after_, vars_, in_flight_, run_clock_),
      in_flight_(options.max_in_flight, has_streams_ ? 0 : options.help_above, executors_) {
  if (executors_.empty()) throw Error("EngineOptions::executors is empty: an engine needs at least one executor");
  if (options.max_in_flight == 0) throw Error("EngineOptions::max_in_flight must be at least 1");
  if (options.help_above >= options.max_in_flight) {
    throw Error("EngineOptions::help_above (" + std::to_string(options.help_above) + ") must be under max_in_flight (" +
                std::to_string(options.max_in_flight) +
                "): a push reaches the bound before it would help; 0 turns helping off");
  }
  std::size_t axes = 0;
  for (const auto& executor : executors_) {
    if (executor == nullptr) throw Error("EngineOptions::executors holds a null executor");
    if (executor->stream_facet() != nullptr) axes += executor->stream_facet()->axis_count();
  }
  if (axes > kMaxEngineAxes) {
    throw Error("EngineOptions::executors have " + std::to_string(axes) +
                " streams in all; an engine supports at most " + std::to_string(kMaxEngineAxes) +
                " (kMaxEngineAxes, the capacity of a wait frontier): give the stream executors fewer devices or fewer "
                "streams per device (StreamExecutorOptions), or split the devices over several engines");
  }
  profile_at_exit_ = profile_from_env();
  observing_ = diagnostics_.observe(std::move(options.observers), options.statistics || profile_at_exit_, executors_);
  internal_.start(*this);
  for (const auto& executor : executors_) executor->start(*this);
  diagnostics_.start(std::move(options.stall_sink));
}

EngineCore::~EngineCore() = default;

void EngineCore::shutdown() noexcept {
  gate_.close();
  in_flight_.close();
  in_flight_.wait_for_zero();
  diagnostics_.stop_watch();
  // acquire: pairs with the release decrement of ~ForeignThread; once it reads 0, every thread that completed or
  // released an op from outside is done with the engine. The wait is short (the tail of a completion or of an
  // executor's submit), so it yields rather than sleeps.
  while (foreign_threads_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
  diagnostics_.call_hooks();
  LateCompletions::forget(this);  // before the last errors go to the sink: a late call's error is among them
  errors().sink_unreported();
  if (trace().on()) {
    try {
      stop_trace();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "depengine: %s\n", e.what());
    }
  }
  for (const auto& executor : executors_) executor->stop();
  if (profile_at_exit_) {
    try {
      const std::string table = diagnostics_.observers()->statistics()->Table().ToString();
      std::fprintf(stderr, "%s", table.c_str());
    } catch (const std::exception& e) {  // out of memory
      std::fprintf(stderr, "depengine: DEPENGINE_PROFILE: %s\n", e.what());
    }
  }
}

const OpStatistics& EngineCore::statistics() const {
  const Observers* observers = observing_;
  if (observers == nullptr || observers->statistics() == nullptr) {
    throw Error("Statistics: statistics are off; set EngineOptions::statistics (or DEPENGINE_PROFILE=1)");
  }
  return *observers->statistics();
}

Executor& EngineCore::executor_at(std::uint32_t index) const {
  if (index >= executors_.size()) {
    throw Error("context names executor " + std::to_string(index) + " but the engine has " +
                std::to_string(executors_.size()));
  }
  return *executors_[index];
}

std::uint32_t EngineCore::executor_index(const Executor* executor) const noexcept {
  std::uint32_t index = 0;
  while (executors_[index].get() != executor) ++index;  // an executor of this engine: found
  return index;
}

}  // namespace depengine::detail

namespace depengine {

void Completion::operator()(std::exception_ptr error) const { (*this)(std::move(error), {}); }

void Completion::operator()(std::exception_ptr error, std::span<const FrontierEntry> learned) const {
  std::uint64_t expected = ticket_;
  // acq_rel: the release publishes this thread's work on the op to whoever recycles the record (release_hold's
  // acquire); the acquire pairs with execute()'s stores before the function ran. Only one call can win.
  if (!op_->ticket.compare_exchange_strong(expected, ticket_ + 1, std::memory_order_acq_rel,
                                           std::memory_order_relaxed)) {
    // The late call of an op the engine completed when its function threw is absorbed (late_completions.h).
    if (detail::LateCompletions::absorb(op_, ticket_, error)) return;
    throw Error("Completion called more than once for the same op");
  }
  op_->engine->complete_async(op_, std::move(error), learned);
}

}  // namespace depengine
