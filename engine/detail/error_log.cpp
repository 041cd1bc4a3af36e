#include "engine/detail/error_log.h"

#include <cstdio>
#include <exception>
#include <string>
#include <utility>

namespace depengine::detail {

void ErrorLog::note(const std::exception_ptr& error) noexcept {
  std::lock_guard lock(mutex_);
  if (first_ == nullptr) first_ = error;
}

void ErrorLog::poison(const Var& var) noexcept {
  std::lock_guard lock(mutex_);
  try {
    poisoned_.push_back(var);
  } catch (...) {  // out of memory: WaitForAll will not clear this variable's error; a WaitForVar on it still does
  }
}

void ErrorLog::mark_reported(const std::exception_ptr& error) noexcept {
  std::lock_guard lock(mutex_);
  if (error == first_) first_reported_ = true;
}

ErrorLog::Taken ErrorLog::take() noexcept {
  std::lock_guard lock(mutex_);
  first_reported_ = false;
  return {std::exchange(first_, nullptr), std::exchange(poisoned_, {})};
}

void ErrorLog::report_unreported() noexcept {
  std::lock_guard lock(mutex_);
  if (first_ == nullptr || first_reported_) return;
  std::string what = "unknown exception";
  try {
    std::rethrow_exception(first_);
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
  }
  std::fprintf(stderr, "depengine: engine destroyed with an error no wait reported: %s\n", what.c_str());
}

}  // namespace depengine::detail
