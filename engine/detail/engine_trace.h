// EngineTrace: where the engine's push, run, issue and completion paths hook into tracing (Engine::StartTrace,
// DEPENGINE_TRACE). TraceRecorder (trace_recorder.h) is the file; this is which recorder is on and what each hook
// records into it.
//
// The recorder on now is one atomic pointer. A push stamps its op with a trace id only while one is on (a relaxed load:
// it dereferences nothing); the recording hooks load the pointer again, with acquire, before using it. Every recorder
// this engine made is kept until the engine is destroyed, so an op that loaded the pointer just before a trace stopped
// still records into live memory.
//
// Thread safety: start()/stop_begin()/stop_end() serialise on a mutex; the hooks from any thread. Every hook is
// noexcept: out of memory while tracing, the trace misses the op and the op is unaffected.
// Cost when off: one relaxed load per push, plus a branch on the op's trace id at each hook; one acquire load per
// replayed op.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include <depengine/engine/detail/graph_plan.h>
#include <depengine/engine/detail/op_record.h>
#include <depengine/engine/detail/trace_recorder.h>
#include <depengine/engine/fence.h>
#include <depengine/engine/var_queue/op_node.h>

namespace depengine::detail {

class EngineTrace {
 public:
  // DEPENGINE_TRACE=path: the first engine of the process traced to `path` writes `path`, the next ones `path.2`, ...
  [[nodiscard]] static std::string env_path(const std::string& path);

  // Starts recording to `path`; throws Error if a trace is already on.
  void start(std::string path);
  // The recorder on now; throws Error ("StopTrace: no trace is on") if none. The caller waits for the ops in flight,
  // then calls stop_end() and writes the recorder's file.
  [[nodiscard]] TraceRecorder& stop_begin();
  void stop_end() noexcept;
  [[nodiscard]] bool on() const noexcept {
    // relaxed: only whether a trace is on; the hooks load the pointer again, with acquire, before using it.
    return current_.load(std::memory_order_relaxed) != nullptr;
  }
  // The recorder on now, or null; for timing an op's function around the hooks below.
  [[nodiscard]] TraceRecorder* recorder() const noexcept {
    return current_.load(std::memory_order_acquire);  // acquire: pairs with the release store in start()
  }

  // A CPU op `op` ran on `worker` from `start` (recorder().now()) until now, after the work of `waited_for` had
  // completed (its wait frontier on an engine with streams; else null): draws its arrows from those stream ops.
  void cpu_op(const OpRecord& op, int worker, std::int64_t start, std::size_t in_flight,
              const WaitFrontier* waited_for) noexcept;
  // An op of replay `replay` of `plan`, with trace id `id`, ran on `worker` of `executor` from `start` until now. Its
  // slice is named "<name> (replay <replay>)".
  void replayed_op(const GraphPlan& plan, const GraphPlan::Op& op, std::uint64_t id, std::int64_t replay,
                   Executor* executor, int worker, std::int64_t start, std::size_t in_flight) noexcept;
  // Op `from` of replay `traced` (its first op's trace id) of `plan` gave op `to` of the same replay its last grant.
  void replay_release(const GraphPlan& plan, std::uint32_t from, std::uint32_t to, std::uint64_t traced) noexcept;
  // The pushed op with trace id `from` gave replayed op `to` its last grant, through the replay's join of `var`.
  void join_release(std::uint64_t from, std::uint64_t to, const VarState* var, std::uint32_t tag) noexcept;
  // Why ops waited (trace_recorder.h, Wait): a traced op was pushed (its record's trace id just given)...
  void pushed(const OpRecord& op) noexcept;
  // ... its push gave its last grant (`bound`: after waiting at EngineOptions::max_in_flight) ...
  void ready_at_push(const OpRecord& op, bool bound = false) noexcept;
  // ... its last wait fence was reached or promised (by the op that raises it, if the thread is raising it for one:
  // FenceRaiser) ...
  void fence_reached(const OpRecord& op, const Fence& fence) noexcept;
  // ... or, parked on the tracker, it was unparked: the device work it waited for completed.
  void unparked(const OpRecord& op) noexcept;
  // Replay: the ops of `plan`, from trace id `first`, are replayed now; once published, those of `ready` (`ops`: the
  // instance's) are ready at once.
  void replay_pushed(const GraphPlan& plan, std::uint64_t first) noexcept;
  void replay_ready(std::uint64_t first, const GraphOp* ops, const TaskList& ready) noexcept;

  // While a traced op raises or promises its signal fences on this thread, the op that reached fences were raised by.
  class FenceRaiser {
   public:
    explicit FenceRaiser(const OpRecord* op) noexcept;
    ~FenceRaiser();
    FenceRaiser(const FenceRaiser&) = delete;
    FenceRaiser& operator=(const FenceRaiser&) = delete;

   private:
    const OpRecord* outer_;
  };
  // A stream op is issued at `signal` (its stream's axis, its epoch there): remembers its lane, the issue time and the
  // epoch (or drops it from the trace), and draws its arrows from the stream ops its wait frontier names, as device
  // waits where `waited` has the entry's bit (ExecutorHost::issue), elided otherwise.
  void stream_issue(OpRecord& op, FrontierEntry signal, std::uint32_t waited) noexcept;
  // A stream op has completed; also samples the device waits of `executors`.
  void stream_op(const OpRecord& op, std::size_t in_flight,
                 std::span<const std::unique_ptr<Executor>> executors) noexcept;
  // The pushed op `from_op` gave every pushed op in `granted` its last grant, through the variables they share: the
  // arrows, and why those ops waited. Joins of replays in `granted` are passed over: GraphRunner::grant_join() draws
  // their arrows. A stream op's release draws no arrows: its successors draw theirs from their wait frontiers
  // (stream_issue, cpu_op), whatever released them.
  void flows(const OpRecord& from_op, const ReadyList& granted) noexcept;
  // The same for op `index` of a replay of `plan` whose ops' trace ids start at `traced`.
  void flows(const GraphPlan& plan, std::uint32_t index, std::uint64_t traced, const ReadyList& granted) noexcept;

  // TraceRecorder::critical_path() of the trace on now, or else of the last one stopped; Error if there was none.
  [[nodiscard]] std::string critical_path();

 private:
  std::atomic<TraceRecorder*> current_{nullptr};
  std::mutex mutex_;
  std::vector<std::unique_ptr<TraceRecorder>> recorders_;  // guarded by mutex_
};

}  // namespace depengine::detail
