#include <depengine/engine/detail/engine_core.h>
#include <depengine/engine/engine.h>

namespace depengine {

Engine::Engine(EngineOptions options) : core_(std::make_unique<detail::EngineCore>(std::move(options))) {}

Engine::~Engine() { core_->shutdown(); }

Var Engine::NewVariable() { return core_->new_variable(); }

detail::OpRecord* Engine::begin_push(const PushOptions& options, bool async) {
  return core_->make_record(options, async);
}
detail::OpFunction& Engine::function_of(detail::OpRecord* op) noexcept { return op->fn; }
void Engine::throw_empty_function(const char* api) {
  throw Error(std::string(api) + ": the function is empty (a null function pointer or an empty std::function)");
}

void Engine::abandon_push(detail::OpRecord* op) noexcept { detail::EngineCore::abandon(op); }
void Engine::finish_push(detail::OpRecord* op, VarList reads, VarList mutates) { core_->push(op, reads, mutates); }

void Engine::delete_variable(Var var, detail::OpFunction deleter, const PushOptions& options) {
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

std::string Engine::InFlightReport() const { return core_->diagnostics().snapshot_in_flight().text; }
std::optional<std::string> Engine::FailedOpName(const std::exception_ptr& error) const {
  return core_->diagnostics().errors().op_of(error);
}
Executor& Engine::executor(std::uint32_t index) const { return core_->executor_at(index); }
ShutdownHook Engine::AtShutdown(std::function<void()> fn) { return core_->diagnostics().at_shutdown(std::move(fn)); }
ReportHook Engine::AtReport(std::function<std::string()> describe) {
  return core_->diagnostics().at_report(std::move(describe));
}
void Engine::StartTrace(std::string path) { core_->diagnostics().trace().start(std::move(path)); }
void Engine::StopTrace() { core_->stop_trace(); }
void Engine::FlushTrace() { core_->diagnostics().flush_trace(); }

}  // namespace depengine
