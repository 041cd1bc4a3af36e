// Observers: the engine's observers (EngineOptions::observers, and the OpStatistics it keeps when statistics are on)
// and the one place each event of an op's life is told to them (observer.h for the contract). The core and the graph
// runner call these functions at the steps of an op's life, for pushed and replayed ops alike:
//   pushed / replayed   stamp the op's id and push time (a push, a Replay call)
//   ready               the last grant arrived (EngineCore::hand_on and run_pushed; GraphRunner::made_ready)
//   started             the gate let it run, just before its function (execute, issue; GraphRunner::execute)
//   ended               before its successors are granted and before it retires (execute, complete_async_uses,
//                       issue, skip, complete_issued; GraphRunner::execute and complete_async)
// The core holds a pointer to this object that is null on an engine without observers, and tests it before each call:
// the one branch per event that an engine without observers pays.
//
// Thread safety: every member from any thread (the events of one op are ordered by the op's own hand-offs); the
// object is immutable after construction but for the id counter. Lifetime: the engine's (Diagnostics owns it).
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <vector>

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

  // Nanoseconds of std::chrono::steady_clock since its epoch (OpEvent's times), or 0 when no observer is Timed().
  [[nodiscard]] std::int64_t now() const noexcept;

  // A pushed op: its record is filled, not yet published.
  void pushed(OpRecord& op) noexcept;
  void ready(OpRecord& op) noexcept;
  // `worker`: RunContext::worker. A stream op: -1, its issued_at set.
  void started(OpRecord& op, int worker, bool stream) noexcept;
  // `error`: the op's error, or null.
  void ended(OpRecord& op, OpOutcome outcome, const std::exception_ptr* error) noexcept;

  // A replay: called by the replaying thread before any of its ops can run. Makes the instance's ObservedOp array the
  // first time (throws std::bad_alloc, before the replay is admitted).
  void replayed(GraphInstance& instance);
  void ready(GraphOp& op) noexcept;
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

  std::vector<Observer*> list_;  // not owned, but statistics_; immutable
  bool timed_ = false;           // an observer is Timed(); immutable
  std::unique_ptr<OpStatistics> statistics_;
  const std::vector<std::unique_ptr<Executor>>& executors_;
  // OpEvent::id: taken by each push (one) and replay (its ops), from any thread; on a line of its own.
  alignas(support::kCacheLine) std::atomic<std::uint64_t> next_id_{1};
};

}  // namespace depengine::detail
