// The running policy: what an Engine hands ready ops to.
//
// The engine tracks dependencies; an Executor decides where and when a ready op runs. The engine calls submit() with
// an op whose every dependency is satisfied; the executor eventually calls ExecutorHost::execute() for it on a thread
// of its choosing. execute() runs the op's function, completes it, and returns the ops that its completion made
// ready; the executor routes them with take_ready() (ready_queue.h), keeping one of its own to run next on the same
// thread (so a chain never crosses threads) and submitting the rest.
//
// An executor owns its threads and queues. It never learns what an op does, only its priority, its placement (device,
// stream kind, stream) and which executor it belongs to.
//
// Two kinds of executor (docs/architecture.md §3):
//   - CPU executors (inline, threadpool) complete an op when execute() returns (or its Completion is called). They
//     own no axis: the engine hands them an op only once every entry of its wait frontier has completed (it parks the
//     op on the tracker until then), so they never wait for a device.
//   - Stream executors (stream_facet() is not null: the StreamFacet below) ISSUE an op: they pick a FIFO stream, make
//     it wait on device events for the entries of the op's wait frontier (requirement()) that the stream does not
//     already know, and call issue(), which runs the op's function (it enqueues device work) and releases the op's
//     variables at once with the signal (stream axis, epoch). When the device has finished, they advance the tracker
//     and report complete_issued(). Each stream is one axis of the engine's tracker, registered in start().
//
// Lifetime: the Engine owns its executors. It calls start() once before the first submit(), and stop() once after
// the last op has completed; the executor must not call into the host after stop() returns.
// Thread safety: submit() and try_help() are called from any thread, concurrently; start()/stop() from the thread
// that builds or destroys the engine.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include <depengine/frontier/frontier.h>
#include <depengine/frontier/tracker.h>
#include <depengine/frontier/vocabulary.h>
#include <depengine/support/intrusive_list.h>

namespace depengine {

class Executor;
struct StreamPlacement;  // executors/stream/stream_executor.h: where a stream op was issued

// Device waits a stream executor has made so far: enqueued, and elided (implied by what the stream knew, or found
// complete). Statistics: read while ops run, they may lag.
struct DeviceWaits {
  // Device waits enqueued on a stream.
  std::uint64_t issued = 0;
  // Entries that needed no wait.
  std::uint64_t elided = 0;
};

// The part of an op that executors see: where it runs, how urgent it is, and a link for the executor's queues.
class Task {
 public:
  // The executor the op runs on.
  [[nodiscard]] Executor* executor() const noexcept { return executor_; }
  // A hint: higher runs earlier among ops that are ready at the same time. 0 is normal.
  [[nodiscard]] std::int32_t priority() const noexcept { return priority_; }
  // Placement, for stream executors (CPU executors ignore it): the device, the stream kind, and a stream index among
  // that device's streams of that kind (-1: the executor chooses).
  [[nodiscard]] std::uint32_t device() const noexcept { return device_; }
  [[nodiscard]] StreamKind stream_kind() const noexcept { return stream_kind_; }
  [[nodiscard]] std::int32_t stream() const noexcept { return stream_; }

  // Intrusive link, owned by whichever queue or TaskList holds the task (a task is in at most one).
  Task* next_ = nullptr;
  // Owned by the executor holding the task (a stream executor keeps the epoch it issued the task at).
  std::uint64_t executor_word_ = 0;

 protected:
  Executor* executor_ = nullptr;  // not owned: the engine owns executors and outlives its ops
  // What priority(), device(), stream() and stream_kind() return, set by the engine.
  std::int32_t priority_ = 0;
  std::uint32_t device_ = 0;
  std::int32_t stream_ = -1;
  StreamKind stream_kind_ = StreamKind::kCompute;

 public:
  // The host's: what kind of op the task is (the engine runs pushed and replayed ops differently). Executors ignore it.
  std::uint8_t host_kind_ = 0;
};

// An intrusive FIFO of tasks. Owned by one thread at a time; never allocates.
using TaskList = support::IntrusiveList<Task, &Task::next_>;

// What an executor may ask of the engine. Implemented by the engine.
class ExecutorHost {
 public:
  // Runs `task`'s function on the calling thread, with `worker` as the run context's worker index (-1 for a thread
  // that is not one of the executor's workers), then completes it (unless it is asynchronous and completes later).
  // Tasks made ready are appended to `ready`, for the caller to route with take_ready(). Never throws: the op's
  // errors go to its variables.
  virtual void execute(Task& task, int worker, TaskList& ready) noexcept = 0;

  // --- For stream executors ---------------------------------------------------------------------------------------

  // The tracker of completed epochs, where a stream executor registers its axes (start()) and reports completion
  // (advance, fail). Lives until the executor's stop() has returned.
  [[nodiscard]] virtual Tracker& tracker() noexcept = 0;

  // The wait frontier of a task handed to submit(): the signals of its predecessors. Every entry on an axis that the
  // task's executor does not own has completed. Valid until the task is issued or skipped.
  [[nodiscard]] virtual const WaitFrontier& requirement(const Task& task) const noexcept = 0;

