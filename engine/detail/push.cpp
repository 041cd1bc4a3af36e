// Publish and grants: a record from push options, the op's variables sorted and folded, appended to every queue under
// all their locks (var_queue.h), and the pusher's own grant.
#include <algorithm>
#include <bit>
#include <cassert>
#include <cstdint>
#include <string>
#include <utility>

#include "engine/detail/engine_core.h"
#include "engine/detail/running.h"
#include "executors/ready_queue.h"
#include "support/prefetch.h"

namespace depengine::detail {
namespace {

// Ops of up to this many uses are sorted by key (gather_uses()): a use's index fits below a VarState's alignment.
constexpr std::size_t kKeyedUses = alignof(VarState);
static_assert(std::has_single_bit(kKeyedUses));

// Sorts uses by variable address and folds duplicates (a mutation wins over a read). Returns the distinct count. For
// lists longer than gather_uses() sorts by key.
std::uint32_t sort_and_fold(VarUse* uses, std::uint32_t count) noexcept {
  std::sort(uses, uses + count, [](const VarUse& a, const VarUse& b) { return a.var < b.var; });
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

// Appends `op` to the queue of every variable it uses (see var_queue.h: two-phase locking), its wait counter set
// beforehand to every grant it waits for, ours included if `self_grant` (op_node.h). Returns the grants given at
// append, which the caller gives back with its own; or -1, appending nothing, if a variable was deleted since its
// handle was checked. DeleteVariable's op moves its variable's generation on while the lock is held, so no push can
// slip in behind it. Without `self_grant` (one use) the op is not to be touched once linked: its variable is read
// before.
//
// Every lock is taken before the first append, and each is let go as soon as the op is in its queue: once the pusher
// holds them all, no other push can come between its appends on any of them (two-phase locking needs no lock taken
// after one is let go, not every lock held to the end), and a completion waiting for a queue's lock gets it an append
// sooner.
std::int32_t publish(OpRecord* op, bool self_grant) noexcept {
  VarUse* const uses = op->uses;
  const std::uint32_t count = op->num_uses;
  for (std::uint32_t i = 0; i < count; ++i) {
    VarQueue* const var = uses[i].var;
    var->lock();
    // relaxed: generation is written only under this lock, which we hold from here until the op is in the queue.
    if (var->generation.load(std::memory_order_relaxed) != uses[i].tag) [[unlikely]] {
      for (std::uint32_t j = 0; j <= i; ++j) uses[j].var->unlock();
      return -1;
    }
  }
  if (op->deletes_var) {
    VarQueue* var = uses[0].var;
    // relaxed: under the lock, which every reader of generation that matters holds too.
    var->generation.store(var->generation.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  // + 1 for the wait fences, given when the last is reached; + 1 for our own grant if we hold one, given after the
  // appends.
  op->reset_wait(static_cast<std::int32_t>(count) + (op->waits_fences ? 1 : 0) + (self_grant ? 1 : 0));
  std::int32_t granted = 0;
  for (std::uint32_t i = 0; i < count; ++i) {
    VarQueue* const var = uses[i].var;  // read before the append, after which a use without our grant may be gone
    if (var->append_locked(uses[i])) ++granted;
    var->unlock();
  }
  return granted;
}

}  // namespace

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
  if (trace_.on() && executor != &internal_) op->trace_op = TraceRecorder::next_op();
  return op;
}

void EngineCore::gather_uses(OpRecord* op, VarList reads, VarList mutates) const {
  const std::size_t num_reads = reads.size();
  const std::size_t total = num_reads + mutates.size();
  op->reserve_uses(total);
  auto listed = [&](std::size_t k) -> const Var& {  // the k-th variable of reads, then mutates
    return k < num_reads ? reads.begin()[k] : mutates.begin()[k - num_reads];
  };
  // Handles are checked for their engine here, before their pointer is followed; whether they are still alive is
  // checked by publish() under the variables' locks, the only place where the answer cannot change.
  auto checked = [&](std::size_t k) -> const Var& {
    const Var& var = listed(k);
    if (var.engine_ != vars_.engine_id() || var.is_null()) [[unlikely]]
      (void)vars_.checked(var, op->async ? "PushAsync" : "Push");
    // publish() takes the variable's lock, whose line the last completion of the variable most often wrote on
    // another core: fetched now, the lines of all the op's variables cross together, not one lock after another.
    support::prefetch_for_write(var.state_);
    return var;
  };
  auto use_of = [&](std::size_t k, const Var& var) {
    return VarUse{var.state_, op, nullptr, k < num_reads ? Access::kRead : Access::kWrite, var.generation_};
  };
  if (total == 1) {
    op->uses[0] = use_of(0, checked(0));
    op->num_uses = 1;
    return;
  }
  if (total > kKeyedUses) {
    for (std::size_t k = 0; k < total; ++k) op->uses[k] = use_of(k, checked(k));
    op->num_uses = sort_and_fold(op->uses, static_cast<std::uint32_t>(total));
    return;
  }
  // Sorts 8-byte keys rather than the 32-byte uses: each key is a variable's address (VarState is 64-byte aligned) with
  // the use's place in the two lists in its low bits, so ties keep list order. The uses are then written once, in
  // order, duplicates folded (a mutation wins over a read). Against sorting the uses themselves, 147 fewer instructions
  // per op on `randsum` (about 11 variables an op; bench/engine/count_instructions.sh).
  std::uint64_t keys[kKeyedUses];
  for (std::size_t k = 0; k < total; ++k) {
    const auto address = reinterpret_cast<std::uintptr_t>(checked(k).state_);
    assert((address & (kKeyedUses - 1)) == 0 && "VarState is 64-byte aligned");
    keys[k] = address | k;
  }
  if (total <= 16) {
    for (std::size_t i = 1; i < total; ++i) {  // insertion sort: the common lists are tiny
      const std::uint64_t key = keys[i];
      std::size_t j = i;
      for (; j > 0 && key < keys[j - 1]; --j) keys[j] = keys[j - 1];
      keys[j] = key;
    }
  } else {
    std::sort(keys, keys + total);
  }
  VarUse* const uses = op->uses;
  std::uint32_t distinct = 0;
  const VarState* previous = nullptr;  // the last use's variable, compared without reading back what was just stored
  for (std::size_t i = 0; i < total; ++i) {
    const std::size_t k = keys[i] & (kKeyedUses - 1);
    const Var& var = listed(k);
    if (var.state_ == previous) {
      if (k >= num_reads) uses[distinct - 1].access = Access::kWrite;
    } else {
      uses[distinct++] = use_of(k, var);
      previous = var.state_;
    }
  }
  op->num_uses = distinct;
}

// A push from outside the engine's ops once its destruction has begun (InFlight::close): gives the record back, throws.
[[noreturn, gnu::cold, gnu::noinline]] static void refuse_closed(OpRecord* op, const char* api) {
  op->recycle();
  throw Error(std::string(api) +
              ": the engine is being destroyed; only ops running in it may still push (the rest of their work)");
}

void EngineCore::submit_new(OpRecord* op, const char* api) {
  if (!in_flight_.admit(op->internal || t_running.engine == this)) [[unlikely]]
    refuse_closed(op, api);
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
  // Work-first (Executor::run_here): the pushing thread, outside the engine's ops, runs the op itself when its
  // executor asks; only on engines without stream executors, whose ops never wait for device work before they run.
  Executor* const executor = op->executor();
  if (executor->offers_work_first() && !has_streams_ && t_running.engine == nullptr && executor->run_here(*op))
      [[unlikely]] {
    run_pushed(op);
    return;
  }
  hand_on(op, nullptr);
}

// Runs `op`, ready at its push, on the pushing thread (work-first), and submits what that makes ready.
void EngineCore::run_pushed(OpRecord* op) noexcept {
  TaskList ready;
  execute(*op, -1, ready);
  submit_in_priority_order(ready);
}

// Gives one grant to `op`; the last one hands it on.
void EngineCore::grant(OpRecord* op, TaskList* ready) noexcept {
  if (op->grant()) hand_on(op, ready);
}

// Hands on `op`, whose last grant the caller gave (through make_ready when signals are carried): to `ready`, the list
// of a running executor, if given; else to its executor.
void EngineCore::hand_on(OpRecord* op, TaskList* ready) noexcept {
  TaskList own;
  TaskList& out = ready != nullptr ? *ready : own;
  if (has_streams_) {
    make_ready(op, out);
  } else {
    out.push_back(op);
  }
  if (Task* task = own.pop_front()) task->executor()->submit(*task);
}

void EngineCore::push(OpRecord* op, VarList reads, VarList mutates) {
  try {
    gather_uses(op, reads, mutates);
  } catch (...) {
    op->recycle();
    throw;
  }
  if (t_running.capturing == this) [[unlikely]] {
    capture(op);
    return;
  }
  submit_new(op, op->async ? "PushAsync" : "Push");
}

void EngineCore::delete_variable(Var var, OpFunction deleter, const PushOptions& options) {
  if (t_running.capturing == this) [[unlikely]] {
    capture_deletion(var, std::move(deleter), options);
    return;
  }
  push_deletion(vars_.checked(var, "DeleteVariable"), var.generation_, std::move(deleter), options);
}

void EngineCore::delete_owned(OwnedVar& owned) {
  push_deletion(owned.var, owned.tag, std::move(owned.deleter), owned.options);
}

void EngineCore::push_deletion(VarState* var, std::uint32_t generation, OpFunction deleter,
                               const PushOptions& options) {
  submit_new(deletion_record(var, generation, std::move(deleter), options), "DeleteVariable");
}

// The record of a deletion of `var` (whose handles are of `generation`), with `deleter` as its function.
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

}  // namespace depengine::detail
