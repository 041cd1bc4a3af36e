// HostStreamBackend: CPU threads that behave like device streams, so that every stream path of the engine runs in CI
// without a GPU. It is the reference implementation of StreamBackend (executors/stream/stream_backend.h): a bug in
// the generic stream executor must show up here, so it is strict where CUDA is lenient (see "Misuse").
//
// Model: each stream is one thread with an in-order queue of entries — launches (host functions standing for
// kernels), event records, event waits, notifications, copies. The thread runs entries one at a time in FIFO order.
// An event is an object holding the generation of its latest record and the generation its recording stream has
// completed; a wait entry blocks *the waiting stream's thread* (never the caller's) until the awaited generation is
// complete. Notifications run on the stream's thread, so they follow the work before them and precede the work after
// them, in order per stream. "Device memory" is host memory aligned like cudaMalloc's.
//
// Simulated device time: a stream sleeps for its launch delay (HostStreamOptions::launch_delay, or
// set_launch_delay()) before each launch and each copy (its device work). Tests use it to make races real — a fast
// stream that waits on a slow stream's event must still observe the slow stream's work — never to wait for another
// thread.
//
// Failure injection: a launched host function that throws fails its stream, like a faulting kernel fails a CUDA
// context. The stream records a StreamError (code kHostFunctionThrew, cause() = the function's exception) and from
// then on skips launches and copies (a dead context runs nothing), completes event records *with the error*, and
// delivers every notification with it. try_query/synchronize of such an event, and synchronize of the stream, throw
// it. A stream that waits on a failed event adopts the error too (its later work would read garbage). The error is
// sticky: the stream stays failed until destroyed.
//
// Misuse (std::logic_error, where CUDA would carry on or misbehave silently):
//   - calling any HostStreamBackend function from a stream thread, i.e. from a notification or a launched function
//     (the cudaLaunchHostFunc rule). In a launched function the logic_error becomes the stream's error; in a
//     notification, which must not throw, it terminates the process (loudly, where CUDA might deadlock); functions
//     that cannot throw (destroy_*, deallocate) abort with a message.
//   - re-recording an event on a different stream while its previous record has not completed (the rule that keeps
//     an event's completions in order; CUDA allows it, the executor must not need it).
// Recording an event on a stream of another device throws StreamError (kBadDevice), as CUDA does.
//
// Thread safety: as StreamBackend; all functions from any thread except stream threads. Ownership: the backend owns
// its streams (their threads) and events; its destructor drains and joins any stream left undestroyed.
// Cost: an enqueue takes the stream's mutex once and wakes its thread only if it sleeps (a futex wake, ~10 us across
// cores); a running stream picks up new entries without a wake. Per entry the thread does one atomic store (plus a
// futex wake only when some thread waits in synchronize). Allocation: create_stream (a thread and its queue),
// create_event (one object), a launch whose callable does not fit HostTask::kInlineBytes (one heap block), and
// queue growth until a stream's queue has reached its high-water mark; nothing else in steady state.
#pragma once

#include <chrono>
#include <cstddef>
#include <mutex>
#include <string>
#include <vector>

#include <depengine/executors/host_stream/host_task.h>
#include <depengine/executors/stream/stream_backend.h>

namespace depengine {

struct StreamPlacement;  // executors/stream/stream_executor.h: where a stream op is issued (RunContext::stream)

namespace detail {
class HostStream;
}  // namespace detail

struct HostStreamOptions {
  // Simulated devices: device_count(). Streams and events carry their device; an event is recorded only on a stream
  // of its own device, as on a GPU. 0 is allowed (a backend with no device, for tests of that path).
  int devices = 1;
  // Simulated device time: how long each launch and copy sleeps on its stream's thread before running. Per stream
  // afterwards with set_launch_delay().
  std::chrono::nanoseconds launch_delay{0};
  // Whether the backend records work (StreamBackend::records_work), as the CUDA and HIP runtimes do, so that CI runs
  // the engine's replay of recorded graphs without a GPU. Off by default: the host backend then behaves as a backend
  // that cannot record (graphs of stream ops call their functions at every replay).
  bool records_work = false;
};

class HostStreamBackend final : public StreamBackend {
 public:
  // Throws std::invalid_argument if options.devices or options.launch_delay is negative.
  explicit HostStreamBackend(HostStreamOptions options = {});
  // Destroys any stream not yet destroyed (draining its queue). Events must have been destroyed already.
  ~HostStreamBackend() override;

  [[nodiscard]] const char* name() const noexcept override { return "host"; }
  [[nodiscard]] int device_count() const noexcept override { return devices_; }
  [[nodiscard]] std::string_view status() const noexcept override { return status_; }

