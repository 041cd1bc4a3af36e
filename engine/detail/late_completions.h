// LateCompletions: the Completions of async ops that the engine completed itself because the op's function threw
// before completing them.
//
// "Start the I/O, then validate and throw" is an ordinary shape: the function hands its Completion to a thread, then
// throws; the engine completes the op with what it threw; later the thread calls the Completion, once, as it should.
// That call must be harmless, while a second call after a real completion stays an Error (run_context.h). The record's
// ticket alone cannot tell the two apart once the record serves other ops, so the engine remembers here each
// (record, ticket) it completed on a throw, and a Completion whose ticket has moved on looks here before it reports a
// second call. A remembered call is absorbed once: ignored, or, if it carries an error, that error is raised to the
// engine's error log as the op's (a WaitForAll of the op's owner rethrows it, or the error sink gets it), or printed
// to stderr once the engine is gone.
//
// Process-wide, as op records are: a late call may come after its engine was destroyed. Bounded: the last kKept
// completions on a throw are remembered; the late call of an older one, which kKept newer throws have pushed out
// without their own late calls, is reported as a second call.
//
// Thread safety: any thread; one mutex. Cost: only when an async op's function throws, and when a Completion finds its
// ticket moved on (a misuse, or a late call); nothing on any other path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <string_view>

namespace depengine::detail {

class EngineCore;
struct OpRecord;

class LateCompletions {
 public:
  static constexpr std::size_t kKept = 1024;

  // Claims the completion of `op` (its ticket `ticket`) for `engine`, as the Completion's first call would, and
  // remembers it, with the op's owner and name, for a late call. False if a call of the Completion claimed it first.
  [[nodiscard]] static bool claim_on_throw(OpRecord* op, std::uint64_t ticket, EngineCore* engine, std::uint64_t owner,
                                           std::string_view name) noexcept;
  // A call of the Completion of (`op`, `ticket`) found the ticket moved on: true, absorbing `error` as above, if the
  // engine completed that op on a throw and its late call has not come yet.
  [[nodiscard]] static bool absorb(const OpRecord* op, std::uint64_t ticket, const std::exception_ptr& error) noexcept;
  // `engine` is being destroyed: late calls of its ops no longer reach it.
  static void forget(const EngineCore* engine) noexcept;
};

}  // namespace depengine::detail
