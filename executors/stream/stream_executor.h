// StreamExecutor: the generic FIFO-stream executor, over any StreamBackend (host, CUDA, HIP).
//
// An op pushed with a context that names this executor is a *stream op*: its function runs on the host once the op
// is ready, enqueues device work on the stream it is given (RunContext::stream), and returns. The op is then *issued*:
// its variables are released at once with its signal (the stream's axis, the op's epoch on it), so successors are
// issued right behind it (submit-before-wait), and it *completes* when the device has run everything enqueued before
// its epoch's event. docs/architecture.md §3 and §5.
//
// Streams and contexts. The executor keeps, per device, `compute_streams` streams of kind compute and `copy_streams`
// of kind copy. Each stream is one axis of the engine's tracker, with one epoch per issued op. An op's Context names
// a device, a kind, and optionally a stream index; otherwise the executor chooses:
//   1. a stream whose issued epoch the op's wait frontier already covers (the op depends on everything on it so far,
//      so queueing behind it adds no false dependency; an unused stream qualifies), or whose work has all completed
//      (idle), else any stream of the kind;
//   2. among those, the one whose knowledge dominates most entries of the wait frontier (fewest device waits);
//   3. then the one with the fewest ops issued and not yet completed.
// So a chain stays on one stream, and independent ops (a fork) spread over the unused or idle streams.
//
// Collective channels (StreamKind::kCollective, StreamExecutorOptions::collective_channels). A channel is a stream
// of the executor, not of one device, for work that spans devices: an all-reduce that gathers every device's
// gradient and scatters the sum back. It is created on device 0 (its work is enqueued there and reaches the other
// devices' memory by peer access; on the host backend all memory is host memory), and its axis is in the collective
// domain. An op placed on a channel (context device 0, kind kCollective) waits on the device streams it depends on
// like any stream op, and its signal is the one entry (channel axis, epoch): what follows the collective on any device
// waits for one event, however many devices took part, and a frontier holds one entry for it, not one per device
// (docs/architecture.md §4, IREE's collective-channel axes).
//
// Waits. For the chosen stream S and each entry (axis, epoch) of the op's wait frontier:
//   - elided (dominated) if S's knowledge frontier already covers it: S waited for it, or for something that
//     implied it, earlier; same-stream entries are always covered (FIFO order holds them);
//   - elided (complete) if the tracker shows it complete;
//   - otherwise S waits on the device event recorded at exactly that (axis, epoch), and learns everything the
//     recording stream knew then (each event slot keeps that stream's knowledge frontier). Entries are visited in
//     decreasing order of what their event knows, so that a wait that implies another elides it (a transitive chain
//     A -> B -> C issues no wait of C on A).
// Then S's knowledge absorbs the whole wait frontier and its own new epoch. Events live in a ring of kEventRing per
// stream, addressed by (axis, epoch): a slot re-recorded for a later epoch is recognised, and a wait for the older
// epoch then waits on the newer record (later on the same stream, so it covers it), never on a recycled meaning.
//
// Completion reaches the tracker on the executor's Boost.Asio io_context thread, in one of two ways
// (StreamCompletion; by default notifications where the backend says they are cheap, the host backend, else polling):
//   - kNotify: after recording an op's event the executor asks the backend for a completion notification of that op,
//     enqueued right behind it. When it arrives (on a backend thread, which only posts it) the io thread advances the
//     tracker to the op's epoch and retires it (complete_issued). One per op, not one per batch: a notification
//     shared with ops issued later runs only once they have run too, so a fast op followed by a long one on the same
//     stream would reach its CPU successors only after the long one (5.8 ms late behind a 5 ms op, measured). So an
//     op's completion reaches the engine within one notification's turnaround of the device finishing it, whatever
//     is queued behind it.
//   - kPoll: the io thread queries (try_query, never blocking) the event of the newest issued op of each stream, and
//     if that is not complete the events of the oldest unretired ops, and retires ops in order while their events
//     are complete. While someone waits for a completion (a CPU successor or a WaitForVar parked on the tracker for
//     one of its axes) it polls back to back, and after kIdlePolls rounds without progress every kPollInterval; while
//     no one does, it polls every kPollInterval only, because each query takes the driver lock that the issuing
//     thread's launches need (bench_cuda_stream: polling back to back slowed the issue of a kernel chain by a
//     fifth or more). Until no op is in flight. GPU host callbacks stall their stream until they return
//     (bench_cuda_stream: 5 us per cross-stream kernel, 10.7 us with a callback each), so on CUDA and HIP polling
//     keeps the device busy; it costs the io thread's CPU while work is pending.
// No worker thread ever waits on a device: CPU successors are parked on the tracker by the engine.
//
// Errors. A backend failure reported by a notification fails the stream: the ops it covers complete with the
// backend's error (an op issued in the same notification window before the failing one is blamed too; CUDA's sticky
// errors cannot tell them apart either), the stream's axis fails on the tracker (so parked CPU successors, and waits
// on the variables, get the error), and later ops placed on that stream, or waiting on its failed epochs, are skipped
// with the error. An exception thrown by an op's function is that op's error, as for a CPU op.
//
// Issue order and threads. submit() may be called from any thread. One thread at a time issues (the first submitter
// drains the queue; others append and return), so the per-stream state needs no lock; the queue issues a higher
// priority first (PushOptions::priority), and in submission order among equal priorities. Ops made ready by an issue
// are queued behind it, after its event has been recorded. An op's function must not wait for other ops (WaitForVar
// throws inside an op, as for CPU ops).
//
// Thread safety: as Executor. Ownership: owns the backend, its streams and events, and the io_context thread (started
// in start(), joined in stop()). Failure: the constructor throws StreamError when the backend has no device or a
// device index is out of range, and std::invalid_argument for a stream count of 0 of both kinds.
// Cost per issued op: the waits it needs, one event record and (kNotify) one notification; no allocation except
// Boost.Asio's post of a notification (recycled by its handler allocator).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <depengine/executors/executor.h>
#include <depengine/executors/ready_queue.h>
#include <depengine/executors/stream/stream_backend.h>
#include <depengine/frontier/axis.h>
#include <depengine/frontier/frontier.h>