  [[nodiscard]] StreamHandle create_stream(int device, StreamKind kind) override;
  void destroy_stream(StreamHandle stream) noexcept override;
  // The stream's detail::HostStream object: opaque; use launch().
  [[nodiscard]] void* native_handle(StreamHandle stream) const noexcept override { return stream.impl; }

  [[nodiscard]] EventHandle create_event(int device) override;
  void destroy_event(EventHandle event) noexcept override;
  void record(StreamHandle stream, EventHandle event) override;
  void wait(StreamHandle stream, EventHandle event) override;
  void notify(StreamHandle stream, NotifyFn fn, void* context) override;
  [[nodiscard]] bool try_query(EventHandle event) override;
  [[nodiscard]] bool cheap_notifications() const noexcept override { return true; }
  // A notification entry that reads the clock when the stream reaches it (the launch delay of the work before it
  // included: simulated device time). Allocates one small object per stamp.
  [[nodiscard]] TimeStamp stamp(StreamHandle stream) override;
  [[nodiscard]] std::int64_t read_stamp(TimeStamp stamp) noexcept override;

  [[nodiscard]] void* allocate(int device, std::size_t bytes) override;
  void deallocate(int device, void* pointer) noexcept override;
  void copy(StreamHandle stream, void* destination, const void* source, std::size_t bytes,
            CopyDirection direction) override;

  // Enqueues `task` — the host backend's kernel — on `stream`: it runs on the stream's thread once everything
  // enqueued before it has completed, after sleeping the stream's launch delay, and everything enqueued after it
  // waits for it to return. What it throws fails the stream (see the top). What it captures must stay valid until it
  // has run; it is destroyed on the stream's thread right after running (or unrun, if the stream had failed).
  // Allocates only if the callable does not fit inline (HostTask::stored_inline<F>()).
  void launch(StreamHandle stream, HostTask task);

  // Recording (HostStreamOptions::records_work): launches and copies enqueued on a recording stream, from any thread,
  // are kept instead of queued; an event record, wait (even on a completed event) or notification there throws
  // std::logic_error (a recording holds work, not synchronisation, in this model). Launching the recorded work
  // enqueues one launch (one launch delay) that calls the recorded host functions again, in order, and makes the
  // recorded copies again; launches of one recording on several streams run one at a time, as a CUDA graph's do. The
  // launches hold the recording, so it may be released while they are queued. Without records_work,
  // begin_recording throws std::logic_error as the base class does.
  [[nodiscard]] bool records_work() const noexcept override { return records_work_; }
  void begin_recording(StreamHandle stream) override;
  [[nodiscard]] RecordedWork end_recording(StreamHandle stream) override;
  void abandon_recording(StreamHandle stream) noexcept override;
  void launch(const RecordedWork& work, StreamHandle stream) override;

  // Changes the delay of launches and copies that `stream` starts from now on (entries already running keep theirs).
  void set_launch_delay(StreamHandle stream, std::chrono::nanoseconds delay);

  // The host backend of the stream a stream op was placed on (its RunContext::stream), or null where that stream is
  // another backend's (CUDA, HIP: enqueue there through StreamPlacement::native). No cast in user code: an op reaches
  // its backend through the placement it receives. Any thread; a type check, no allocation.
  [[nodiscard]] static HostStreamBackend* of(const StreamPlacement& where) noexcept;

 protected:
  void synchronize_event(EventHandle event) override;
  void synchronize_stream(StreamHandle stream) override;

 private:
  [[nodiscard]] detail::HostStream& stream_of(StreamHandle stream, const char* call) const;
  void check_device(int device, const char* call) const;

  const int devices_;
  const std::chrono::nanoseconds launch_delay_;
  const bool records_work_;
  const std::string status_;

  // Streams not yet destroyed, so that the destructor can join them. Slow path: create and destroy only.
  std::mutex streams_mutex_;
  std::vector<detail::HostStream*> streams_;  // owned; guarded by streams_mutex_
};

// Inside a stream op's function, during its issue: enqueues `task` on the stream the op was placed on (`where`, its
// RunContext::stream), as HostStreamBackend::launch does: host work standing for a kernel, run in FIFO order with the
// stream's other work, so the op completes when the task has returned. Throws std::logic_error where the placement is
// not on a host backend's stream (a CUDA or HIP op enqueues its kernels through StreamPlacement::native instead), and
// what launch() throws. Allocates only if the callable does not fit HostTask::kInlineBytes.
void launch_host(const StreamPlacement& where, HostTask task);

}  // namespace depengine
