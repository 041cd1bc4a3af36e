// TraceRecorder: what an engine records while tracing (Engine::StartTrace, DEPENGINE_TRACE), written as a Chrome
// trace-event JSON file that Perfetto (ui.perfetto.dev) and chrome://tracing open.
//
// The file holds:
//   - one lane (a "thread" of process 1) per host thread that ran ops, named after its executor and worker index
//     ("threadpool worker 1") or numbered ("thread 2") for threads that are not workers (a waiting thread that helps,
//     the inline executor's pushing thread), and one lane per stream ("cuda d0 compute 1");
//   - one complete slice ("ph":"X", "cat":"op") per op, named after PushOptions::name, with its variables in args
//     ("v7" is variable slot 7, "v7.2" its third incarnation after two DeleteVariable). A CPU op's slice spans its
//     function; a stream op's, the device time of its work: from when its stream reached it to when the stream
//     finished it (stamps its executor enqueued around it, ExecutorHost::ran_on_device), or, where those are not
//     known (a stamp failed), from its issue, or the end of the previous op on its stream if later, to the moment its
//     completion reached the engine;
//   - flow arrows ("ph":"s" then "ph":"f", "cat":"dep"), one per dependency, named for how it was kept:
//       "release": a CPU op (or a replayed op) gave the op its last grant when it completed, from the end of its slice;
//       "device wait": the op's stream waited on the device for the event of a stream op it depends on;
//       "elided": the op depends on a stream op, and needed no wait: its stream already knew that op's work (the same
//       stream, or one it had waited for), or the work had completed;
//       "host wait": a CPU op depends on a stream op, and ran once the tracker had that op's work completed.
//     An arrow from a stream op starts at the start of its slice (it releases at its issue). Its dependencies on stream
//     ops are read from the op's wait frontier: the last op it depends on of each stream (the earlier ones its FIFO
//     order implies), whatever released it, also when it was ready at its push;
//   - in each op slice's args, why the op waited (docs/pictures.md, "Why an op waited"): "waited on", what gave it its
//     last grant ("v3 held by 'forward' (op 12)", a fence and the op that raised it, the device work of a stream op,
//     room under max_in_flight, or nothing: ready at its push); "waited (us)", from its push to that grant; "queued
//     (us)", from that grant to the start of its slice; and, for scripts/critical_path.py, "wait_kind",
//     "waited_for_op" (the op that held it, 0 if none), "pushed_ts" and "ready_ts" (on the trace's clock, in us);
//   - at the end, the critical path of the recorded window (critical_path() below) as slices ("cat":"critical path")
//     on a lane "critical path" of their own, and in words under "otherData";
//   - counters: "ops in flight" at each op's end, and, with stream executors, "device waits" (issued; elided,
//     dominated or found complete) at each stream op's completion;
//   - in a file a stall report wrote: one instant event ("ph":"i", "cat":"in flight") per op the report named, on a
//   lane
//     "in flight at stall", at the moment of writing, with what the op was doing then in args.state.
// Not recorded: ops pushed before the trace started, ops skipped because of an error, and the engine's own ops
// (the ones behind WaitForVar and WaitForAll). An arrow whose two ops are not both recorded is left out.
//
// Thread safety: every member from any thread (one mutex; tracing adds a few microseconds per op (3 on a 2-core VM) and
// some 300 bytes of memory per op (its slice, its arrows, why it waited) until the file is written). Ops get ids from a
// process-wide counter, so an op of an earlier trace is never mistaken for one of a later trace.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <depengine/engine/detail/critical_path.h>
#include <depengine/executors/executor.h>
#include <depengine/frontier/axis.h>

