#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>

#include <depengine/engine/detail/error_log.h>

namespace depengine::detail {

void ErrorLog::raise(const std::exception_ptr& error, std::string_view op, std::uint64_t owner, bool issued) noexcept {
  std::lock_guard lock(mutex_);
  const std::size_t recent = std::min(unreported_.size(), kRecentDuplicates);
  if (std::any_of(unreported_.end() - static_cast<std::ptrdiff_t>(recent), unreported_.end(),
                  [&](const Entry& entry) { return entry.error == error; })) {
    return;
  }
  if (issued && std::find(reported_.begin(), reported_.end(), error) != reported_.end()) return;
  try {
    unreported_.push_back(Entry{error, std::string(op), owner});
  } catch (...) {  // out of memory: the error still travels with its variables, and a WaitForVar reports it
  }
}

void ErrorLog::poison(const Var& var, const std::exception_ptr& error, std::uint64_t owner) noexcept {
  std::lock_guard lock(mutex_);
  try {
    poisonings_.push_back(Poisoning{var, error, owner});
  } catch (...) {  // out of memory: WaitForAll will not clear this variable's error; a WaitForVar on it still does
  }
}

void ErrorLog::remember_locked(Entry&& entry) noexcept {
  try {
    recent_.push_back(std::move(entry));
  } catch (...) {  // out of memory: op_of() will not name this one
    return;
  }
  if (recent_.size() > kRecent) recent_.pop_front();
}

void ErrorLog::note_reported_locked(const std::exception_ptr& error) noexcept {
  try {
    reported_.push_back(error);
  } catch (...) {  // out of memory: a late raise of this error (see raise()) is reported again
    return;
  }
  if (reported_.size() > kRecent) reported_.pop_front();
}

void ErrorLog::reported(const std::exception_ptr& error, const Var& var) noexcept {
  std::lock_guard lock(mutex_);
  note_reported_locked(error);
  const auto match = [&](const Entry& entry) { return entry.error == error; };
  // Not found when reported before (a skipped op passed the error on to this variable).
  if (const auto it = std::find_if(unreported_.begin(), unreported_.end(), match); it != unreported_.end()) {
    remember_locked(std::move(*it));
    unreported_.erase(it);
    std::erase_if(unreported_, match);  // copies raised by other ops (a failed stream's error)
  }
  std::erase_if(poisonings_, [&](const Poisoning& poisoning) { return poisoning.var == var; });
}

ErrorLog::Taken ErrorLog::take(std::uint64_t owner) noexcept {
  std::lock_guard lock(mutex_);
  Taken taken;
  if (!unreported_.empty()) {
    taken.first = unreported_.front().error;
    note_reported_locked(taken.first);
    try {
      remember_locked(Entry(unreported_.front()));  // a copy: the partition below moves the entry out
    } catch (...) {                                 // out of memory copying its name: op_of() will not name this one
    }
  }
  // What stays keeps its order; what is taken is moved out. (stable_partition works in place when it cannot allocate,
  // so it does not throw here.)
  const auto others = std::stable_partition(unreported_.begin(), unreported_.end(), [&](const Entry& entry) {
    return entry.owner != owner && entry.error != taken.first;
  });
  for (auto it = others; it != unreported_.end(); ++it) {
    if (it->error == taken.first) continue;  // rethrown, not cleared
    try {
      taken.unreported.push_back(std::move(*it));
    } catch (...) {  // out of memory: the sink misses it; the rethrown error still says something failed
    }
  }
  unreported_.erase(others, unreported_.end());
  const auto kept = std::stable_partition(poisonings_.begin(), poisonings_.end(),
                                          [&](const Poisoning& poisoning) { return poisoning.owner != owner; });
  try {
    taken.clear.assign(std::make_move_iterator(kept), std::make_move_iterator(poisonings_.end()));
  } catch (...) {  // out of memory: those variables keep their errors; WaitForVar on them still clears them
  }
  poisonings_.erase(kept, poisonings_.end());
  return taken;
}

std::optional<std::string> ErrorLog::op_of(const std::exception_ptr& error) {
  std::lock_guard lock(mutex_);
  for (const Entry& entry : unreported_) {
    if (entry.error == error) return entry.op;
  }
  for (auto it = recent_.rbegin(); it != recent_.rend(); ++it) {
    if (it->error == error) return it->op;
  }
  return std::nullopt;
}

namespace {

std::string what_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "(an exception not derived from std::exception)";
  }
}

}  // namespace

void ErrorLog::sink(std::vector<Entry>& dropped, UnreportedError::When when) noexcept {
  if (dropped.empty()) return;
  std::lock_guard lock(sink_mutex_);
  for (const Entry& entry : dropped) {
    try {
      const std::string what = what_of(entry.error);
      if (sink_ != nullptr) {
        sink_(UnreportedError{.op = entry.op, .error = entry.error, .what = what, .when = when});
      } else if (printed_++ < kStderrLines) {
        std::fprintf(stderr, "depengine: op '%s' failed and no wait reported it (%s): %s\n",
                     entry.op.empty() ? "(unnamed)" : entry.op.c_str(),
                     when == UnreportedError::When::kAtShutdown ? "the engine was destroyed"
                                                                : "a WaitForAll rethrew another error",
                     what.c_str());
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "depengine: the error sink threw: %s\n", e.what());
    } catch (...) {
      std::fprintf(stderr, "depengine: the error sink threw an exception not derived from std::exception\n");
    }
  }
  dropped.clear();
}

void ErrorLog::sink_unreported() noexcept {
  std::vector<Entry> dropped;
  {
    std::lock_guard lock(mutex_);
    poisonings_.clear();
    dropped.swap(unreported_);
  }
  sink(dropped, UnreportedError::When::kAtShutdown);
  std::lock_guard lock(sink_mutex_);
  if (sink_ == nullptr && printed_ > kStderrLines) {
    std::fprintf(stderr,
                 "depengine: %zu more errors no wait reported were not printed (EngineOptions::error_sink "
                 "receives every one)\n",
                 printed_ - kStderrLines);
  }
}

}  // namespace depengine::detail
