// ErrorLog: what WaitForAll and shutdown report — the first error raised since the last WaitForAll, and the variables
// given an error since then (WaitForAll clears them).
//
// An op's error travels with the variables it mutates (VarState::error); this log only remembers which error came
// first and where errors were attached, so that WaitForAll can rethrow one and clear all, and so that shutdown can
// write an error no wait reported to stderr.
//
// Thread safety: every member from any thread, under one mutex (errors are the slow path). Allocation: poison() may
// grow the list of poisoned variables.
#pragma once

#include <exception>
#include <mutex>
#include <vector>

#include "engine/var.h"

namespace depengine::detail {

class ErrorLog {
 public:
  // What WaitForAll takes: the first error since the last take(), and the variables poisoned since.
  struct Taken {
    std::exception_ptr first;
    std::vector<Var> poisoned;
  };

  // Records `error` as the first one, unless one is already recorded.
  void note(const std::exception_ptr& error) noexcept;
  // Records that `var` was given an error (WaitForAll clears it).
  void poison(const Var& var) noexcept;
  // A WaitForVar rethrew `error`: if it is the first one, shutdown need not report it.
  void mark_reported(const std::exception_ptr& error) noexcept;
  // Takes and clears both, for WaitForAll.
  [[nodiscard]] Taken take() noexcept;
  // At shutdown: writes the first error to stderr unless a wait reported it.
  void report_unreported() noexcept;

 private:
  std::mutex mutex_;
  std::exception_ptr first_;     // guarded by mutex_
  bool first_reported_ = false;  // a WaitForVar rethrew first_ (so shutdown need not); guarded by mutex_
  std::vector<Var> poisoned_;    // guarded by mutex_
};

}  // namespace depengine::detail