namespace depengine {

enum class StreamCompletion : std::uint8_t {
  kAuto,    // kNotify if the backend's notifications are cheap (StreamBackend::cheap_notifications), else kPoll
  kNotify,  // one backend notification per op
  kPoll,    // the io thread polls events
};

struct StreamExecutorOptions {
  // Devices to use: the first `devices` of the backend, or all of them (-1).
  int devices = -1;
  std::uint32_t compute_streams = 2;  // per device
  std::uint32_t copy_streams = 1;     // per device
  // Collective channels, per executor (see Collective channels above).
  std::uint32_t collective_channels = 0;
  std::string name = "stream";  // Executor::name(), e.g. "cuda"
  // How the executor learns that an op's device work has completed.
  StreamCompletion completion = StreamCompletion::kAuto;
  // The machine index its streams' axes carry (Axis::machine): the process's rank in a job of several processes (its
  // MPI rank, below 256), so that frontiers that travel between processes never alias (distributed/communicator.h).
  std::uint8_t machine = 0;
};

// Where a stream op is being issued: what its function receives as RunContext::stream.
struct StreamPlacement {
  StreamBackend* backend = nullptr;  // the executor's backend (host streams: launch_host(where, task), no cast)
  StreamHandle stream;               // for backend calls (copy; HostStreamBackend::of(where) for the host backend's)
  void* native = nullptr;            // backend->native_handle(stream): cudaStream_t, hipStream_t
  // The device, the kind of stream, and (below) the stream's index among those of its kind.
  std::uint32_t device = 0;
  StreamKind kind = StreamKind::kCompute;
  std::uint32_t index = 0;  // among the device's streams of this kind
  Axis axis{};              // the stream's axis
  std::uint64_t epoch = 0;  // this op's epoch on it

