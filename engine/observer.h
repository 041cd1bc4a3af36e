// Observer: a user object an engine tells about every op's life and every executor thread (Taskflow's
// ObserverInterface, oneTBB's task_scheduler_observer, in one), registered with EngineOptions::observers.
//
// For every op pushed (Push, PushAsync, DeleteVariable) or replayed (Engine::Replay), the engine calls, in this order
// and each exactly once:
//   OnReady(op)   its dependencies are met: every variable and wait fence it waits for has released it. On an engine
//                 with a stream executor a CPU op may still wait after this for device work its inputs were written by
//                 (it is parked until that work completes): that wait counts as queueing (ready to start).
//   OnStart(op)   it starts: a CPU op's function is called (worker set), a stream op is issued (stream set). An op that
//                 does not run (skipped, cancelled) has no OnStart.
//   OnEnd(op)     it ends: a CPU op's function returned (an async op: its Completion was called), a stream op's device
//                 work completed, or it was stopped before it ran; `outcome` says which, `error` carries its error.
// The engine's own ops (those of waits and ClearErrors) are not observed; captured pushes are not ops until replayed.
// OnEnd comes before the op's successors are released and before it leaves the in-flight count, so once WaitForAll
// (or the engine's destructor) returns, every op pushed before has had all its calls.
//
// For every thread of a oneTBB pool (ThreadPoolExecutor), OnThreadStart when the thread enters the pool's arena and
// OnThreadStop when it leaves (oneTBB's task_scheduler_observer: a thread the pool has let go may enter again later, so
// the two come in pairs, possibly many per thread). For the completion thread of a stream executor (StreamExecutor),
// where its ops end, and the progress thread of an MpiExecutor, one pair, as worker -1: when the engine starts the
// executor and when the executor stops. On that thread, so a user may name it (pthread_setname_np) or pin it there.
// The inline executor has no threads of its own.
//
// Callbacks run on the thread where the event happens (a worker, a pushing thread that runs the op itself, a stream
// executor's thread, the thread that calls an async op's Completion), concurrently with each other: an observer is
// responsible for its own thread safety. They run inside the engine, at points where an op is between two steps, and
// must be short and must not block. They may read the event and their own state, take a lock of their own held only
// briefly, and allocate. They must not call the engine (Push, waits, Replay, InFlightReport, ...) nor block on
// anything an op does; they must not throw (each is noexcept: a throw terminates). Strings in an event live for the
// call only.
//
// Times are nanoseconds of std::chrono::steady_clock since its epoch, taken by the engine, so that every observer of an
// engine sees the same values (a trace's slices are on the same clock). The engine reads its clock at an op's push, its
// start and its end, and no more: an op ready at its push is ready at its push time, one made ready by a completion is
// ready at that completion's end time (the engine's own work between the two, tens of nanoseconds, counts as its
// queueing), and one that its own push runs on the pushing thread (an inline executor, work-first) starts at its push
// time (the push's work after its read counts as its run). Where the CPU's time-stamp counter is invariant (x86-64
// Linux, constant_tsc and nonstop_tsc) the clock is that counter, converted to steady_clock's scale: a time is then
// steady_clock's to within a microsecond and a few parts in 10^5 of the engine's age (detail/event_clock.h;
// DEPENGINE_EVENT_CLOCK=steady reads steady_clock itself). An observer that needs no times says so (Timed() false);
// when no observer of an engine needs them, the engine reads no clock and every time in the events is 0.
//
// Lifetime: an observer must outlive the engine it is registered with; the engine never owns or deletes it.
// Cost: an engine without observers pays one predictable branch per event (a load of a pointer set at construction). An
// engine with observers also takes an op id from an engine-wide counter at each push, writes the op's observed state
// (one more cache line of its record, which crosses to the thread that runs it), builds an OpEvent and calls each
// observer through a virtual call per event, and, if one is Timed(), reads the clock two or three times per op (about
// 12 ns each on the counter here, 25 on steady_clock). Measured in bench/notes/2026-11-28-statistics-cost.md.
#pragma once