namespace depengine::detail {

class TraceRecorder {
 public:
  explicit TraceRecorder(std::string path);

  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  // A new op id, never 0 (0 means "not traced").
  [[nodiscard]] static std::uint64_t next_op() noexcept;
  // The first of `count` consecutive new op ids (a replay's ops: graph_plan.h).
  [[nodiscard]] static std::uint64_t next_ops(std::size_t count) noexcept;
  // Nanoseconds since the recorder was made.
  [[nodiscard]] std::int64_t now() const noexcept;
  // A moment given in nanoseconds of std::chrono::steady_clock since its epoch, on the scale of now().
  [[nodiscard]] std::int64_t at(std::int64_t steady_ns) const noexcept {
    return steady_ns - std::chrono::duration_cast<std::chrono::nanoseconds>(origin_.time_since_epoch()).count();
  }

  // The calling thread's lane, named after `executor` and `worker` (-1: not a worker) the first time.
  [[nodiscard]] std::uint32_t thread_lane(std::string_view executor, int worker);
  // The lane of `executor`'s stream with `axis`, named after them the first time ("cuda d0 compute 1").
  [[nodiscard]] std::uint32_t stream_lane(Axis axis, const Executor& executor);

  struct Slice {
    std::uint64_t op = 0;
    std::string name;
    std::uint32_t lane = 0;
    std::int64_t start = 0, end = 0;  // now() values
    bool released_at_start = false;   // a stream op: it released its successors when it was issued
    std::string reads, mutates;       // variable labels, space-separated
  };
  // Records a finished op. A stream op's slice starts no earlier than the end of the previous one on its lane.
  void slice(Slice slice, std::int64_t ops_in_flight);
  // How a dependency was kept (see the file's arrows above).
  enum class Flow : std::uint8_t { kRelease, kDeviceWait, kElided, kHostWait };
  // Records that op `to` depended on op `from`, kept as `kind`.
  void flow(std::uint64_t from, std::uint64_t to, Flow kind = Flow::kRelease);
  // A stream op as its successors' arrows need it: its id, and the wait frontier it was issued with (what it was
  // ordered after).
  struct Issued {
    std::uint64_t op = 0;
    WaitFrontier requirement;
  };
  // Records that the stream op `op`, ordered after `requirement`, was issued at (`axis`, `epoch`).
  void stream_epoch(Axis axis, std::uint64_t epoch, std::uint64_t op, const WaitFrontier& requirement);
  // The stream op recorded at (`axis`, `epoch`), or null. What it points to stays valid, unchanged, while the
  // recorder lives.
  [[nodiscard]] const Issued* issued_at(Axis axis, std::uint64_t epoch) const;
  // Samples the device-wait counters (cumulative over the engine's stream executors).
  void device_waits(std::uint64_t issued, std::uint64_t elided);

  // Why an op waited: what gave it its last grant. Every grant an op can be given last is recorded with its time (the
  // pusher's, a variable's release, a fence's, a parked op's device wait), and the latest one recorded is the last.
  enum class Wait : std::uint8_t {
    kOutside,   // no grant recorded: an op outside the trace released it (pushed before the trace, or the engine's)
    kNone,      // its push gave the last grant: it waited for nothing
    kBound,     // its push waited at EngineOptions::max_in_flight, then gave the last grant
    kVariable,  // a variable: `from` held it and released it (at its completion; a stream op at its issue)
    kFence,     // a wait fence was reached or promised: raised by `from` (0: from outside the engine)
    kDevice,    // parked until the device work it waited for completed: `from`'s, which released it before
  };
  struct Waited {
    Wait kind = Wait::kOutside;
    std::uint64_t from = 0;  // the op that held it, 0 if none or unknown
    std::string what;        // kVariable and kDevice: the variables ("v3 v4"); kFence: the fence ("fence value 3")
    std::string holder;      // the name of `from` when its slice may be missing (a skipped op); else empty
  };
  // Op `op` was pushed (or replayed) at `at`; `async`: it releases at its Completion.
  void pushed(std::uint64_t op, std::int64_t at, bool async);
  // `op` was given a grant at `at` because of `why`; with `arrow`, also an arrow ("release") from `why.from` to it.
  // The latest grant recorded for an op is its last; a push that waited at the bound keeps kBound.
  void ready(std::uint64_t op, std::int64_t at, Waited why, bool arrow = false);
  // A parked op was unparked at `at`: it waited for the device work of what released it, or else of `from` (a stream
  // op its wait frontier names; 0: none recorded).
  void unparked(std::uint64_t op, std::int64_t at, std::uint64_t from);

