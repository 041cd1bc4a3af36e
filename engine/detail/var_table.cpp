#include <cassert>
#include <string>

#include <depengine/engine/detail/var_table.h>
#include <depengine/engine/errors.h>

namespace depengine::detail {

Var VarTable::make() {
  std::lock_guard lock(mutex_);
  VarState* var = free_;
  if (var != nullptr) {
    free_ = var->free_next;
  } else {
    var = &vars_.emplace_back();
    var->slot = static_cast<std::uint32_t>(vars_.size() - 1);
    if (signals_) {
      try {
        var->carry_signals();
      } catch (...) {  // out of memory: the slot stays unused, at the table's end
        vars_.pop_back();
        throw;
      }
    }
  }
  // relaxed: the slot is not shared yet; the handle reaches other threads through the user's own synchronisation.
  return Var(var, engine_id_, var->generation.load(std::memory_order_relaxed));
}

// Cold: builds the message for a bad handle.
VarState* VarTable::checked(const Var& var, const char* api) const {
  if (var.is_null()) throw Error(std::string(api) + ": null Var (default-constructed handle)");
  if (var.engine_ != engine_id_) throw Error(std::string(api) + ": Var belongs to another engine");
  // relaxed: an early check for a handle already dead; push re-checks under the variable's lock.
  if (var.state_->generation.load(std::memory_order_relaxed) != var.generation_) {
    throw Error(std::string(api) + ": Var was deleted (DeleteVariable) and may not be used again");
  }
  return var.state_;
}

void VarTable::recycle(VarState* var) noexcept {
  assert(var->idle_locked() && "variable recycled while ops still use it");
  var->error = nullptr;
  var->reset_idle();
  std::lock_guard lock(mutex_);
  var->free_next = free_;
  free_ = var;
}

}  // namespace depengine::detail
