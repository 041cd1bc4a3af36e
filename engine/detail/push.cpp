// Publish and grants: a record from push options, the op's variables locked (in list order where no other thread holds
// them) and folded, appended to every queue under all their locks (var_queue.h), and the pusher's own grant.
#include <algorithm>
#include <cassert>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include <depengine/engine/detail/engine_core.h>
#include <depengine/engine/detail/running.h>
#include <depengine/executors/ready_queue.h>
#include <depengine/support/prefetch.h>
#include <depengine/support/spinlock.h>

namespace depengine::detail {
namespace {

void check_fences(const FenceList& fences, const char* field) {
  for (std::size_t i = 0; i < fences.size(); ++i) {
    if (fences[i].timeline == nullptr) {
      throw Error("PushOptions::" + std::string(field) + "[" + std::to_string(i) + "] names a null timeline");
    }
  }
}

// Whether the pusher of `op` holds a grant of its own while it publishes it (op_node.h): unless the op uses one
// variable and the push has nothing to do after linking it (no scope to count it in, no wait fence to arm). Read
// before publish(): without that grant the op may run, and its record be reused, as soon as it is linked.
bool pusher_grants(const OpRecord* op) noexcept {
  return op->num_uses != 1 || op->scope != nullptr || op->waits_fences;
}

void unlock_all(const VarUse* uses, std::uint32_t count) noexcept {
  for (std::uint32_t i = 0; i < count; ++i) uses[i].var->unlock();
}

// The most pauses a push waits for a variable's lock held by another thread, out of the global order, before it takes
// the slow path (lock_all()): longer than a completion or an append holds it.
constexpr int kLockWait = 64;

// Whether `var`'s lock, found held, came free within kLockWait pauses (and is now ours).
bool wait_for_lock(VarQueue& var) noexcept {
  for (int pauses = 0; pauses < kLockWait; ++pauses) {
    support::cpu_relax();
    if (!var.locked() && var.try_lock()) return true;
  }
  return false;
}

// Whether the variables of `uses` are all of the life their uses name (DeleteVariable moves a variable's generation on
// under its lock, so the answer holds while the caller holds the locks). Requires every lock held.
bool alive(const VarUse* uses, std::uint32_t count) noexcept {
  for (std::uint32_t i = 0; i < count; ++i) {
    // relaxed: generation is written only under the variable's lock, which the caller holds.
    if (uses[i].var->generation.load(std::memory_order_relaxed) != uses[i].tag) return false;
  }
  return true;
}

// The slow path of lock_all(), holding no lock: uses[0, held) are distinct, the uses from `next` on not yet looked at.
// Sorts and folds them all, then takes the locks in ascending address order, blocking.
bool lock_in_order(OpRecord* op, std::uint32_t next, std::uint32_t held) noexcept {
  VarUse* const uses = op->uses;
  std::copy(uses + next, uses + op->num_uses, uses + held);  // held <= next: moves down
  op->num_uses = held + (op->num_uses - next);
  if (!op->sort_and_fold_uses()) return false;
  for (std::uint32_t i = 0; i < op->num_uses; ++i) uses[i].var->lock();
  if (alive(uses, op->num_uses)) return true;
  unlock_all(uses, op->num_uses);
  return false;
}

// Takes the lock of every variable of `op`, an op of several, and folds a variable listed twice into its first use (the
// stronger use wins: op_node.h). Returns false, holding no lock, if a variable was deleted since its handle was
// checked.
//
// Two-phase locking (var_queue.h) asks that a push hold every lock before its first append; it does not ask for an
// order, only that two pushes can never wait for each other in a cycle. So the locks are taken in the order the op
// lists its variables, with one attempt each, and a push that meets no other thread on them (one pushing thread, the
// common case) neither sorts its list nor waits. A lock found held is the push's own (the variable is listed twice:
// folded) or another thread's. A push may block for a lock above (in address order) every lock it holds: if every
// waiting thread waits only so, a cycle of waits would need addresses that rise all the way round. For a lock below
// one it holds, the holder may be a push waiting for that one: it is waited for kLockWait pauses at most, and then the
// push lets every lock go and takes them all again in ascending address order, blocking (lock_in_order()).
// Completions take one lock at a time and never wait holding one.
//
// Out of line: ops of one variable (most) take its lock in publish() and leave this loop's registers alone.
[[gnu::noinline]] bool lock_all(OpRecord* op) noexcept {
  VarUse* const uses = op->uses;
  const std::uint32_t count = op->num_uses;
  std::uint32_t held = 0;  // uses[0, held): distinct, locked
  for (std::uint32_t i = 0; i < count; ++i) {
    const VarUse& use = uses[i];
    if (!use.var->try_lock()) [[unlikely]] {
      VarUse* const first = std::find_if(uses, uses + held, [&](const VarUse& u) { return u.var == use.var; });
      if (first != uses + held) {
        first->access = std::max(first->access, use.access);  // the stronger use wins (op_node.h)
        // Two handles of one slot in different lives: one of them is dead (alive() checks the first).
        if (use.tag != first->tag) {
          unlock_all(uses, held);
          return false;
        }
        continue;
      }
      // Above every lock held, in the global order (ascending address): safe to block for.
      const bool above_all =
          std::all_of(uses, uses + held, [&](const VarUse& u) { return std::less<>()(u.var, use.var); });
      if (above_all) {
        use.var->lock();
      } else if (!wait_for_lock(*use.var)) {
        unlock_all(uses, held);
        return lock_in_order(op, i, held);
      }
    }
    if (held != i) uses[held] = use;  // behind a folded duplicate
    ++held;
  }
  op->num_uses = held;
  if (alive(uses, held)) return true;
  unlock_all(uses, held);
  return false;
}

// Appends `op` to the queue of every variable it uses (see var_queue.h: two-phase locking), its wait counter set
// beforehand to every grant it waits for, ours included if `self_grant` (op_node.h). Returns the grants given at
// append, which the caller gives back with its own; or -1, appending nothing, if a variable was deleted since its
// handle was checked. DeleteVariable's op moves its variable's generation on while the lock is held, so no push can
// slip in behind it. Without `self_grant` (one use) the op is not to be touched once linked: its variable is read
// before.
//
// Every lock is taken before the first append (lock_all()), and each is let go as soon as the op is in its queue: once
// the pusher holds them all, no other push can come between its appends on any of them (two-phase locking needs no
// lock taken after one is let go, not every lock held to the end), and a completion waiting for a queue's lock gets it
// an append sooner.
std::int32_t publish(OpRecord* op, bool self_grant) noexcept {
  VarUse* const uses = op->uses;
  if (op->num_uses == 1) {  // nothing to fold, and a thread that holds no lock may wait for any
    uses[0].var->lock();
    if (!alive(uses, 1)) {
      uses[0].var->unlock();
      return -1;
    }
  } else if (!lock_all(op)) {
    return -1;
  }
  const std::uint32_t count = op->num_uses;
  if (op->deletes_var) {
    VarQueue* var = uses[0].var;
    // relaxed: under the lock, which every reader of generation that matters holds too.
    var->generation.store(var->generation.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  // + 1 for the wait fences, given when the last is reached; + 1 for our own grant if we hold one, given after the
  // appends.
  op->reset_wait(static_cast<std::int32_t>(count) + (op->waits_fences ? 1 : 0) + (self_grant ? 1 : 0));
  std::int32_t granted = 0;
  if (op->host_kind_ == kAccumulatingOp) [[unlikely]] {  // accumulation.cpp: once per op, not per use
    for (std::uint32_t i = 0; i < count; ++i) {
      VarQueue* const var = uses[i].var;  // as below
      if (var->append_any_locked(uses[i])) ++granted;
      var->unlock();
    }
    return granted;
  }
  for (std::uint32_t i = 0; i < count; ++i) {
    VarQueue* const var = uses[i].var;  // read before the append, after which a use without our grant may be gone
    if (var->append_locked(uses[i])) ++granted;
    var->unlock();
  }
  return granted;
}

}  // namespace

void EngineCore::refuse_async_on_streams(const PushOptions& options, std::string_view api) const {
  const Executor& executor = executor_at(options.context.executor);
  if (!executor.issues_ahead()) return;
  const std::string_view sync = api.substr(0, api.size() - (api.ends_with("Async") ? 5 : 0));  // PushAsync: Push
  throw Error(std::string(api) + ": context names executor " + std::to_string(options.context.executor) + " (" +
              std::string(executor.name()) + "), a stream executor, whose ops complete when their device work does; " +
              "push with " + std::string(sync) + " and enqueue the work on RunContext::stream");
}

OpRecord* EngineCore::make_record(const PushOptions& options, bool async) {
  Executor* executor = &executor_at(options.context.executor);
  if (async && executor->issues_ahead()) refuse_async_on_streams(options, "PushAsync");
  check_fences(options.wait_fences, "wait_fences");
  check_fences(options.signal_fences, "signal_fences");
  if (has_streams_ && executor->issues_ahead()) {
    const Context& where = options.context;
    if (std::string why = executor->stream_facet()->placement_error(where.device, where.stream_kind, where.stream);
        !why.empty()) {
      throw Error("PushOptions::context: " + why);
    }
  }
  return record_for(executor, options, async);
}

OpRecord* EngineCore::record_for(Executor* executor, const PushOptions& options, bool async) {
  OpRecord* op = RecordPool::acquire();
  op->prepare(this, executor, options.priority);
  op->place(options.context.device, options.context.stream_kind, options.context.stream);
  op->waits_fences = !options.wait_fences.empty();
  op->signals_fences = !options.signal_fences.empty();
  if (has_streams_ || op->waits_fences || op->signals_fences) op->prepare_cold();
  if (op->waits_fences) op->wait_fences = options.wait_fences;
  if (op->signals_fences) op->signal_fences = options.signal_fences;
  if (!options.name.empty()) {
    try {
      op->name = options.name;  // a copy: the options may die with the push
    } catch (...) {             // out of memory for a long name
      op->recycle();
      throw;
    }
    op->named = true;
  }
  op->async = async;
  op->no_skip = options.no_skip;
  op->deletes_var = false;
  op->internal = false;
  op->owner = current_owner();
  op->scope = options.scope != nullptr ? options.scope->state_ : nullptr;
  if (trace().on() && executor != &internal_) [[unlikely]] {
    op->trace_op = TraceRecorder::next_op();
    trace().pushed(*op);
  }
  if (observing_ != nullptr) [[unlikely]]
    observing_->pushed(*op);
  return op;
}

void EngineCore::gather_uses(OpRecord* op, VarList reads, VarList mutates) const {
  const std::size_t total = reads.size() + mutates.size();
  op->reserve_uses(total);
  // In list order, reads first: publish() folds a variable listed twice.
  op->num_uses = static_cast<std::uint32_t>(total);
  if (total == 1) {  // most ops
    op->uses[0] =
        reads.size() == 1 ? use_of(op, *reads.begin(), Access::kRead) : use_of(op, *mutates.begin(), Access::kWrite);
    return;
  }
  VarUse* use = op->uses;
  for (const Var& var : reads) *use++ = use_of(op, var, Access::kRead);
  for (const Var& var : mutates) *use++ = use_of(op, var, Access::kWrite);
}

// A push from outside the engine's ops once its destruction has begun (InFlight::close): gives the record back, throws.
[[noreturn, gnu::cold, gnu::noinline]] static void refuse_closed(OpRecord* op, const char* api) {
  op->recycle();
  throw Error(std::string(api) +
              ": the engine is being destroyed; only ops running in it may still push (the rest of their work)");
}

// A push that try_admit() did not count in: waits at the bound (named in reports meanwhile), or, once the engine's
// destruction has begun, refuses the op. Or one it counted in far ahead of the workers: from outside every engine's
// ops (an op of another engine would run ours nested in its own), runs some of their queued work first
// (EngineOptions::help_above).
void EngineCore::admit_slow(OpRecord* op, const char* api, InFlight::Admitted admitted) {
  if (admitted == InFlight::Admitted::kInAhead) {
    if (t_running.engine == nullptr) in_flight_.help_while_ahead();
    return;
  }
  if (!in_flight_.admit_at_bound(api, op->name_view())) refuse_closed(op, api);
  if (observing_ != nullptr) [[unlikely]]
    observing_->admitted(*op);
  if (op->trace_op != 0) trace().ready_at_push(*op, true);  // why it waited, if its push gives its last grant
}

void EngineCore::submit(OpRecord* op, const char* api) {
  const InFlight::Admitted admitted = in_flight_.try_admit(op->internal || t_running.engine == this);
  if (admitted != InFlight::Admitted::kIn) [[unlikely]]
    admit_slow(op, api, admitted);
  const bool self_grant = pusher_grants(op);
  const std::int32_t granted = publish(op, self_grant);
  if (granted < 0) {
    in_flight_.leave();
    op->recycle();
    throw Error(std::string(api) + ": a variable of the op was deleted (DeleteVariable) and may not be used again");
  }
  if (!self_grant) {
    // One use, linked behind others: the completion that grants it hands it on, and may have done so already (the
    // record is no longer ours). Granted at append: ours alone, as below.
    if (granted == 0) return;
  } else {
    // Before our grant: the op cannot run (and retire) meanwhile.
    if (op->scope != nullptr) op->scope->op_pushed();
    if (op->waits_fences) arm_fence(op);
    // Granted everywhere at append, no other thread can hold the op, nor touch its counter; else the grants at append
    // and ours go in one, and whoever gives the last hands the op on.
    if ((granted != static_cast<std::int32_t>(op->num_uses) || op->waits_fences) && !op->grant(granted + 1)) return;
  }
  // Ready at its push: traced, it waited for nothing (or for room under the bound).
  if (op->trace_op != 0) [[unlikely]]
    trace().ready_at_push(*op);
  // Work-first (Executor::run_here): the pushing thread, outside the engine's ops, runs the op itself when its
  // executor asks; only on engines without stream executors, whose ops never wait for device work before they run.
  Executor* const executor = op->executor();
  if (executor->offers_work_first() && !has_streams_ && t_running.engine == nullptr && executor->run_here(*op))
      [[unlikely]] {
    run_pushed(op);
    return;
  }
  hand_on(op, nullptr, true);
}

void EngineCore::push(OpRecord* op, VarList reads, VarList mutates) {
  try {
    gather_uses(op, reads, mutates);
  } catch (...) {
    op->recycle();
    throw;
  }
  if (t_running.capturing == this) [[unlikely]] {
    graphs_.capture(op);
    return;
  }
  submit(op, op->async ? "PushAsync" : "Push");
}

void EngineCore::delete_variable(Var var, OpFunction deleter, const PushOptions& options) {
  if (t_running.capturing == this) [[unlikely]] {
    graphs_.capture_deletion(var, std::move(deleter), options);
    return;
  }
  push_deletion(vars_.checked(var, "DeleteVariable"), var.generation_, std::move(deleter), options);
}

void EngineCore::delete_owned(OwnedVar& owned) {
  push_deletion(owned.var, owned.tag, std::move(owned.deleter), owned.options);
}

void EngineCore::push_deletion(VarState* var, std::uint32_t generation, OpFunction deleter,
                               const PushOptions& options) {
  submit(deletion_record(var, generation, std::move(deleter), options), "DeleteVariable");
}

OpRecord* EngineCore::deletion_record(VarState* var, std::uint32_t generation, OpFunction deleter,
                                      const PushOptions& options) {
  OpRecord* op = make_record(options, false);
  op->no_skip = true;  // the deleter runs whatever error the variable carries
  op->deletes_var = true;
  op->reserve_uses(1);
  op->uses[0] = VarUse{var, op, nullptr, Access::kWrite, generation};
  op->num_uses = 1;
  op->fn = std::move(deleter);
  return op;
}

// Pushes an engine-internal op that uses `var` alone, exclusively, without counting as a mutation. `api`: the call that
// pushes it, for its error messages.
void EngineCore::push_sync_op(VarState* var, std::uint32_t generation, OpFunction fn, const char* api) {
  OpRecord* op = record_for(&internal_, PushOptions{.no_skip = true}, false);
  op->internal = true;
  op->reserve_uses(1);
  op->uses[0] = VarUse{var, op, nullptr, Access::kSync, generation};
  op->num_uses = 1;
  op->fn = std::move(fn);
  submit(op, api);
}

}  // namespace depengine::detail