  // For the op's function, during its issue and on that thread only (memory pools use them to reuse blocks without a
  // fence, memory/memory_pool.h AcquireView):
  //   - knowledge: what the stream knows has happened before the work enqueued now (its own earlier epochs included);
  //   - wait_for(entries): makes the stream wait for more, exactly as for an op's wait frontier (entries it already
  //     knows, or that have completed, are elided and counted so). Throws what the backend's wait throws.
  const KnowledgeFrontier<kMaxEngineAxes>* knowledge = nullptr;
  void wait_for(const WaitFrontier& entries) const { wait(wait_context, entries); }
  // The executor's side of wait_for, in the shape of AcquireView::wait: set by the executor with its stream.
  void (*wait)(void* context, const WaitFrontier& entries) = nullptr;
  void* wait_context = nullptr;
};

// Counters of one stream, or of the whole executor (sums). Statistics: read while ops run, they may lag.
struct StreamStats {
  // Ops issued on the stream.
  std::uint64_t ops_issued = 0;
  std::uint64_t waits_issued = 0;           // device-side waits enqueued
  std::uint64_t waits_elided = 0;           // entries the stream's knowledge already covered
  std::uint64_t waits_complete = 0;         // entries found complete on the tracker (no wait needed)
  std::uint64_t notifications = 0;          // kNotify: notifications requested (one per op issued)
  std::uint64_t event_queries = 0;          // kPoll: try_query calls
  std::uint64_t host_synchronizations = 0;  // executor-wide only: the backend's blocking synchronisations
};

class StreamExecutor final : public Executor, public StreamFacet {
 public:
  static constexpr std::size_t kEventRing = 64;  // events per stream, addressed by epoch % kEventRing
  static constexpr int kIdlePolls = 32;          // kPoll: rounds without progress before polling slows down
  // kPoll: how long the poller sleeps between rounds once polling has slowed down.
  static constexpr std::chrono::microseconds kPollInterval{20};

  // Creates the streams and their events. Throws StreamError (no device, bad device count), std::invalid_argument.
  StreamExecutor(std::unique_ptr<StreamBackend> backend, StreamExecutorOptions options = {});
  ~StreamExecutor() override;

  [[nodiscard]] std::string_view name() const noexcept override { return name_; }
  void start(ExecutorHost& host) override;
  void submit(Task& task) noexcept override;
  [[nodiscard]] bool try_help() noexcept override { return false; }  // issuing happens in submit()
  void stop() noexcept override;
  // The StreamFacet (Executor::stream_facet() is this executor).
  [[nodiscard]] bool owns_axis(Axis axis) const noexcept override { return find(axis) != nullptr; }
  [[nodiscard]] std::string placement_error(std::uint32_t device, StreamKind kind, std::int32_t stream) const override;
  [[nodiscard]] std::size_t axis_count() const noexcept override { return streams_.size(); }
  [[nodiscard]] std::string axis_name(Axis axis) const override;     // "d0 compute 1", "collective 0"
  [[nodiscard]] DeviceWaits device_waits() const noexcept override;  // from stats(): elided includes complete
  // Recorded work (StreamFacet::replay_recorded) through the backend's recording (StreamBackend::begin_recording): a
  // graph instantiated once per RecordedOps, launched with one backend call per replay.
  [[nodiscard]] bool records_work() const noexcept override { return backend_->records_work(); }
  void replay_recorded(const StreamPlacement& where, std::unique_ptr<RecordedOps>& recorded,
                       void (*enqueue)(void* context), void* context) override;

  // The backend, how completions are seen, and the number of devices used.
  [[nodiscard]] StreamBackend& backend() const noexcept { return *backend_; }
  [[nodiscard]] StreamCompletion completion() const noexcept { return completion_; }
  [[nodiscard]] std::uint32_t devices() const noexcept { return devices_; }
  // Streams of `kind` per device (collective channels: of the executor).
  [[nodiscard]] std::uint32_t streams(StreamKind kind) const noexcept {
    return kind == StreamKind::kCompute ? compute_streams_ : kind == StreamKind::kCopy ? copy_streams_ : channels_;
  }
  // The axis of stream `index` of `kind` on `device` (a collective channel: device 0). Throws std::out_of_range.
  [[nodiscard]] Axis axis(std::uint32_t device, StreamKind kind, std::uint32_t index) const;