  // Issues `task` on the stream `where` (which must stay valid during the call): runs its function with
  // RunContext::stream = &where (it enqueues the device work), then releases its variables with `signal` (the stream's
  // axis and the epoch of this op on it), appending the tasks that made ready to `ready`. `waited`: bit i is set when
  // the stream waited on the device for entry i of requirement(task), clear when that wait was elided (for traces).
  // Returns true when it did; the
  // caller must then record the epoch's event and report complete_issued() once the device has run it. Returns false
  // when the op was skipped instead (an input carries an error): it is then finished, and the epoch is not used. An
  // exception from the function becomes the op's error (attached to what it mutates); the op still counts as issued.
  [[nodiscard]] virtual bool issue(Task& task, const StreamPlacement& where, FrontierEntry signal, std::uint32_t waited,
                                   TaskList& ready) noexcept = 0;

  // Finishes `task` without running it, with `error` as its input error (its stream or a stream it depends on failed,
  // or it names no stream of the executor). Appends the tasks made ready to `ready`.
  virtual void skip(Task& task, std::exception_ptr error, TaskList& ready) noexcept = 0;

  // Reports that the device has finished `task`, issued earlier: `error` is null or the backend's error for it, which
  // becomes an error of the op (reported by WaitForAll, and by waits on the variables it mutates). Retires the op.
  virtual void complete_issued(Task& task, std::exception_ptr error) noexcept = 0;

  // Traces. Whether `task` is recorded in a trace now: a stream executor then stamps its device work
  // (StreamBackend::stamp) and, before complete_issued(), reports when it ran with ran_on_device(): `start` and `end`
  // in nanoseconds of std::chrono::steady_clock since its epoch, when the stream reached the op's work and finished it.
  [[nodiscard]] virtual bool traced(const Task& /*task*/) const noexcept { return false; }
  virtual void ran_on_device(Task& /*task*/, std::int64_t /*start*/, std::int64_t /*end*/) noexcept {}

  // --- Helping threads (Executor::help_spin) -----------------------------------------------------------------------

  // Whether a thread waiting on the engine (WaitForAll, WaitForVar, a push held back by the in-flight bound) sleeps
  // because it found no queued work to help with. An executor that made work visible that its own threads will not
  // take soon, and finds a helper asleep, wakes the helpers with wake_helpers(). The work's publication (a seq_cst
  // store or read-modify-write) and this seq_cst load are the executor's half of a Dekker pair; the helper counts
  // itself asleep and then looks for work once more, so it either sees the work or is woken for it.
  [[nodiscard]] virtual bool helpers_asleep() const noexcept { return false; }
  virtual void wake_helpers() noexcept {}

  // --- Executor threads (engine/observer.h) ------------------------------------------------------------------------

  // Whether the host wants to hear of the executor's threads (asked once, in start()). If so, an executor that owns
  // threads calls thread_started() on each thread as it begins working for the executor and thread_stopped() as it
  // stops (oneTBB's pool: as the thread enters and leaves its arena; a stream or MPI executor: its completion thread,
  // as worker -1, as it starts and before it ends), until its stop() returns.
  [[nodiscard]] virtual bool observes_threads() const noexcept { return false; }
  virtual void thread_started(const Executor& /*executor*/, int /*worker*/) noexcept {}
  virtual void thread_stopped(const Executor& /*executor*/, int /*worker*/) noexcept {}

 protected:
  ~ExecutorHost() = default;
};

// Work an executor recorded once, to launch again (StreamFacet::replay_recorded): a CUDA or HIP graph. Opaque to the
// engine, which keeps it for the graph of stream ops that it was recorded for (engine/graph.h).
class RecordedOps {
 public:
  RecordedOps() = default;
  RecordedOps(const RecordedOps&) = delete;
  RecordedOps& operator=(const RecordedOps&) = delete;
  virtual ~RecordedOps() = default;
};

// The stream facet: what only a stream executor has (Executor::stream_facet()). An executor that issues ops ahead of
// their completion on FIFO streams implements it besides Executor (StreamExecutor does); a CPU executor has none, and
// pays nothing for it. The engine reads the facet pointer once per executor at construction where it matters on a hot
// path (as it does has_streams_), so a CPU push never calls into it.
//
// Thread safety: as Executor: every function may be called from any thread, concurrently, after construction (the
// facet's answers about axes and placements are fixed once the executor is built; device_waits() is a statistic).
// Lifetime: the facet is part of its executor and lives as long as it.
class StreamFacet {
 public:
  StreamFacet(const StreamFacet&) = delete;
  StreamFacet& operator=(const StreamFacet&) = delete;

