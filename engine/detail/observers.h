// Observers: the engine's observers (EngineOptions::observers, and the OpStatistics it keeps when statistics are on)
// and the one place each event of an op's life is told to them (observer.h for the contract). The core and the graph
// runner call these functions at the steps of an op's life, for pushed and replayed ops alike:
//   pushed / replayed   stamp the op's id and push time (a push, a Replay call)
//   ready               the last grant arrived (EngineCore::hand_on, run_pushed and route; GraphRunner::made_ready)
//   started             the gate let it run, just before its function (execute, issue; GraphRunner::execute)
//   ended               before its successors are granted and before it retires (execute, complete_async_uses,
//                       issue, skip, complete_issued; GraphRunner::execute and complete_async)
// The core holds a pointer to this object that is null on an engine without observers, and tests it before each call:
// the one branch per event that an engine without observers pays.
//
// Clock reads (EventClock, when an observer is Timed()): one at the push, one at the start, one at the end of each op.
// The ready time is never read on its own where an earlier read already holds it: an op ready at its push is ready at
// its push time; an op made ready by a completion on this thread is ready at that completion's end time (the engine's
// own work between that read and the grant, tens of nanoseconds, counts as the op's queueing). Only an op made ready
// some other way (a fence) reads the clock for it. And an op ready at its push that the push runs on its own thread (an
// inline executor, work-first) starts at its push time: the push's own work after its read (its queues, the gate, tens
// of nanoseconds) counts as the op's run. So two reads per op on those paths, three elsewhere.
//
// Thread safety: every member from any thread (the events of one op are ordered by the op's own hand-offs); the
// object is immutable after construction but for the id counter. Lifetime: the engine's (Diagnostics owns it).
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <vector>

#include <depengine/engine/detail/event_clock.h>
#include <depengine/engine/detail/graph_plan.h>
#include <depengine/engine/detail/op_record.h>
#include <depengine/engine/observer.h>
#include <depengine/engine/op_statistics.h>
#include <depengine/executors/executor.h>
#include <depengine/support/cache_line.h>

namespace depengine::detail {

class Observers {
 public:
  // `observers` (none null), plus an OpStatistics of the engine's own if `statistics`; `executors` are the engine's,
  // which outlive this object.
  Observers(std::vector<Observer*> observers, bool statistics, const std::vector<std::unique_ptr<Executor>>& executors);
  Observers(const Observers&) = delete;
  Observers& operator=(const Observers&) = delete;

  // The engine's own statistics, or null.
  [[nodiscard]] OpStatistics* statistics() const noexcept { return statistics_.get(); }

  // Nanoseconds of std::chrono::steady_clock since its epoch (OpEvent's times, event_clock.h), or 0 when no observer
  // is Timed().
  [[nodiscard]] std::int64_t now() const noexcept { return timed_ ? clock_.now() : 0; }

  // A pushed op: its record is filled, not yet published.
  void pushed(OpRecord& op) noexcept;
  // The op is ready: at its push (ready_at_push), or (ready) made so by the completion of `completed` on this thread
  // (the record of a pushed op or a replayed GraphOp whose ended() this thread called last: its end time), or by
  // anything else (`completed` null, or not the op this thread last ended: the clock is read). Never before its push:
  // a completion that ended before the op was published grants it after, and it is then ready at its push time.
  void ready_at_push(OpRecord& op) noexcept;
  void ready(OpRecord& op, const void* completed) noexcept;
  // The push that called ready_at_push() on this thread is done with the op: its start, if later, reads the clock.
  void pushed_done() noexcept;
  // The op's push waited for room under the in-flight bound and was admitted now: if its push gives its last grant,
  // it is ready now, not at its push time.
  void admitted(OpRecord& op) noexcept;
  // `worker`: RunContext::worker. A stream op: -1, its issued_at set.
  void started(OpRecord& op, int worker, bool stream) noexcept;
  // `error`: the op's error, or null.
  void ended(OpRecord& op, OpOutcome outcome, const std::exception_ptr* error) noexcept;

  // A replay: called by the replaying thread before any of its ops can run. Makes the instance's ObservedOp array the
  // first time (throws std::bad_alloc, before the replay is admitted).
  void replayed(GraphInstance& instance);
  // As the pushed op's; ready_at_push: ready at its Replay call.
  void ready_at_push(GraphOp& op) noexcept;
  void ready(GraphOp& op, const void* completed) noexcept;
  void started(GraphOp& op, int worker) noexcept;
  void ended(GraphOp& op, OpOutcome outcome, const std::exception_ptr* error) noexcept;

  // A thread of `executor` entered (started) or left (stopped) it, on that thread.
  void thread_started(const Executor& executor, int worker) noexcept;
  void thread_stopped(const Executor& executor, int worker) noexcept;

 private:
  [[nodiscard]] std::uint32_t index_of(const Executor* executor) const noexcept;
  [[nodiscard]] OpEvent event_of(const OpRecord& op) const noexcept;
  [[nodiscard]] OpEvent event_of(const GraphOp& op) const noexcept;
  [[nodiscard]] ThreadEvent thread_event(const Executor& executor, int worker) const noexcept;
  // The time `op`'s ready is told at: the end time this thread last told, if `completed` is the op it was told for.
  [[nodiscard]] std::int64_t ready_time(const void* completed) const noexcept;
  void tell_ready(const OpEvent& event) const noexcept;
  // OnEnd to every observer, the statistics last (called directly: its OnReady and OnStart do nothing).
  void tell_end(const OpEvent& event) const noexcept;

  std::vector<Observer*> list_;  // not owned; the user's, without statistics_; immutable
  bool timed_ = false;           // an observer is Timed(); immutable
  EventClock clock_;             // read only when timed_; immutable
  std::unique_ptr<OpStatistics> statistics_;
  const std::vector<std::unique_ptr<Executor>>& executors_;
  // OpEvent::id: taken by each push (one) and replay (its ops), from any thread; on a line of its own.
  alignas(support::kCacheLine) std::atomic<std::uint64_t> next_id_{1};
};

}  // namespace depengine::detail