  // The engine's tracker, on which this executor's axes complete. Valid once the engine has started the executor.
  [[nodiscard]] Tracker& tracker() const noexcept { return host_->tracker(); }

  // The counters of every stream, summed.
  [[nodiscard]] StreamStats stats() const noexcept;
  // Throws std::out_of_range.
  [[nodiscard]] StreamStats stats(std::uint32_t device, StreamKind kind, std::uint32_t index) const;

 private:
  struct Stream;
  struct EventSlot;
  struct Io;  // the Boost.Asio io_context, its work guard and thread

  [[nodiscard]] Stream* find(Axis axis) const noexcept;
  [[nodiscard]] Stream* stream_at(std::uint32_t device, StreamKind kind, std::uint32_t index) const noexcept;
  [[nodiscard]] Stream* choose(const Task& task, const WaitFrontier& need) const;
  void issue_one(Task& task) noexcept;
  // Makes `stream` wait on the device for the entries of `need` it does not know; returns which it waited for (bit i:
  // the entry at position i of `need`), the others elided.
  std::uint32_t issue_waits(Stream& stream, const WaitFrontier& need);
  void enqueue_completion(Stream& stream, Task& task);
  [[nodiscard]] TimeStamp stamp(Stream& stream) noexcept;
  void keep_stamps(Stream& stream, std::uint64_t epoch, TimeStamp start, TimeStamp end) noexcept;
  void report_stamps(Stream& stream, Task& task) noexcept;
  void fail_stream(Stream& stream, const std::exception_ptr& error) noexcept;
  static void notified(void* context, std::exception_ptr error) noexcept;
  static void wait_on(void* context, const WaitFrontier& entries);  // StreamPlacement::wait
  void handle_notifications() noexcept;
  void on_notified(Stream& stream, std::uint64_t count) noexcept;
  void retire(Stream& stream, TaskList& done, std::uint64_t covered, bool stamped) noexcept;
  void start_polling() noexcept;
  [[nodiscard]] bool awaited() const noexcept;
  void poll(int idle_rounds) noexcept;
  [[nodiscard]] bool poll_stream(Stream& stream) noexcept;

  std::unique_ptr<StreamBackend> backend_;
  const std::string name_;
  StreamCompletion completion_ = StreamCompletion::kNotify;  // kNotify or kPoll once constructed
  std::uint32_t devices_ = 0;
  std::uint32_t compute_streams_ = 0;
  std::uint32_t copy_streams_ = 0;
  std::uint32_t channels_ = 0;
  // Device-major, compute then copy, then the collective channels; immutable after construction.
  std::vector<std::unique_ptr<Stream>> streams_;
  ExecutorHost* host_ = nullptr;  // set by start()

  // Submission queue and the draining flag (see "Issue order" above).
  std::mutex queue_mutex_;
  ReadyQueue queue_;       // guarded by queue_mutex_
  bool draining_ = false;  // guarded by queue_mutex_

  std::unique_ptr<Io> io_;  // created by start(); its thread joined by stop(), itself freed by the destructor

  // kPoll: ops issued and not retired (issuing thread increments, io thread decrements), and whether the io thread is
  // polling. A Dekker pair (seq_cst): the issuer raises outstanding_ then claims polling_; the poller drops polling_
  // then re-reads outstanding_; one of the two sees the other, so no issued op is left unpolled.
  std::atomic<std::uint64_t> outstanding_{0};
  std::atomic<bool> polling_{false};
  // kNotify: whether a handle_notifications() is posted and not yet started. A notification adds to its stream's count
  // of arrivals and posts a handler only if none is pending, so a burst of notifications, from any streams, wakes the
  // io thread once. A Dekker pair (seq_cst): an arrival raises its count then claims the flag; the handler drops the
  // flag then takes the counts; one of the two sees the other, so no arrival is left unhandled.
  std::atomic<bool> notified_posted_{false};
};

}  // namespace depengine