  // Whether `axis` is one of this executor's streams, which it can make another of its streams wait for without the
  // host. Entries of a wait frontier on other axes must complete before the op is handed over.
  [[nodiscard]] virtual bool owns_axis(Axis axis) const noexcept = 0;
  // Why an op placed on `device`, a stream of `kind` and `stream` (an index, or -1 for the executor's choice) cannot
  // be issued here, a device or stream it does not have; empty when it can. The engine asks at each push to such an
  // executor, so that a bad placement is an Error at the push.
  [[nodiscard]] virtual std::string placement_error(std::uint32_t device, StreamKind kind,
                                                    std::int32_t stream) const = 0;
  // How many axes the executor registers in start() (fixed at construction: the engine counts them before starting).
  [[nodiscard]] virtual std::size_t axis_count() const noexcept = 0;
  // A name for one of its axes, for traces: "d0 compute 1". By default the axis's own (to_string).
  [[nodiscard]] virtual std::string axis_name(Axis axis) const { return to_string(axis); }
  // Its device waits so far (traces sample them).
  [[nodiscard]] virtual DeviceWaits device_waits() const noexcept = 0;

  // Whether replay_recorded() works: a stream executor whose device runtime records work (CUDA, HIP graphs).
  [[nodiscard]] virtual bool records_work() const noexcept { return false; }
  // During an issue (ExecutorHost::issue, on the issuing thread, with the `where` it was given): enqueues on that
  // stream the work `recorded` holds. If it holds none yet, first records what enqueue(context) enqueues there, called
  // once and recorded instead of run; a throw of enqueue discards the recording and propagates. Throws what the
  // backend throws (StreamError); std::logic_error where records_work() is false.
  virtual void replay_recorded(const StreamPlacement& where, std::unique_ptr<RecordedOps>& recorded,
                               void (*enqueue)(void* context), void* context);

 protected:
  StreamFacet() = default;
  ~StreamFacet() = default;  // not owned through the facet: the engine owns the Executor
};

// What every executor implements. Capabilities of some executors only are facets (StreamFacet), reached through a
// pointer set at construction, not virtual functions with do-nothing defaults on every executor.
class Executor {
 public:
  Executor() = default;
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;
  virtual ~Executor() = default;

  // A short name for traces and error messages, e.g. "threadpool".
  [[nodiscard]] virtual std::string_view name() const noexcept = 0;

  // Called once by the engine before any submit(). `host` outlives the executor's use of it (until stop()).
  virtual void start(ExecutorHost& host) = 0;

  // Takes a ready task and runs it eventually. May run it before returning (the inline executor does). Any thread.
  virtual void submit(Task& task) noexcept = 0;

  // Runs a queued task on the calling thread, if there is one (and, at the executor's choice, a bounded part of the
  // chain it starts), and returns whether it did. Called by threads that wait (WaitForAll, a push held back by the
  // in-flight bound) so that they help rather than idle. Any thread.
  [[nodiscard]] virtual bool try_help() noexcept = 0;

  // How long a thread that waits on the engine, and finds no task of this executor to help with, keeps looking before
  // it sleeps. Zero by default: it sleeps at once, and is woken only by what it waits for. An executor that returns
  // more treats such threads as workers of its own: it wakes them when it has work its threads cannot take
  // (ExecutorHost::wake_helpers).
  [[nodiscard]] virtual std::chrono::nanoseconds help_spin() const noexcept { return {}; }

  // Called once by the engine when no op is in flight and none will be pushed again: release threads.
  virtual void stop() noexcept = 0;

  // Whether a thread that has just pushed `task`, ready at its push, from outside any op, should run it itself now
  // instead of submitting it, because the executor's threads are behind (work-first: ThreadPoolOptions::work_first).
  // Asked only of an executor that offers_work_first(); by default never.
  [[nodiscard]] virtual bool run_here(const Task& /*task*/) const noexcept { return false; }
  // Whether run_here() can ever say yes: a plain load, so that a push to any other executor pays no call.
  [[nodiscard]] bool offers_work_first() const noexcept { return offers_work_first_; }

  // Whether DEPENGINE_ENGINE_TYPE=NaiveEngine may replace the executor with an inline one (engine.h): CPU executors
  // whose ops may run on any thread. Not stream executors, nor an executor whose ops need a thread of its own (the MPI
  // executor's progress thread).
  [[nodiscard]] virtual bool inline_replaceable() const noexcept { return !issues_ahead(); }

  // The executor's stream facet, or null for a CPU executor: a plain load of a pointer its constructor set, so asking
  // costs no call. Lives as long as the executor.
  [[nodiscard]] StreamFacet* stream_facet() const noexcept { return stream_facet_; }
  // True for stream executors (stream_facet() is not null): ops are issued (released at issue with a signal) and
  // complete later, on the device. Such an executor takes only synchronous pushes (an asynchronous op completes on its
  // own terms, not the stream's).
  [[nodiscard]] bool issues_ahead() const noexcept { return stream_facet_ != nullptr; }

 protected:
  bool offers_work_first_ = false;  // set by an executor's constructor, immutable after
  // Set by a stream executor's constructor (to itself, as a StreamFacet), immutable after. Not owned.
  StreamFacet* stream_facet_ = nullptr;
};

}  // namespace depengine
