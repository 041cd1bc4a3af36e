#include <atomic>
#include <string>

#include <depengine/engine/detail/engine_core.h>
#include <depengine/engine/engine.h>

namespace depengine {

Engine::Engine(EngineOptions options)
    : options_serial_(options.executor_ids_.peek()), core_(std::make_unique<detail::EngineCore>(std::move(options))) {}

Engine::~Engine() { core_->shutdown(); }

Var Engine::NewVariable() { return core_->new_variable(); }

detail::OpRecord* Engine::begin_push(const PushOptions& options, bool async) {
  if (foreign(options.context.executor)) [[unlikely]] {
    throw_foreign_id(options.context.executor, async ? "PushAsync" : "Push");
  }
  return core_->make_record(options, async);
}
// PushAccumulate's: its errors name it. Kept apart from the above, whose every push would pass the name along.
detail::OpRecord* Engine::begin_push(const PushOptions& options, bool async, const char* api) {
  if (foreign(options.context.executor)) [[unlikely]] {
    throw_foreign_id(options.context.executor, api);
  }
  if (async) core_->refuse_async_on_streams(options, api);
  return core_->make_record(options, async);
}
detail::OpFunction& Engine::function_of(detail::OpRecord* op) noexcept { return op->fn; }
void Engine::throw_empty_function(const char* api) {
  throw Error(std::string(api) + ": the function is empty (a null function pointer or an empty std::function)");
}

void Engine::abandon_push(detail::OpRecord* op) noexcept { detail::EngineCore::abandon(op); }
void Engine::finish_push(detail::OpRecord* op, VarList reads, VarList mutates) { core_->push(op, reads, mutates); }
void Engine::finish_push(detail::OpRecord* op, VarList reads, VarList mutates, VarList accumulates) {
  core_->push_accumulating(op, reads, mutates, accumulates);
}

void Engine::delete_variable(Var var, detail::OpFunction deleter, const PushOptions& options) {
  if (foreign(options.context.executor)) [[unlikely]] {
    throw_foreign_id(options.context.executor, "DeleteVariable");
  }
  core_->delete_variable(var, std::move(deleter), options);
}

void Engine::begin_capture() { core_->graphs().begin_capture(); }
void Engine::abandon_capture() noexcept { core_->graphs().abandon_capture(); }
Graph Engine::end_capture() { return core_->graphs().end_capture(); }
void Engine::Replay(const Graph& graph, const ReplayOptions& options) { core_->graphs().replay(graph, options); }
bool Engine::Capturing() const noexcept { return core_->graphs().capturing(); }

void Engine::WaitForVar(Var var) { core_->wait_for_var(var); }
void Engine::WaitForAll() { core_->wait_for_all(); }
void Engine::WaitForFence(const Fence& fence) { core_->wait_for_fence(fence); }
void Engine::WaitForScope(const CancelScope& scope) { core_->wait_for_scope(scope); }
void Engine::ClearErrors(VarList vars) { core_->clear_errors(vars); }
std::uint64_t Engine::Version(Var var) const { return core_->version(var); }
std::size_t Engine::InFlight() const noexcept { return core_->in_flight_now(); }

StatisticsTable Engine::Statistics() const { return core_->statistics().Table(); }

std::string Engine::InFlightReport() const { return core_->diagnostics().snapshot_in_flight().text; }
std::string Engine::InFlightReportDot() const { return core_->diagnostics().in_flight_dot(); }
std::optional<std::string> Engine::FailedOpName(const std::exception_ptr& error) const {
  return core_->diagnostics().errors().op_of(error);
}
Executor& Engine::executor(ExecutorRef executor) const {
  if (foreign(executor)) [[unlikely]] {
    throw_foreign_id(executor, "Engine::executor");
  }
  return core_->executor_at(executor.index());
}

void Engine::throw_foreign_id(ExecutorRef executor, const char* api) const {
  throw Error(std::string(api) + ": the ExecutorId (index " + std::to_string(executor.index()) +
              ") was issued by the EngineOptions of another engine; an id names an executor only on the engine built "
              "from the options whose add() returned it");
}

void Engine::throw_not_added_type(std::uint32_t index, const Executor& found) {
  throw Error("Engine::executor(ExecutorId): executor " + std::to_string(index) + " is now '" +
              std::string(found.name()) +
              "', not of the type its id was issued for (DEPENGINE_ENGINE_TYPE=NaiveEngine replaces CPU executors by "
              "inline ones; or EngineOptions::executors was edited after the add)");
}

std::uint32_t detail::OptionsSerial::get() {
  // relaxed: only uniqueness matters, which the atomic increment gives; nothing is published with the value.
  static std::atomic<std::uint32_t> next{1};
  if (value_ == 0) value_ = next.fetch_add(1, std::memory_order_relaxed);
  return value_;
}
ShutdownHook Engine::AtShutdown(std::function<void()> fn) { return core_->diagnostics().at_shutdown(std::move(fn)); }
ReportHook Engine::AtReport(std::function<std::string()> describe) {
  return core_->diagnostics().at_report(std::move(describe));
}
void Engine::StartTrace(std::string path) { core_->diagnostics().trace().start(std::move(path)); }
void Engine::StopTrace() { core_->stop_trace(); }
void Engine::FlushTrace() { core_->diagnostics().flush_trace(); }
std::string Engine::TraceCriticalPath() const { return core_->diagnostics().trace().critical_path(); }

}  // namespace depengine
