// ErrorLog: which errors no wait has reported yet, and which variables carry an error that a WaitForAll clears. The
// bookkeeping behind engine.h's "Errors" rules; the error path and the waits pay for it, a successful op never does.
//
// An op's error travels with the variables it mutates (VarState::error). The log keeps, besides:
//   - the unreported errors, in the order they were raised, each with its op's name and owner: every error an op
//     raised (threw, passed to its Completion, got from its stream or from a failed wait fence) until a wait rethrows
//     it or the error sink receives it;
//   - the poisonings: which variable an op attached which error to, and that op's owner.
// An op's owner is the thread that pushed it, or for an op pushed from inside a running op, that op's owner: so the
// ops a user thread pushes, directly or through the ops it pushed, are that thread's.
//
// What each wait does with it (engine.h, "Errors"):
//   - WaitForVar(v) rethrows v's error: reported() drops every unreported entry of that error, and unpoisoned() the
//     variable's poisonings (its error is cleared).
//   - WaitForAll() on thread T: take(T) hands out the first unreported error (rethrown; any owner's), T's other
//     unreported errors (cleared without being rethrown: the error sink's), and T's poisonings (the variables it
//     clears). Other threads' poisonings stay: their own waits still find their errors.
//   - ~Engine(): every unreported error goes to the sink.
// The sink is EngineOptions::error_sink, or by default a line on stderr for each of the first kStderrLines errors and
// one line at shutdown counting the rest.
// An error raised twice (a failed stream's error reaches every op queued on it) is kept once while it stays among the
// last few raised, and reported() drops every copy, so a wait's report is never repeated by WaitForAll. A failed
// stream's error may also reach the ops behind it (skipped, passing it on to a variable that a WaitForVar reports)
// before the stream executor reports the op whose work failed: that op was issued before the engine knew of the
// failure, so its raise (`issued`) is the failure the wait reported, and is dropped if the error is among the last
// kRecent reported. An op that meets a failed stream or timeline later raises it anew, and a wait reports it again.
//
// Thread safety: every member from any thread, under one mutex (errors are the slow path). Allocation: raise() and
// poison() grow lists; when memory runs out the entry is dropped, which only makes a later wait report less.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <depengine/engine/errors.h>
#include <depengine/engine/var.h>

namespace depengine::detail {

class ErrorLog {
 public:
  static constexpr std::size_t kStderrLines = 16;

  // `sink`: EngineOptions::error_sink (null: the default, on stderr).
  explicit ErrorLog(ErrorSink sink) noexcept : sink_(std::move(sink)) {}

  struct Entry {
    std::exception_ptr error;
    std::string op;  // the op's name; empty when it had none
    std::uint64_t owner = 0;
  };
  struct Poisoning {
    Var var;
    std::exception_ptr error;  // what the op attached: a clear takes the variable's error only if it is still this
    std::uint64_t owner = 0;
  };
  // What WaitForAll on one thread takes (see above).
  struct Taken {
    std::exception_ptr first;       // to rethrow; null when every error was reported
    std::vector<Entry> unreported;  // the owner's other unreported errors: for the sink
    std::vector<Poisoning> clear;   // the owner's poisonings
  };

  // Records an error an op raised, unless it is one of the last few unreported ones already, or, `issued` (the op's
  // device work failed: see above), one of the last reported.
  void raise(const std::exception_ptr& error, std::string_view op, std::uint64_t owner, bool issued = false) noexcept;
  // Records that an op of `owner` attached `error` to `var`.
  void poison(const Var& var, const std::exception_ptr& error, std::uint64_t owner) noexcept;
  // A WaitForVar rethrew `error`, which it cleared from `var`.
  void reported(const std::exception_ptr& error, const Var& var) noexcept;
  [[nodiscard]] Taken take(std::uint64_t owner) noexcept;
  // Hands `dropped` to the sink, one call each.
  void sink(std::vector<Entry>& dropped, UnreportedError::When when) noexcept;
  // The name of the op that raised `error` (Engine::FailedOpName), while the log knows it: unreported, or among the
  // last kRecent that waits reported. Empty when that op had no name; nullopt when the log does not know the error.
  [[nodiscard]] std::optional<std::string> op_of(const std::exception_ptr& error);
  // At shutdown: hands every unreported error to the sink (and counts those the default sink did not print).
  void sink_unreported() noexcept;

 private:
  static constexpr std::size_t kRecentDuplicates = 8;  // how far back raise() looks for the same error
  static constexpr std::size_t kRecent = 64;           // reported errors whose op op_of() still names

  // Keeps `entry` among the recently reported, with its op's name (under mutex_).
  void remember_locked(Entry&& entry) noexcept;
  // Keeps `error` among the recently reported, whether its op is known or not (under mutex_).
  void note_reported_locked(const std::exception_ptr& error) noexcept;

  const ErrorSink sink_;
  std::mutex sink_mutex_;    // held around calls of the sink (never concurrent); taken before mutex_, never within
  std::size_t printed_ = 0;  // errors the default sink wrote or counted; guarded by sink_mutex_
  std::mutex mutex_;
  std::vector<Entry> unreported_;            // guarded by mutex_; in raise order
  std::vector<Poisoning> poisonings_;        // guarded by mutex_
  std::deque<Entry> recent_;                 // the last kRecent reported, oldest first; guarded by mutex_
  std::deque<std::exception_ptr> reported_;  // the last kRecent errors waits reported, oldest first; guarded by mutex_
};

}  // namespace depengine::detail