#include <cstdint>
#include <exception>
#include <string_view>

#include <depengine/frontier/axis.h>

namespace depengine {

// How an op ended.
enum class OpOutcome : std::uint8_t {
  kRan,        // its function ran (a stream op: was issued and its device work completed) without an error
  kFailed,     // it ran and failed: its function threw, its Completion carried an error, or its device work failed
  kSkipped,    // it did not run: an input carried an error (it passes that error on), or a stream it waited for failed
  kCancelled,  // it did not run: its CancelScope was cancelled, or the engine was destroyed with cancel_on_destruction
};

// "ran", "failed", "skipped", "cancelled".
[[nodiscard]] constexpr std::string_view to_string(OpOutcome outcome) noexcept {
  switch (outcome) {
    case OpOutcome::kRan:
      return "ran";
    case OpOutcome::kFailed:
      return "failed";
    case OpOutcome::kSkipped:
      return "skipped";
    case OpOutcome::kCancelled:
      return "cancelled";
  }
  return "?";
}

// One event of one op. The times of the steps it has passed are set, the others 0: OnReady has pushed_at and
// ready_at; OnStart adds started_at, worker and stream; OnEnd adds ended_at, outcome and error (started_at 0 for an op
// that did not run).
struct OpEvent {
  std::uint64_t id = 0;        // the op's, unique among this engine's ops (each replayed op of each replay has its own)
  std::string_view name;       // PushOptions::name; empty for an op without one
  std::uint32_t executor = 0;  // its executor's index in EngineOptions::executors
  std::int64_t replay = -1;    // a replayed op: which replay of its graph (RunContext::replay); -1: a pushed op
  std::int64_t pushed_at = 0;  // its push (a replayed op: its Replay call)
  std::int64_t ready_at = 0;   // its dependencies were met
  std::int64_t started_at = 0;  // its function was called (a stream op: issued); 0 if it did not run
  std::int64_t ended_at = 0;    // it ended (OnEnd)
  int worker = -1;              // the executor's worker that ran it; -1: a thread not the executor's, or a stream op
  // A stream op: the axis of the stream it was issued on (StreamFacet::axis_name names it, "d0 compute 1") and its
  // epoch there; a CPU op: the null axis.
  Axis stream{};
  std::uint64_t epoch = 0;
  std::uint32_t device = 0;                   // a stream op: its device
  OpOutcome outcome = OpOutcome::kRan;        // OnEnd only
  const std::exception_ptr* error = nullptr;  // OnEnd only: the op's error, or null
};

// A thread of an executor (OnThreadStart, OnThreadStop).
struct ThreadEvent {
  std::uint32_t executor = 0;      // its executor's index in EngineOptions::executors
  std::string_view executor_name;  // Executor::name() of that executor
  int worker = -1;                 // the thread's worker index in its executor (RunContext::worker); -1: not a worker
};

// Implement every member; see the top of this file for when each is called and what it may do.
class Observer {
 public:
  Observer() = default;
  Observer(const Observer&) = delete;
  Observer& operator=(const Observer&) = delete;
  virtual ~Observer() = default;

  // The op's events, in this order, each once per op (OnStart only if it ran); see the top of this file.
  virtual void OnReady(const OpEvent& op) noexcept = 0;
  virtual void OnStart(const OpEvent& op) noexcept = 0;
  virtual void OnEnd(const OpEvent& op) noexcept = 0;
  // A thread of an executor started, or stopped, working for it (see the top of this file for which threads).
  virtual void OnThreadStart(const ThreadEvent& thread) noexcept = 0;
  virtual void OnThreadStop(const ThreadEvent& thread) noexcept = 0;
  // Whether the observer reads the times of its events; asked once, when the engine is built. Default: true.
  [[nodiscard]] virtual bool Timed() const noexcept { return true; }
};

}  // namespace depengine
