#include "engine/detail/engine_core.h"

#include <algorithm>
#include <cassert>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <utility>

#include "engine/detail/notification.h"

namespace depengine::detail {
namespace {

std::atomic<std::uint32_t> g_next_engine_id{1};
// DEPENGINE_TRACE: the first engine of the process traced to `path` writes `path`, the next ones `path.2`, ...
std::string env_trace_path(const std::string& path) {
  static std::mutex mutex;
  static std::map<std::string, std::uint32_t> engines;  // per path, engines traced to it so far
  std::lock_guard lock(mutex);
  const std::uint32_t nth = ++engines[path];
  return nth == 1 ? path : path + "." + std::to_string(nth);
}

// What the calling thread is running: set by execute() around an op's function, restored after (executors nest
// when an inline op pushes a ready op). Lets Completion route successors into the running executor's ready list,
// exempts pushes from inside ops from back-pressure, and detects waits that would deadlock.
struct Running {
  EngineCore* engine = nullptr;
  TaskList* ready = nullptr;
};
thread_local Running t_running;

class RunningScope {
 public:
  RunningScope(EngineCore* engine, TaskList* ready) noexcept : saved_(t_running) { t_running = {engine, ready}; }
  ~RunningScope() { t_running = saved_; }
  RunningScope(const RunningScope&) = delete;
  RunningScope& operator=(const RunningScope&) = delete;

