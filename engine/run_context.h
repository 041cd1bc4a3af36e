// What an op's function receives: the RunContext (where and as what it runs), and for an asynchronous op the
// Completion that it, or whatever it hands its work to, must call once.
//
// Users read these in the functions they push (engine.h: Push passes a RunContext to fn(const RunContext&); PushAsync
// adds a Completion); the engine builds them (engine/detail/) for pushed, replayed and stream ops alike, and backends
// above the engine read RunContext::stream and RunContext::waits (buffers/, distributed/).
//
// Contract:
// - A RunContext is built by the thread that runs the op, on its stack, and is valid only during the call of the
//   op's function, as is everything its pointers name (the stream placement, the wait frontier, the input error). A
//   function that hands work to another thread copies what that work needs; an async op must not read `waits` once it
//   has handed its Completion on. Nothing in it changes during the call except what cancelled() reads, which another
//   thread's CancelScope::Cancel() may set meanwhile (an atomic; the read is safe from any thread).
// - A Completion is a 16-byte value (the op's record and a ticket), copied freely and callable from any thread; the
//   first call of any copy completes the op, and what the caller did before it is visible to the ops that depend on the
//   op. It stays memory-safe to call for the life of the process (records are pooled and never freed), so a stale or
//   second call is refused with Error, not undefined. The op's engine cannot be destroyed before the first call
//   (~Engine() waits for every op in flight). The call may run other ops before it returns: on the inline executor, the
//   successors it makes ready run on the calling thread (inline_executor.h).
// - Cost: a RunContext is built per run and allocates nothing; a Completion call does, on the calling thread, the work
//   of the op's completion (granting its successors), as the return of a synchronous op's function does.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <span>
#include <string_view>

#include <depengine/engine/cancel_scope.h>
#include <depengine/engine/var.h>
#include <depengine/frontier/vocabulary.h>

namespace depengine {

class Executor;
struct StreamPlacement;

namespace detail {
struct OpRecord;
class EngineCore;
}  // namespace detail

// Where and as what an op runs. Valid for the duration of the call of the op's function.
struct RunContext {
  std::string_view name;  // the op's PushOptions::name ("" when none was given)
  // Index of the executor's worker thread running it; -1 on any other thread. Unique among the threads running the
  // executor's ops at a time; for the threadpool, from 0 to ThreadPoolExecutor::workers() inclusive (oneTBB's thread
  // index in the pool's arena, which need not be consecutive: the worker of a 1-worker pool is 1).
  int worker = -1;
  Executor* executor = nullptr;  // the executor running it (owned by the engine)
  // For an op of a stream executor: the stream it is being issued on (backend, stream handle, device, axis, epoch;
  // executors/stream/stream_executor.h). The function enqueues its device work there and returns; the op completes
  // when that work has: a kernel on ctx.stream->native (CUDA, HIP), host work with launch_host(*ctx.stream, fn) on
  // host streams (executors/host_stream/host_stream_backend.h). No cast of the executor or the backend is needed. Null
  // for CPU executors.
  const StreamPlacement* stream = nullptr;
  // For an op of a stream executor: its wait frontier, the signals of the ops it depends on (its stream waits for
  // them, or already follows them, before the work enqueued now). What a deletion hands a memory pool as the death
  // frontier of a block (buffers/buffer.h). For a pushed op of a CPU executor on an engine with a stream
  // executor: the same signals, every one of them completed before the op started (what it knows has happened, which
  // a message may carry to another process: distributed/communicator.h), or null if a stream it waited for failed; an
  // async op must not read it once it has handed its Completion to anyone (a completion with learned entries reuses
  // its storage). Null otherwise.
  const WaitFrontier* waits = nullptr;

  // Whether the op's CancelScope has been cancelled since the op started (cancel_scope.h). A long op may poll it and
  // stop early; if what it mutates is then incomplete, it should throw Cancelled (errors.h) so that its dependents are
  // skipped. (An engine's teardown, EngineOptions::cancel_on_destruction, cancels only ops that have not started.)
  [[nodiscard]] bool cancelled() const noexcept {
    // acquire: pairs with the release store of CancelScope::Cancel().
    return scope != nullptr && scope->cancelled.load(std::memory_order_acquire);
  }
  const detail::ScopeState* scope = nullptr;  // for cancelled(): the op's scope; null: none
  // For an op pushed with no_skip: the error one of the variables it uses carries (the first in the engine's order of
  // its variables), which it runs despite; null when none does, and for every other op (which an input error skips).
  // Valid during the call.
  const std::exception_ptr* input_error = nullptr;
  // For such an op: the variable that carries *input_error (to name it in a message, or tell which input failed); a
  // null handle when input_error is null.
  Var input_error_var{};
  // For an op run by Engine::Replay (graph.h): which replay of its graph, 0 for the first (so step k can read batch
  // k). -1 for an op that was pushed.
  std::int64_t replay = -1;
};

// The completion of an asynchronous op (PushAsync). Call it exactly once, from any thread, when the op's work is
// done: with no argument (or a null exception_ptr) for success, or with the error. A copy is the same completion.
//
// Happens-before: everything the op did before calling the completion is visible to the ops that depend on it.
// The op's function may return before or after calling it; the op completes at the call, not at the return.
// Calling it a second time (from any copy) throws Error and changes nothing. If the function throws before calling it,
// the engine completes the op with what it threw, and the one call that comes later (from work the function started
// before throwing) is absorbed: ignored, or, with an error, that error is handed on as the op's, unreported (a
// WaitForAll of its pusher rethrows it, else the error sink gets it); a call after that one is a second call. The
// engine remembers the last LateCompletions::kKept (1,024) such completions whose late call has not come. Never calling
// it leaves the op in flight forever: WaitForVar on its mutated variables, WaitForAll and the engine's destructor then
// wait for ever.
class Completion {
 public:
  // Completes the op, without an error or with `error`: see above for what a second call does.
  void operator()() const { (*this)(std::exception_ptr{}); }
  void operator()(std::exception_ptr error) const;
  // Completes the op as above, and makes `learned` part of what it hands on: entries (axis, epoch) of timelines the
  // engine did not run, each of which has completed, such as what a message's sender knew (its RunContext::waits) or
  // a collective's completion. On an engine with a stream executor the engine records each as completed on its tracker
  // (knowing at most kMaxEngineAxes axes: an entry whose axis does not fit is left out, which only forgets that it
  // completed) and passes them to the op's successors with its signal, so an op that later finds one in its wait
  // frontier needs no wait for it (StreamStats::waits_complete), and forwards it in turn. An entry on an axis of the
  // engine's own executors passes on only if the engine already has it completed; it is never recorded (another
  // process's axis that aliases one of ours must not declare our work done). Elsewhere it is operator()(error).
  void operator()(std::exception_ptr error, std::span<const FrontierEntry> learned) const;

 private:
  friend class detail::EngineCore;
  Completion(detail::OpRecord* op, std::uint64_t ticket) noexcept : op_(op), ticket_(ticket) {}

  detail::OpRecord* op_;  // op records are pooled for the process lifetime, so a stale call stays memory-safe
  std::uint64_t ticket_;  // the record's completion ticket for this op; a second call finds it moved on
};

}  // namespace depengine
