// Ops that accumulate (Engine::PushAccumulate, Access::kAccumulate): their push, and the tokens of the groups they are
// members of, which they take as they start. The groups themselves are the var queue's (var_queue.h, Groups).
//
// An op that accumulates is pushed as any other, its record marked with the host kind kAccumulatingOp, so that it
// takes its tokens before it may run; once it holds them all the mark is cleared and the op runs as a pushed op. Where:
//   - on an engine without streams, in execute(), before the gate. A plain op pays for this one compare in execute(),
//     which it made anyway (kGraphOp);
//   - on an engine with streams, in make_ready(), before its wait frontier is built, which then holds the signal of
//     the member before it (var_queue.h, Groups). A stream member is issued, not executed, and releases the token when
//     it is issued: the next member waits for its device work on the device (a stream member) or on the tracker (a
//     CPU member). A CPU member there holds its tokens while it is parked on the tracker and queued on its executor.
#include <algorithm>
#include <string>

#include <depengine/engine/detail/engine_core.h>
#include <depengine/engine/detail/running.h>

namespace depengine::detail {

void EngineCore::push_accumulating(OpRecord* op, VarList reads, VarList mutates, VarList accumulates) {
  const char* const api = op->async ? "PushAccumulateAsync" : "PushAccumulate";
  std::uint32_t accumulated = 0;
  try {
    const std::size_t total = reads.size() + mutates.size() + accumulates.size();
    op->reserve_uses(total);
    op->num_uses = static_cast<std::uint32_t>(total);
    // In list order, the weaker uses first: publish() folds a variable listed twice into the stronger use.
    VarUse* use = op->uses;
    for (const Var& var : reads) *use++ = use_of(op, var, Access::kRead);
    for (const Var& var : mutates) *use++ = use_of(op, var, Access::kWrite);
    for (const Var& var : accumulates) {
      *use = use_of(op, var, Access::kAccumulate);
      use->var->carry_groups();  // before publish() appends to it: may allocate, once per variable
      ++use;
      ++accumulated;
    }
    // An op of several groups locks their queues in ascending address order to take their tokens (take_tokens()). The
    // sorted list also folds duplicates now.
    if (accumulated > 1 && !op->sort_and_fold_uses()) {
      throw Error(std::string(api) + ": a variable of the op was deleted (DeleteVariable) and may not be used again");
    }
  } catch (...) {
    op->recycle();
    throw;
  }
  if (t_running.capturing == this) [[unlikely]] {  // the plan orders it (graph_plan.h, Groups)
    graphs_.capture(op);
    return;
  }
  if (accumulated > 0) op->host_kind_ = kAccumulatingOp;
  // A record given back by a failed submit keeps the mark: its next op then takes no token and clears it (correct, and
  // rare enough not to pay a store per push to avoid).
  submit(op, api);
}

bool EngineCore::take_tokens(OpRecord* op, TaskList& ready) noexcept {
  VarUse* const uses = op->uses;
  const std::uint32_t count = op->num_uses;
  // All at once: the queues of its groups locked together, in ascending address order (its uses are sorted, see
  // push_accumulating), then every token taken, or none. A member that parks holds no token, so the holder of a token
  // has all of its own and runs (an async holder until its Completion): every wait ends at a running op, whatever that
  // op's Completion waits for. (A member of one group parked first is handed the token by the completion that frees
  // it, and finds it its own here.)
  std::uint32_t groups = 0;
  for (std::uint32_t i = 0; i < count; ++i) {
    if (uses[i].access != Access::kAccumulate) continue;
    uses[i].var->lock();
    ++groups;
  }
  VarQueue* held = nullptr;
  for (std::uint32_t i = 0; i < count && held == nullptr; ++i) {
    if (uses[i].access == Access::kAccumulate && !uses[i].var->token_free_locked(*op)) held = uses[i].var;
  }
  ReadyList woken;
  for (std::uint32_t i = 0; i < count; ++i) {
    if (uses[i].access != Access::kAccumulate) continue;
    if (held == nullptr) {
      uses[i].var->take_token_locked(*op);
    } else if (OpNode* next = uses[i].var->wake_locked()) {
      woken.push_back(next);  // it may have been woken for this free token: the wake passes on (var_queue.h)
    }
  }
  for (std::uint32_t i = 0; i < count; ++i) {
    if (uses[i].access == Access::kAccumulate && uses[i].var != held) uses[i].var->unlock();
  }
  if (held != nullptr) {
    // Parked last, under the held queue's lock alone: once that lock is let go the holder's completion may wake the op,
    // which may run, complete and be recycled, so nothing of the record is read after.
    held->park_locked(*op, groups == 1);
    held->unlock();
  } else {
    op->host_kind_ = kPushedOp;
  }
  while (OpNode* node = woken.pop_front()) route(node, ready, nullptr);  // readied before: no new ready time
  return held == nullptr;
}

}  // namespace depengine::detail