 private:
  Running saved_;
};

VarState* state_of(const VarUse& use) noexcept { return static_cast<VarState*>(use.var); }

// Sorts uses by variable address and folds duplicates (a mutation wins over a read). Returns the distinct count.
std::uint32_t sort_and_fold(VarUse* uses, std::uint32_t count) noexcept {
  auto by_var = [](const VarUse& a, const VarUse& b) { return a.var < b.var; };
  if (count <= 16) {
    for (std::uint32_t i = 1; i < count; ++i) {  // insertion sort: the common lists are tiny
      VarUse key = uses[i];
      std::uint32_t j = i;
      for (; j > 0 && by_var(key, uses[j - 1]); --j) uses[j] = uses[j - 1];
      uses[j] = key;
    }
  } else {
    std::sort(uses, uses + count, by_var);
  }
  std::uint32_t distinct = 0;
  for (std::uint32_t i = 0; i < count; ++i) {
    if (distinct > 0 && uses[distinct - 1].var == uses[i].var) {
      if (uses[i].access == Access::kWrite) uses[distinct - 1].access = Access::kWrite;
    } else {
      uses[distinct++] = uses[i];
    }
  }
  return distinct;
}

// The signal of an op that ran on the host: nothing to wait for (it completed after everything it waited for had).
const VarSignal kNoSignal;

static_assert(std::is_same_v<VarSignal, WaitFrontier>, "an op's wait frontier is made of its variables' signals");

void recycle_record(OpRecord* op) noexcept {
  op->fn.reset();
  op->error = nullptr;
  op->trim_uses();
  op->num_uses = 0;
  RecordPool::release(op);
}

}  // namespace

ParkWaiter::ParkWaiter(OpRecord* owner) noexcept : TrackerWaiter(&EngineCore::unparked), op(owner) {}
FenceWaiter::FenceWaiter(OpRecord* owner) noexcept : TimelineWaiter(&EngineCore::fence_done), op(owner) {}

EngineCore::EngineCore(EngineOptions options)
    : id_(g_next_engine_id.fetch_add(1, std::memory_order_relaxed)),  // relaxed: only uniqueness matters
      max_in_flight_(options.max_in_flight),
      low_water_(options.max_in_flight * 3 / 4),
      executors_(std::move(options.executors)),
      tracker_(TrackerOptions{.max_axes = kMaxEngineAxes}) {
  if (executors_.empty()) throw Error("EngineOptions::executors is empty: an engine needs at least one executor");
  if (max_in_flight_ == 0) throw Error("EngineOptions::max_in_flight must be at least 1");
  std::size_t axes = 0;
  for (const auto& executor : executors_) {
    if (executor == nullptr) throw Error("EngineOptions::executors holds a null executor");
    axes += executor->axis_count();
    has_streams_ = has_streams_ || executor->issues_ahead();
  }
  if (axes > kMaxEngineAxes) {
    throw Error("EngineOptions::executors have " + std::to_string(axes) +
                " streams in all; an engine supports at most " + std::to_string(kMaxEngineAxes) +
                " (the capacity of a wait frontier)");
  }
  internal_.start(*this);
  for (const auto& executor : executors_) executor->start(*this);
  if (const char* path = std::getenv("DEPENGINE_TRACE"); path != nullptr && *path != '\0') {
    start_trace(env_trace_path(path));
  }
}

void EngineCore::InternalExecutor::submit(Task& task) noexcept {
  TaskList ready;
  host_->execute(task, -1, ready);
  while (Task* next = ready.pop_front()) next->executor()->submit(*next);
}

EngineCore::~EngineCore() = default;

void EngineCore::shutdown() noexcept {
  wait_in_flight_at_most(0);
  // acquire: pairs with the release decrement at the end of complete_async(); once it reads 0, every thread that
  // completed an op from outside is done with the engine. The wait is a few instructions long (the tail of a
  // completion), so it yields rather than sleeps.
  while (foreign_completers_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
  {
    std::lock_guard lock(errors_mutex_);
    if (first_error_ != nullptr && !first_error_reported_) {
      std::string what = "unknown exception";
      try {
        std::rethrow_exception(first_error_);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      std::fprintf(stderr, "depengine: engine destroyed with an error no wait reported: %s\n", what.c_str());
    }
  }
  if (trace_.load(std::memory_order_relaxed) != nullptr) {  // relaxed: only this thread starts and stops traces now
    try {
      stop_trace();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "depengine: %s\n", e.what());
    }
  }
  for (const auto& executor : executors_) executor->stop();
}

void EngineCore::start_trace(std::string path) {
  std::lock_guard lock(traces_mutex_);
  // relaxed: traces_mutex_ orders starts and stops.
  if (trace_.load(std::memory_order_relaxed) != nullptr) {
    throw Error("StartTrace: a trace is already on (to '" + trace_.load(std::memory_order_relaxed)->path() + "')");
  }
  TraceRecorder* recorder = traces_.emplace_back(std::make_unique<TraceRecorder>(std::move(path))).get();
  // release: pairs with the acquire loads in record_for() and the recording paths, which then see it constructed.
  trace_.store(recorder, std::memory_order_release);
}

void EngineCore::stop_trace() {
  forbid_inside_op("StopTrace");
  TraceRecorder* recorder = nullptr;
  {
    std::lock_guard lock(traces_mutex_);
    recorder = trace_.load(std::memory_order_relaxed);  // relaxed: traces_mutex_ orders starts and stops
    if (recorder == nullptr) throw Error("StopTrace: no trace is on");
  }
  wait_in_flight_at_most(0);
  {
    std::lock_guard lock(traces_mutex_);
    trace_.store(nullptr, std::memory_order_relaxed);  // relaxed: nothing is published by clearing it
  }
  recorder->write();
}

Executor& EngineCore::executor_at(std::uint32_t index) const {
  if (index >= executors_.size()) {
    throw Error("context names executor " + std::to_string(index) + " but the engine has " +
                std::to_string(executors_.size()));
  }
  return *executors_[index];
}

// --- Variables -------------------------------------------------------------------------------------------------

Var EngineCore::new_variable() {
  std::lock_guard lock(vars_mutex_);
  VarState* var = free_vars_;
  if (var != nullptr) {
    free_vars_ = var->free_next;
  } else {
    var = &vars_.emplace_back();
    var->slot = static_cast<std::uint32_t>(vars_.size() - 1);
  }
  // relaxed: the slot is not shared yet; the handle reaches other threads through the user's own synchronisation.
  return Var(var, id_, var->generation.load(std::memory_order_relaxed));
}

// Cold: builds the message for a bad handle. Returns the state of a good one.
VarState* EngineCore::checked_state(const Var& var, const char* api) const {
  if (var.is_null()) throw Error(std::string(api) + ": null Var (default-constructed handle)");
  if (var.engine_ != id_) throw Error(std::string(api) + ": Var belongs to another engine");
  // relaxed: an early check for a handle already dead; push re-checks under the variable's lock.
  if (var.state_->generation.load(std::memory_order_relaxed) != var.generation_) {
    throw Error(std::string(api) + ": Var was deleted (DeleteVariable) and may not be used again");
  }
  return var.state_;
}

void EngineCore::recycle_var(VarState* var) noexcept {
  assert(var->idle_locked() && "variable recycled while ops still use it");
  var->error = nullptr;
  var->reset_idle();
  std::lock_guard lock(vars_mutex_);
  var->free_next = free_vars_;
  free_vars_ = var;
}

std::uint64_t EngineCore::version(Var var) const { return checked_state(var, "Version")->version(); }

// --- Push ------------------------------------------------------------------------------------------------------

OpRecord* EngineCore::make_record(const PushOptions& options, bool async) {
  Executor* executor = &executor_at(options.context.executor);
  if (async && executor->issues_ahead()) {
    throw Error("PushAsync: context names executor " + std::to_string(options.context.executor) + " (" +
                std::string(executor->name()) +
                "), a stream executor, whose ops complete when their device work does; push with Push and enqueue "
                "the work on RunContext::stream");
  }
  check_fences(options.wait_fences, "wait_fences");
  check_fences(options.signal_fences, "signal_fences");
  return record_for(executor, options, async);
}

// A pooled record for an op of `executor`, with every field a push sets from its options.
OpRecord* EngineCore::record_for(Executor* executor, const PushOptions& options, bool async) {
  OpRecord* op = RecordPool::acquire();
  op->prepare(this, executor, options.priority);
  op->place(options.context.device, options.context.stream_kind, options.context.stream);
  if (!options.wait_fences.empty()) op->wait_fences = options.wait_fences;
  if (!options.signal_fences.empty()) op->signal_fences = options.signal_fences;
  op->name = options.name;
  op->async = async;
  op->no_skip = options.no_skip;
  op->deletes_var = false;
  op->internal = false;
  // relaxed: only whether a trace is on; the recording paths load the pointer again, with acquire, before using it.
  if (trace_.load(std::memory_order_relaxed) != nullptr && executor != &internal_)
    op->trace_op = TraceRecorder::next_op();
  return op;
}

void EngineCore::check_fences(const FenceList& fences, const char* field) {
  for (std::size_t i = 0; i < fences.size(); ++i) {
    if (fences[i].timeline == nullptr) {
      throw Error("PushOptions::" + std::string(field) + "[" + std::to_string(i) + "] names a null timeline");
    }
  }
}

void EngineCore::gather_uses(OpRecord* op, VarList reads, VarList mutates) const {
  const std::size_t total = reads.size() + mutates.size();
  op->reserve_uses(total);
  VarUse* out = op->uses;
  // Handles are checked for their engine here, before their pointer is followed; whether they are still alive is
  // checked by publish() under the variables' locks, the only place where the answer cannot change.
  auto add = [&](const Var& var, Access access) {
    if (var.engine_ != id_ || var.is_null()) [[unlikely]]
      (void)checked_state(var, op->async ? "PushAsync" : "Push");
    *out++ = VarUse{var.state_, op, nullptr, access, var.generation_};
  };
  for (const Var& var : reads) add(var, Access::kRead);
  for (const Var& var : mutates) add(var, Access::kWrite);
  op->num_uses =
      total <= 1 ? static_cast<std::uint32_t>(total) : sort_and_fold(op->uses, static_cast<std::uint32_t>(total));
}

// Appends `op` to the queue of every variable it uses, all locks held at once (see var_queue.h). Returns false,
// appending nothing, if a variable was deleted since its handle was checked. DeleteVariable's op moves its variable's
// generation on while the lock is held, so no push can slip in behind it.
bool EngineCore::publish(OpRecord* op) {
  VarUse* const uses = op->uses;
  const std::uint32_t count = op->num_uses;
  for (std::uint32_t i = 0; i < count; ++i) uses[i].var->lock();
  bool alive = true;
  for (std::uint32_t i = 0; i < count && alive; ++i) {
    // relaxed: generation is written only under this lock, which we hold.
    alive = state_of(uses[i])->generation.load(std::memory_order_relaxed) == uses[i].tag;
  }
  if (alive) {
    // + 1: our own grant, given after the unlocks; + 1 more for the wait fences, given when the last is reached.
    op->reset_wait(static_cast<std::int32_t>(count) + 1 + (op->wait_fences.empty() ? 0 : 1));
    if (op->deletes_var) {
      VarState* var = state_of(uses[0]);
      // relaxed: under the lock, which every reader of generation that matters holds too.
      var->generation.store(var->generation.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    }
    ReadyList ready;  // stays empty: the op waits for our grant
    for (std::uint32_t i = 0; i < count; ++i) uses[i].var->append_locked(uses[i], ready);
    assert(ready.empty());
  }
  for (std::uint32_t i = 0; i < count; ++i) uses[i].var->unlock();
  return alive;
}

void EngineCore::submit_new(OpRecord* op, const char* api) {
  admit(op->internal || t_running.engine == this);
  if (!publish(op)) {
    leave();
    recycle_record(op);
    throw Error(std::string(api) + ": a variable of the op was deleted (DeleteVariable) and may not be used again");
  }
  if (!op->wait_fences.empty()) arm_fence(op);  // before our grant: the op cannot run (and recycle) meanwhile
  grant(op, nullptr);
}

// Gives one grant to `op`. The last one hands it on (through make_ready when signals are carried): to `ready`, the
// list of a running executor, if given; else to its executor.
void EngineCore::grant(OpRecord* op, TaskList* ready) noexcept {
  if (!op->grant()) return;
  TaskList own;
  TaskList& out = ready != nullptr ? *ready : own;
  if (has_streams_) {
    make_ready(op, out);
  } else {
    out.push_back(op);
  }
  if (Task* task = own.pop_front()) task->executor()->submit(*task);
}

void EngineCore::abandon(OpRecord* op) noexcept { recycle_record(op); }

void EngineCore::push(OpRecord* op, VarList reads, VarList mutates) {
  try {
    gather_uses(op, reads, mutates);
  } catch (...) {
    recycle_record(op);
    throw;
  }
  submit_new(op, op->async ? "PushAsync" : "Push");
}

void EngineCore::delete_variable(Var var, OpFunction deleter, const PushOptions& options) {
  VarState* state = checked_state(var, "DeleteVariable");
  OpRecord* op = make_record(options, false);
  op->no_skip = true;  // the deleter runs whatever error the variable carries
  op->deletes_var = true;
  op->reserve_uses(1);
  op->uses[0] = VarUse{state, op, nullptr, Access::kWrite, var.generation_};
  op->num_uses = 1;
  op->fn = std::move(deleter);
  submit_new(op, "DeleteVariable");
}

// Pushes an engine-internal op that uses `var` alone, exclusively, without counting as a mutation.
void EngineCore::push_sync_op(VarState* var, std::uint32_t generation, OpFunction fn) {
  OpRecord* op = record_for(&internal_, PushOptions{.no_skip = true}, false);
  op->internal = true;
  op->reserve_uses(1);
  op->uses[0] = VarUse{var, op, nullptr, Access::kSync, generation};
  op->num_uses = 1;
  op->fn = std::move(fn);
  submit_new(op, "WaitForVar");
}

// --- Run and complete ------------------------------------------------------------------------------------------

// Whether the op is to be skipped: it already has an error (from a failed stream it waited for), or, unless it is
// no_skip, an input carries one (which becomes the op's).
bool EngineCore::find_input_error(OpRecord* op) const noexcept {
  if (!op->no_skip) {
    for (std::uint32_t i = 0; i < op->num_uses && op->error == nullptr; ++i) {
      const std::exception_ptr& input_error = state_of(op->uses[i])->error;
      if (input_error != nullptr) [[unlikely]]
        op->error = input_error;
    }
  }
  return op->error != nullptr;
}

void EngineCore::execute(Task& task, int worker, TaskList& ready) noexcept {
  OpRecord* op = static_cast<OpRecord*>(&task);
  if (find_input_error(op)) {  // skipped: the error passes on to what the op mutates
    finish(op, ready, skipped_signal(op));
    return;
  }
  const RunningScope running(this, &ready);
  const RunContext ctx{op->name, worker, op->executor()};
  TraceRecorder* trace =
      op->trace_op != 0 ? trace_.load(std::memory_order_acquire) : nullptr;  // acquire: pairs with start_trace()
  const std::int64_t start = trace != nullptr ? trace->now() : 0;
  if (!op->async) {
    try {
      op->fn(ctx, nullptr);
    } catch (...) {
      op->error = std::current_exception();
      note_error(op->error);
    }
    if (trace != nullptr) trace_cpu_op(op, worker, start);
    finish(op, ready, ran_signal());
    return;
  }
  // relaxed: the record is ours until the Completion below is handed to the function; the user passes that
  // Completion to other threads through synchronisation of their own, which carries these stores with it.
  op->holds.store(2, std::memory_order_relaxed);
  const Completion done(op, op->ticket.load(std::memory_order_relaxed));
  try {
    op->fn(ctx, &done);
  } catch (...) {
    const std::exception_ptr thrown = std::current_exception();
    try {
      done(thrown);  // the function failed before completing its op: that is the op's error
    } catch (const Error&) {
      note_error(thrown);  // it failed after completing: not lost, reported by WaitForAll
    }
  }
  if (trace != nullptr) trace_cpu_op(op, worker, start);  // the record is ours until release_hold below
  release_hold(op);
}

void EngineCore::complete_async(OpRecord* op, std::exception_ptr error) {
  if (error != nullptr) {
    op->error = std::move(error);
    note_error(op->error);
  }
  if (t_running.engine == this) {  // completed from inside an op's function: successors join that executor's list
    signal_fences(op, op->error);
    complete_uses(op, *t_running.ready, ran_signal());
    leave();
    release_hold(op);
    return;
  }
  // A thread of the user's own. Once leave() retires the op, shutdown() may find nothing in flight while this thread
  // still reads the engine (leave()'s wake check, the submits below), so it announces itself; shutdown() waits for
  // every such thread to be gone before the engine is freed. Pool and inline threads need no such count: their
  // executors' stop() waits for them.
  // relaxed: the retire in leave() (seq_cst) publishes this increment to shutdown()'s seq_cst read of the counts.
  foreign_completers_.fetch_add(1, std::memory_order_relaxed);
  TaskList ready;
  signal_fences(op, op->error);
  complete_uses(op, ready, ran_signal());
  leave();
  while (Task* task = ready.pop_front()) task->executor()->submit(*task);
  release_hold(op);  // op records are never freed (op_record.h), so this touches no engine memory
  // release: pairs with the acquire in shutdown(); this thread's last access to the engine.
  foreign_completers_.fetch_sub(1, std::memory_order_release);
}

void EngineCore::finish(OpRecord* op, TaskList& ready, const VarSignal* signal) noexcept {
  signal_fences(op, op->error);
  complete_uses(op, ready, signal);
  leave();
  recycle_record(op);
}

const VarSignal* EngineCore::ran_signal() const noexcept { return has_streams_ ? &kNoSignal : nullptr; }

// A skipped op did not wait for its wait frontier, so its successors must: its signal passes the frontier on.
const VarSignal* EngineCore::skipped_signal(const OpRecord* op) const noexcept {
  return has_streams_ ? &op->requirement : nullptr;
}

void EngineCore::complete_uses(OpRecord* op, TaskList& ready, const VarSignal* signal) noexcept {
  ReadyList granted;
  for (std::uint32_t i = 0; i < op->num_uses; ++i) {
    VarUse& use = op->uses[i];
    VarState* var = state_of(use);
    if (op->error != nullptr && use.access == Access::kWrite && var->error == nullptr && !op->deletes_var) {
      var->error = op->error;
      std::lock_guard lock(errors_mutex_);
      poisoned_.push_back(Var(var, id_, use.tag));
    }
    var->complete(use, signal, granted);
  }
  if (op->deletes_var) recycle_var(state_of(op->uses[0]));
  if (op->trace_op != 0) {
    if (TraceRecorder* trace = trace_.load(std::memory_order_acquire)) {  // acquire: pairs with start_trace()
      for (OpNode* node = granted.front(); node != nullptr; node = node->ready_next_) {
        const std::uint64_t released = static_cast<OpRecord*>(node)->trace_op;
        if (released != 0) trace->flow(op->trace_op, released);
      }
    }
  }
  if (!has_streams_) {
    while (OpNode* node = granted.pop_front()) ready.push_back(static_cast<OpRecord*>(node));
    return;
  }
  while (OpNode* node = granted.pop_front()) make_ready(static_cast<OpRecord*>(node), ready);
}

// --- Streams: wait frontiers, parking, issue and completion ----------------------------------------------------

// An op whose last grant has arrived: completes its wait frontier (promised fences already in it) and hands it on (to
// `ready`), or parks it on the tracker when its executor cannot wait for an entry that has not completed.
void EngineCore::make_ready(OpRecord* op, TaskList& ready) noexcept {
  for (std::uint32_t i = 0; i < op->num_uses; ++i) op->uses[i].var->merge_wait_signal(op->uses[i], op->requirement);
  const Executor* executor = op->executor();
  for (const FrontierEntry& entry : op->requirement) {
    if (!executor->owns_axis(entry.axis) && tracker_.completed(entry.axis) < entry.epoch) {
      park(op);
      return;
    }
  }
  ready.push_back(op);
}

// Parks `op` until its whole wait frontier has completed (a stream op waits for its own executor's entries too: rare,
// and only conservative). The waiter's callback hands it to its executor, possibly on this thread before park returns.
void EngineCore::park(OpRecord* op) noexcept {
  try {
    tracker_.wait_async(op->waiter, op->requirement);
  } catch (...) {  // not reachable: the frontier is untainted and its axes are registered; fail the op, never lose it
    unparked(op->waiter, std::current_exception());
  }
}

void EngineCore::unparked(TrackerWaiter& waiter, std::exception_ptr error) noexcept {
  OpRecord* op = static_cast<ParkWaiter&>(waiter).op;
  if (error != nullptr) op->engine->take_input_error(op, error);
  op->executor()->submit(*op);
}

// A stream the op waited for failed. The op holds every grant, so the variables it uses exclusively take the error
// (a WaitForVar finds it there); the op itself is skipped unless it is no_skip.
void EngineCore::take_input_error(OpRecord* op, const std::exception_ptr& error) noexcept {
  for (std::uint32_t i = 0; i < op->num_uses; ++i) {
    const VarUse& use = op->uses[i];
    VarState* var = state_of(use);
    if (use.access != Access::kRead && var->error == nullptr && !op->deletes_var) {
      var->error = error;
      if (op->internal) continue;  // a wait or a clearing op: it takes the error from the variable itself
      std::lock_guard lock(errors_mutex_);
      poisoned_.push_back(Var(var, id_, use.tag));
    }
  }
  if (!op->no_skip && op->error == nullptr) op->error = error;
}

bool EngineCore::issue(Task& task, const StreamPlacement& where, FrontierEntry signal, TaskList& ready) noexcept {
  OpRecord* op = static_cast<OpRecord*>(&task);
  if (find_input_error(op)) {
    finish(op, ready, skipped_signal(op));
    return false;
  }
  if (op->trace_op != 0) {
    if (TraceRecorder* trace = trace_.load(std::memory_order_acquire)) {  // acquire: pairs with start_trace()
      op->trace_start = trace->now();
      try {
        op->trace_lane = trace->stream_lane(signal.axis, *op->executor());
      } catch (...) {  // out of memory for a new lane: the trace misses this op, the op is unaffected
        op->trace_op = 0;
      }
    }
  }
  {
    const RunningScope running(this, &ready);
    RunContext ctx{op->name, -1, op->executor()};
    ctx.stream = &where;
    ctx.waits = &op->requirement;
    try {
      op->fn(ctx, nullptr);
    } catch (...) {  // the op failed while issuing: its error, attached to what it mutates; its work may be enqueued
      op->error = std::current_exception();
      note_error(op->error);
    }
  }
  op->issued_at = signal;
  if (op->error == nullptr && !op->signal_fences.empty()) promise_fences(op);
  VarSignal issued;
  issued.insert_or_raise(signal.axis, signal.epoch);
  complete_uses(op, ready, &issued);
  return true;
}

void EngineCore::skip(Task& task, std::exception_ptr error, TaskList& ready) noexcept {
  OpRecord* op = static_cast<OpRecord*>(&task);
  note_error(error);  // a new error (bad placement), or the failed stream's, already noted (the first one stays)
  if (op->error == nullptr) op->error = std::move(error);
  finish(op, ready, skipped_signal(op));
}

void EngineCore::complete_issued(Task& task, std::exception_ptr error) noexcept {
  OpRecord* op = static_cast<OpRecord*>(&task);
  if (error != nullptr) {
    // The variables it mutates were released at issue and may be in use, so the error is not attached to them here:
    // it reaches their later users through the failed axis on the tracker (take_input_error). Recorded for
    // WaitForAll, whose clearing op on each of them then finds it the same way.
    note_error(error);
    std::lock_guard lock(errors_mutex_);
    for (std::uint32_t i = 0; i < op->num_uses; ++i) {
      const VarUse& use = op->uses[i];
      if (use.access == Access::kWrite && !op->deletes_var) poisoned_.push_back(Var(state_of(use), id_, use.tag));
    }
  }
  signal_fences(op, error != nullptr ? error : op->error);
  if (op->trace_op != 0) trace_stream_op(op);
  leave();
  recycle_record(op);
}

// --- Tracing ---------------------------------------------------------------------------------------------------

namespace {

// The op's variables, as trace labels: "v<slot>", with ".<n>" for the slot's n-th reincarnation.
void describe_uses(const OpRecord* op, TraceRecorder::Slice& slice) {
  for (std::uint32_t i = 0; i < op->num_uses; ++i) {
    const VarUse& use = op->uses[i];
    std::string& out = use.access == Access::kRead ? slice.reads : slice.mutates;
    if (!out.empty()) out += ' ';
    out += 'v' + std::to_string(state_of(use)->slot);
    if (use.tag != 0) out += '.' + std::to_string(use.tag);
  }
}

}  // namespace

void EngineCore::trace_cpu_op(OpRecord* op, int worker, std::int64_t start) noexcept {
  TraceRecorder* trace = trace_.load(std::memory_order_acquire);  // acquire: pairs with start_trace()
  if (trace == nullptr) return;
  try {
    TraceRecorder::Slice slice{op->trace_op, std::string(op->name.empty() ? "op" : op->name),
                               trace->thread_lane(op->executor()->name(), worker), start, trace->now()};
    describe_uses(op, slice);
    trace->slice(std::move(slice), static_cast<std::int64_t>(in_flight()));
  } catch (...) {  // out of memory while tracing: the trace misses this op, the op is unaffected
  }
}

void EngineCore::trace_stream_op(OpRecord* op) noexcept {
  TraceRecorder* trace = trace_.load(std::memory_order_acquire);  // acquire: pairs with start_trace()
  if (trace == nullptr) return;
  try {
    TraceRecorder::Slice slice{op->trace_op,   std::string(op->name.empty() ? "op" : op->name),
                               op->trace_lane, op->trace_start,
                               trace->now(),   true};
    describe_uses(op, slice);
    trace->slice(std::move(slice), static_cast<std::int64_t>(in_flight()));
    std::uint64_t issued = 0, elided = 0;
    for (const auto& executor : executors_) {
      const DeviceWaits waits = executor->device_waits();
      issued += waits.issued;
      elided += waits.elided;
    }
    trace->device_waits(issued, elided);
  } catch (...) {  // as in trace_cpu_op
  }
}

// --- Fences ----------------------------------------------------------------------------------------------------

// Arms the op's fence waiter on its next wait fence. A stream op takes the promises of this engine (whose tracker
// names its axes); a CPU op waits for the value itself.
void EngineCore::arm_fence(OpRecord* op) noexcept {
  const Fence& fence = op->wait_fences[op->next_fence];
  const void* owner = op->executor()->issues_ahead() ? &tracker_ : nullptr;
  try {
    fence.timeline->wait_async(op->fence_waiter, fence.value, owner);
  } catch (...) {  // not reachable: the waiter is armed once at a time; fail the op rather than lose it
    fence_done(op->fence_waiter, TimelineWaitResult::failed(std::current_exception()));
  }
}

// A wait fence was reached (its work has completed: nothing to add), promised (its signaller's work is issued: the op
// waits for that requirement like for a variable's signal) or failed (an input error). Then the next fence, or the
// fences' grant.
void EngineCore::fence_done(TimelineWaiter& waiter, const TimelineWaitResult& result) noexcept {
  OpRecord* op = static_cast<FenceWaiter&>(waiter).op;
  EngineCore* engine = op->engine;
  if (result.is_promised()) {
    // Promised by this engine only: the requirement names its axes, at most kMaxEngineAxes of them, so it fits.
    op->requirement.merge(result.requirement());
    assert(!op->requirement.tainted());
  } else if (result.is_failed() && !op->no_skip && op->error == nullptr) {
    op->error = result.error();     // read after the op's last grant, which this thread's grant below publishes
    engine->note_error(op->error);  // for WaitForAll, when no op of this engine failed the timeline
  }
  if (++op->next_fence < op->wait_fences.size()) {
    engine->arm_fence(op);
    return;
  }
  // Signalled from inside a running op of this engine (its completion, most often): the op joins that executor's ready
  // list, so a chain of ops ordered by fences runs in the executor's loop instead of nesting callbacks (the inline
  // executor would otherwise run each op inside its predecessor's signal).
  engine->grant(op, t_running.engine == engine ? t_running.ready : nullptr);
}

// A stream op has been issued: its signal fences are promised to this engine's waiters, with what must complete
// first (its wait frontier and its own epoch). A promise the timeline refuses only means its waiters wait for the
// value.
void EngineCore::promise_fences(OpRecord* op) noexcept {
  TimelineRequirement requirement(op->requirement);
  requirement.insert_or_raise(op->issued_at.axis, op->issued_at.epoch);
  for (const Fence& fence : op->signal_fences) (void)fence.timeline->promise(fence.value, &tracker_, requirement);
}

// The op has completed (or was skipped): raises its signal fences with what it knew had happened, or fails them with
// its error. Called before the op releases its variables (a CPU op) and before it retires, so a WaitForVar or
// WaitForAll that returns finds its timelines signalled. (A stream op released its variables at issue; its
// executor advances the tracker, which WaitForVar waits on, only after complete_issued.)
void EngineCore::signal_fences(OpRecord* op, const std::exception_ptr& error) noexcept {
  if (op->signal_fences.empty()) return;
  if (error != nullptr) {
    for (const Fence& fence : op->signal_fences) (void)fence.timeline->fail(error);
    return;
  }
  TimelineFrontier knowledge;
  knowledge.merge_satisfied(op->requirement);
  if (!op->issued_at.axis.is_null()) knowledge.insert_or_raise(op->issued_at.axis, op->issued_at.epoch);
  for (const Fence& fence : op->signal_fences) (void)fence.timeline->raise(fence.value, knowledge);
}

void EngineCore::release_hold(OpRecord* op) noexcept {
  // acq_rel: the later of the two parties (function return, completion) recycles; its acquire pairs with the other's
  // release, so the other is done with the record.
  if (op->holds.fetch_sub(1, std::memory_order_acq_rel) == 1) recycle_record(op);
}

void EngineCore::note_error(const std::exception_ptr& error) noexcept {
  std::lock_guard lock(errors_mutex_);
  if (first_error_ == nullptr) first_error_ = error;
}

// --- In flight, back-pressure and waits ------------------------------------------------------------------------

namespace {
// pushed - retired, where the two were read at different moments: retired may then be ahead.
std::size_t difference(std::size_t pushed, std::size_t retired) noexcept {
  return pushed > retired ? pushed - retired : 0;
}
constexpr std::uint64_t kZeroSleeper = std::uint64_t{1} << 32;
constexpr std::uint64_t kLowSleeper = 1;
}  // namespace

std::size_t EngineCore::in_flight() const noexcept {
  // seq_cst: also used as the waiters' side of the Dekker pair with leave() (see wait_in_flight_at_most()).
  const std::size_t retired = retired_.load(std::memory_order_seq_cst);
  return difference(pushed_.load(std::memory_order_seq_cst), retired);
}

std::size_t EngineCore::in_flight_now() const noexcept {
  // in_flight() overestimates when the caller is delayed between its two loads (retired_ read long before pushed_).
  // Here retired_ is read again after pushed_: when it has not moved, pushed_ was read at a moment when retired_ held
  // that value, so the difference is the count at that moment. Completions land every few hundred ns at most, so a
  // retry almost always succeeds at once; after kTries the conservative value is returned rather than spinning on.
  // seq_cst: as in in_flight().
  constexpr int kTries = 64;
  std::size_t retired = retired_.load(std::memory_order_seq_cst);
  std::size_t pushed = 0;
  for (int i = 0; i < kTries; ++i) {
    pushed = pushed_.load(std::memory_order_seq_cst);
    const std::size_t again = retired_.load(std::memory_order_seq_cst);
    if (again == retired) break;
    retired = again;
  }
  return difference(pushed, retired);
}

void EngineCore::admit(bool exempt) {
  if (exempt) {
    // relaxed: counting only; the op's publication is ordered by the variable locks.
    pushed_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  // relaxed throughout: the bound is a count, not a hand-off. A stale view of retired_ only overestimates what is in
  // flight, so the bound is never exceeded; the compare-exchange makes concurrent pushers exact among themselves.
  std::size_t pushed = pushed_.load(std::memory_order_relaxed);
  for (;;) {
    if (difference(pushed, retired_view_.load(std::memory_order_relaxed)) >= max_in_flight_) {
      const std::size_t retired = retired_.load(std::memory_order_relaxed);
      retired_view_.store(retired, std::memory_order_relaxed);
      if (difference(pushed, retired) >= max_in_flight_) {
        wait_in_flight_at_most(low_water_);
        pushed = pushed_.load(std::memory_order_relaxed);
        continue;
      }
    }
    if (pushed_.compare_exchange_weak(pushed, pushed + 1, std::memory_order_relaxed)) return;
  }
}

void EngineCore::leave() noexcept {
  // seq_cst, with the seq_cst load of sleepers_: a Dekker pair with wait_in_flight_at_most(), which raises sleepers_
  // and then reads the counts. One of the two sees the other, so no sleeper misses the level it waits for.
  const std::size_t retired = retired_.fetch_add(1, std::memory_order_seq_cst) + 1;
  const std::uint64_t sleepers = sleepers_.load(std::memory_order_seq_cst);
  if (sleepers == 0) return;
  // Every op retired so far was pushed before it retired, so its push is visible here: the difference is exact when
  // it reaches zero, and at worst an underestimate (a spurious wake) otherwise.
  const std::size_t now = difference(pushed_.load(std::memory_order_seq_cst), retired);
  if ((now == 0 && sleepers >= kZeroSleeper) || (now <= low_water_ && (sleepers & (kZeroSleeper - 1)) != 0)) {
    std::lock_guard lock(wake_mutex_);
    wake_cv_.notify_all();
  }
}

bool EngineCore::help() noexcept {
  for (const auto& executor : executors_) {
    if (executor->try_help()) return true;
  }
  return false;
}

// Waits until at most `level` ops are in flight; `level` is 0 or low_water_, the levels leave() announces. Runs
// queued work meanwhile; sleeps only when there is none. When it returns, the effects of the retired ops are visible:
// in_flight()'s seq_cst loads acquire what leave()'s seq_cst increments released.
void EngineCore::wait_in_flight_at_most(std::size_t level) {
  const std::uint64_t me = level == 0 ? kZeroSleeper : kLowSleeper;
  while (in_flight() > level) {
    if (help()) continue;
    sleepers_.fetch_add(me, std::memory_order_seq_cst);  // see leave()
    {
      std::unique_lock lock(wake_mutex_);
      wake_cv_.wait(lock, [&] { return in_flight() <= level; });
    }
    // relaxed: leaving late costs at most a spurious notify.
    sleepers_.fetch_sub(me, std::memory_order_relaxed);
  }
}

void EngineCore::forbid_inside_op(const char* api) const {
  if (t_running.engine == this) {
    throw Error(std::string(api) +
                " called from inside a running op of the same engine: it would wait for that op, or for work queued "
                "behind it, and never return; push a dependent op instead");
  }
}

void EngineCore::wait_for_var(Var var) {
  forbid_inside_op("WaitForVar");
  VarState* state = checked_state(var, "WaitForVar");
  Notification done;
  std::exception_ptr error;
  push_sync_op(state, var.generation_, OpFunction::make<false>([state, &done, &error] {
                 error = std::exchange(state->error, nullptr);
                 done.notify();
               }));
  while (!done.notified()) {
    if (!help()) done.wait();
  }
  if (error != nullptr) {
    {
      std::lock_guard lock(errors_mutex_);
      if (error == first_error_) first_error_reported_ = true;
    }
    std::rethrow_exception(error);
  }
}

void EngineCore::wait_for_all() {
  forbid_inside_op("WaitForAll");
  wait_in_flight_at_most(0);
  std::exception_ptr error;
  std::vector<Var> poisoned;
  {
    std::lock_guard lock(errors_mutex_);
    error = std::exchange(first_error_, nullptr);
    first_error_reported_ = false;
    poisoned.swap(poisoned_);
  }
  // Clear the variables' errors in push order, so ops pushed meanwhile by other threads see a consistent state.
  for (const Var& var : poisoned) {
    // relaxed: an early filter for variables deleted since; push re-checks under the lock.
    if (var.state_->generation.load(std::memory_order_relaxed) != var.generation_) continue;
    VarState* state = var.state_;
    try {
      push_sync_op(state, var.generation_, OpFunction::make<false>([state] { state->error = nullptr; }));
    } catch (const Error&) {
      // deleted concurrently: nothing left to clear
    }
  }
  if (!poisoned.empty()) wait_in_flight_at_most(0);
  if (error != nullptr) std::rethrow_exception(error);
}

void EngineCore::wait_for_fence(const Fence& fence) {
  forbid_inside_op("WaitForFence");
  if (fence.timeline == nullptr) throw Error("WaitForFence: the fence names a null timeline");
  Notification done;
  std::exception_ptr error;
  TimelineCallbackWaiter waiter([&done, &error](const TimelineWaitResult& result) noexcept {
    error = result.error();
    done.notify();
  });
  fence.timeline->wait_async(waiter, fence.value);  // no promises: the value itself, that is completed work
  while (!done.notified()) {
    if (!help()) done.wait();
  }
  if (error != nullptr) std::rethrow_exception(error);
}

}  // namespace depengine::detail

namespace depengine {

void Completion::operator()(std::exception_ptr error) const {
  std::uint64_t expected = ticket_;
  // acq_rel: the release publishes this thread's work on the op to whoever recycles the record (release_hold's
  // acquire); the acquire pairs with execute()'s stores before the function ran. Only one call can win.
  if (!op_->ticket.compare_exchange_strong(expected, ticket_ + 1, std::memory_order_acq_rel,
                                           std::memory_order_relaxed)) {
    throw Error("Completion called more than once for the same op");
  }
  op_->engine->complete_async(op_, std::move(error));
}

}  // namespace depengine