  // The critical path of what is recorded so far, in words: from the slice that ends last, back through what each op
  // waited for last, to a push that waited for nothing recorded (scripts/critical_path.py prints the same from a file).
  // Each line is a step with its start and length (ms on the trace's clock): an op's run, its queueing (from its last
  // grant to its start), and its wait (from its holder's release, or its push, to its last grant). Empty: no slice.
  [[nodiscard]] std::string critical_path() const;

  // An op in flight when a stall report writes the file: it has no slice yet, so it is marked instead.
  struct Mark {
    std::string_view name;   // "op #3 'forward'"
    std::string_view state;  // what it was doing: "holds v3 (write); waits for fence (...)"
  };
  // Writes the file with everything recorded so far (recording may go on: a later write rewrites it whole), and `marks`
  // as instant events of category "in flight", at the moment of writing, on a lane "in flight at stall" (this write
  // only). The file is replaced at once (written beside it, then renamed). Throws Error if it cannot be written.
  void write(std::span<const Mark> marks = {}) const;

 private:
  struct Lane {
    std::string name;
    std::int64_t last_end = 0;
    bool stream = false;
  };
  struct Counter {
    std::int64_t at;
    std::uint64_t a, b;
  };

  const std::string path_;
  const std::uint64_t generation_;  // distinguishes this recorder from earlier ones in threads' lane caches
  const std::chrono::steady_clock::time_point origin_ = std::chrono::steady_clock::now();
  mutable std::mutex mutex_;
  std::vector<Lane> lanes_;                // guarded by mutex_
  std::map<Axis, std::uint32_t> streams_;  // guarded by mutex_
  std::uint32_t unnamed_threads_ = 0;      // guarded by mutex_
  std::vector<Slice> slices_;              // guarded by mutex_
  struct Arrow {
    std::uint64_t from, to;
    Flow kind;
  };
  std::vector<Arrow> flows_;                                 // guarded by mutex_
  std::map<std::pair<Axis, std::uint64_t>, Issued> epochs_;  // guarded by mutex_; a node is never changed once made
  struct OpWait {
    std::int64_t pushed = -1, ready = -1;  // now() values; -1: not recorded
    bool async = false;                    // the op releases at its Completion
    Waited why;
    std::vector<std::uint64_t> after;  // the stream ops it was ordered after (its device, elided and host wait arrows)
  };
  std::unordered_map<std::uint64_t, OpWait> waits_;  // guarded by mutex_
  std::vector<Counter> in_flight_;                   // guarded by mutex_: (at, ops)
  std::vector<Counter> device_waits_;                // guarded by mutex_: (at, issued, elided)

  // Require mutex_; `by_op`: each slice by its op. effective_locked() is `op`'s wait as its slice tells it: if it was
  // ordered after a stream op whose work ended after its last grant (a stream op waits for it on the device; a CPU op
  // is parked until it completes), it waited for that work, until then.
  [[nodiscard]] OpWait effective_locked(std::uint64_t op,
                                        const std::unordered_map<std::uint64_t, const Slice*>& by_op) const;
  [[nodiscard]] std::vector<PathStep> path_locked(const std::unordered_map<std::uint64_t, const Slice*>& by_op) const;
  [[nodiscard]] std::string reason_locked(std::uint64_t waiter, const OpWait& wait,
                                          const std::unordered_map<std::uint64_t, const Slice*>& by_op) const;
};

}  // namespace depengine::detail
