// StreamBackend: the small device interface that the generic FIFO-stream executor drives.
//
// A backend exposes devices, each with in-order *streams* (compute or copy kind), *events* that mark a point in a
// stream, device-side waits of one stream on another's event, host-side completion *notifications*, and device
// memory. It is the CUDA runtime's stream model reduced to what the executor needs, so that one executor runs on
// three backends: host (CPU threads that behave like streams; what CI exercises), CUDA and HIP. The executor, not the
// backend, decides which events to record and which waits to issue (docs/architecture.md §3, §5); a backend only does
// what it is told, in stream order, and reports failures.
//
// Semantics every backend provides (the host backend is the reference that CI tests; CUDA and HIP map 1:1):
//   - FIFO: the operations enqueued on one stream (record, wait, notify, copy, and the user's device work) start in
//     the order their enqueueing calls returned, each after the previous one has completed. Two streams are ordered
//     only by events.
//   - record(s, e) captures in `e` everything enqueued on `s` before the call. `e` completes when that work has. An
//     event that was never recorded is complete (it captures no work). Re-recording overwrites: try_query(),
//     synchronize(e) and later wait()s refer to the most recent record call; a wait() already enqueued keeps the
//     record it saw.
//   - wait(s, e) makes work enqueued on `s` after the call start only once `e`'s record (as of the call) has
//     completed. A device-side wait: the caller never blocks.
//   - Happens-before, in the user's words: the effects of work enqueued on stream A before record(A, e) — device
//     writes, and host writes made by host functions running on A — are visible to work enqueued on stream B after
//     wait(B, e), to a notification enqueued on A after the record, and to host code after try_query(e) returned
//     true or synchronize(e) returned. Host writes made before an enqueueing call are visible to the work it
//     enqueues when that work runs.
//   - notify(s, fn, ctx) runs fn(ctx, error) on a backend thread once everything enqueued on `s` before it has
//     completed; later work on `s` waits for fn to return. Per stream, notifications run in enqueue order. `error`
//     is null, or a StreamError for a failure on the stream (see Failure). fn must be short and MUST NOT call into
//     any StreamBackend (nor, on CUDA/HIP, any runtime API): the rule of cudaLaunchHostFunc/cudaStreamAddCallback,
//     whose callback thread may be the very thread such a call would wait for. Hand the event to another thread
//     (the executor's Boost.Asio io_context) instead. The host backend enforces the rule: a stream-API call from a
//     backend thread throws std::logic_error. notify() may return before or after fn has run.
//
// Thread safety: every function may be called from any thread, concurrently (CUDA streams may be used from any
// thread; the host backend matches), except that (a) destroy_stream/destroy_event must not race with any other use
// of that handle, (b) record() calls on one event must be ordered by the caller (one recorder at a time; query,
// synchronize and wait may run concurrently with a record), and (c) nothing may be called from a notification or
// from work running on a stream. Concurrent enqueues on one stream are ordered by whichever call returns first.
//
// Ownership and lifetime: a backend owns nothing of its caller's. Handles are small trivially-copyable values naming
// backend-owned objects; a stream lives from create_stream to destroy_stream and an event from create_event to
// destroy_event, and every handle must be destroyed before its backend is (the host backend tolerates leftover
// streams: its destructor drains and joins them). destroy_event may be called while records or waits of the event
// are still pending: the object lives until they complete (as with cudaEventDestroy). destroy_stream blocks until
// the stream's enqueued work and notifications have completed (all backends, so that teardown is the same
// everywhere; CUDA itself would return at once).
//
// Failure: backend status codes become StreamError (a std::runtime_error) with the backend's message and the call
// that failed, raised by the call that got the status. An asynchronous failure (a faulting kernel; on the host
// backend, a host function that throws) is sticky, as CUDA's are: it is raised by the next try_query / synchronize
// that covers the failed work, and every later notification on the stream carries it. (CUDA and HIP poison the whole
// device context; the host backend poisons the failed stream, and any stream that waits on an event it recorded after
// failing — the executor must not rely on either scope.) Using a handle after destroying it, or one from another
// backend, is undefined behaviour (debug builds assert where cheap). A backend without devices constructs normally and
// reports device_count() == 0; creating a stream, event or allocation on a device >= device_count() throws StreamError
// ("no CUDA device: ...").
//
// Cost: enqueue calls (record, wait, notify, copy) are one backend call each (CUDA: one runtime call; host: one
// lock and, if the stream thread sleeps, one wake) and allocate nothing in steady state. try_query never blocks.
// create_* and allocate are slow paths that allocate. synchronize() blocks the caller and is counted in
// host_synchronizations(): the executor's steady state should issue none (docs/architecture.md §5). Each backend's
// header says what else allocates.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include <depengine/frontier/vocabulary.h>

namespace depengine {

// Which way StreamBackend::copy moves bytes.
enum class CopyDirection : std::uint8_t { kHostToDevice, kDeviceToHost, kDeviceToDevice };

// "compute", "copy" or "collective".
[[nodiscard]] constexpr std::string_view to_string(StreamKind kind) noexcept {
  return kind == StreamKind::kCompute ? "compute" : kind == StreamKind::kCopy ? "copy" : "collective";
}

// A stream of one backend. Trivially copyable; a default-constructed handle names nothing. Equal handles name the
// same stream. The pointer is the backend's and means nothing to callers (native_handle() gives the device stream).
struct StreamHandle {
  // The backend's stream; null for a handle that names nothing.
  void* impl = nullptr;

  // Whether the handle names a stream.
  [[nodiscard]] explicit operator bool() const noexcept { return impl != nullptr; }
  friend bool operator==(StreamHandle, StreamHandle) = default;
};

// An event of one backend: a reusable marker (create once, record many times), as cudaEvent_t.
struct EventHandle {
  // The backend's event; null for a handle that names nothing.
  void* impl = nullptr;

  // Whether the handle names an event.
  [[nodiscard]] explicit operator bool() const noexcept { return impl != nullptr; }
  friend bool operator==(EventHandle, EventHandle) = default;
};

// Work recorded from a stream once and launched again and again (StreamBackend::end_recording): a CUDA or HIP graph,
// instantiated. Move-only; destroying it releases the graph (`release` is a plain function of the backend's, which
// needs no backend object, so recorded work may outlive the backend that recorded it).
class RecordedWork {
 public:
  // The backend's function that releases the recorded work.
  using Release = void (*)(void* impl) noexcept;

  RecordedWork() = default;
  // Takes `impl`, which `release` releases when the RecordedWork is destroyed.
  RecordedWork(void* impl, Release release) noexcept : impl_(impl), release_(release) {}
  // Moves the work; the moved-from one holds nothing.
  RecordedWork(RecordedWork&& other) noexcept
      : impl_(std::exchange(other.impl_, nullptr)), release_(std::exchange(other.release_, nullptr)) {}
  RecordedWork& operator=(RecordedWork&& other) noexcept {
    std::swap(impl_, other.impl_);
    std::swap(release_, other.release_);
    return *this;
  }
  RecordedWork(const RecordedWork&) = delete;
  RecordedWork& operator=(const RecordedWork&) = delete;
  ~RecordedWork() {
    if (impl_ != nullptr) release_(impl_);
  }

  // The backend's recorded work (its instantiated graph), and whether there is any.
  [[nodiscard]] void* impl() const noexcept { return impl_; }
  [[nodiscard]] explicit operator bool() const noexcept { return impl_ != nullptr; }

 private:
  void* impl_ = nullptr;
  Release release_ = nullptr;
};

// A moment in a stream's work that a trace asks for (StreamBackend::stamp). Trivially copyable; read exactly once.
struct TimeStamp {
  // The backend's stamp; null for none.
  void* impl = nullptr;

  // Whether a stamp was taken.
  [[nodiscard]] explicit operator bool() const noexcept { return impl != nullptr; }
};

// A backend failure: a status code that a backend call returned, or an asynchronous failure found later. what() is
// "<backend> <call>: <message>", e.g. "cuda cudaEventQuery: an illegal memory access was encountered
// (cudaErrorIllegalAddress = 700)". Copying never throws (the text lives in std::runtime_error's shared string).
class StreamError : public std::runtime_error {
 public:
  // `backend` and `call` must have static storage duration (string literals): they are kept as pointers.
  // `code` is the backend's status (cudaError_t, hipError_t) or, for conditions found by depengine itself, one of
  // the negative codes below. `cause` is the exception that caused it, if any (a host function's own exception).
  StreamError(const char* backend, const char* call, int code, std::string_view message,
              std::exception_ptr cause = nullptr);

  // Conditions depengine finds itself, on any backend (backend status codes are never negative).
  static constexpr int kHostFunctionThrew = -1;  // a launched host function threw: cause() is its exception
  static constexpr int kNoDevice = -2;           // a device index >= device_count() on a backend that has none
  static constexpr int kBadDevice = -3;          // a device index out of range, or stream and event on two devices
  static constexpr int kOutOfMemory = -4;        // allocate() could not allocate

  // The backend's name, the call that failed, its status code (or one of the codes above), and the exception
  // that caused it, if any.
  [[nodiscard]] const char* backend() const noexcept { return backend_; }
  [[nodiscard]] const char* call() const noexcept { return call_; }
  [[nodiscard]] int code() const noexcept { return code_; }
  [[nodiscard]] const std::exception_ptr& cause() const noexcept { return cause_; }

 private:
  const char* backend_;
  const char* call_;
  int code_;
  std::exception_ptr cause_;
};

// A completion notification: called once, on a backend thread, with the context given to notify() and null or the
// stream's sticky error. Must not throw (the type says so), block on device work, or call any backend.
using NotifyFn = void (*)(void* context, std::exception_ptr error) noexcept;

class StreamBackend {
 public:
  StreamBackend() = default;
  StreamBackend(const StreamBackend&) = delete;
  StreamBackend& operator=(const StreamBackend&) = delete;
  virtual ~StreamBackend() = default;

  // "host", "cuda" or "hip". Static storage.
  [[nodiscard]] virtual const char* name() const noexcept = 0;

  // How many devices this backend can use; fixed at construction. 0 means "no device" (no GPU, no driver): the
  // backend still constructs and answers status(), and everything else that names a device throws StreamError.
  [[nodiscard]] virtual int device_count() const noexcept = 0;

  // One line for logs and skipped tests: the devices found, or why there are none ("no CUDA device:
  // cudaGetDeviceCount: CUDA driver version is insufficient ... (cudaErrorInsufficientDriver = 35)").
  [[nodiscard]] virtual std::string_view status() const noexcept = 0;

  // --- Streams ---------------------------------------------------------------------------------------------------

  // A new empty stream on `device` (0 <= device < device_count()). Slow path: allocates (host: starts a thread).
  [[nodiscard]] virtual StreamHandle create_stream(int device, StreamKind kind) = 0;

  // Waits until everything enqueued on `stream` has completed (notifications included), then releases it. Errors
  // found meanwhile are dropped: teardown after a device fault must still succeed. Not counted as a host
  // synchronisation (a teardown path). A null handle is ignored.
  virtual void destroy_stream(StreamHandle stream) noexcept = 0;

  // The device stream for enqueuing the user's device work: cudaStream_t (CUDA), hipStream_t (HIP). The host
  // backend returns its own stream object; enqueue host work there with HostStreamBackend::launch(). Valid until
  // destroy_stream.
  [[nodiscard]] virtual void* native_handle(StreamHandle stream) const noexcept = 0;

  // --- Events ----------------------------------------------------------------------------------------------------

  // A new event on `device`, complete until first recorded. Timing is disabled (cudaEventDisableTiming): events
  // are only for ordering. Slow path: allocates; the executor should pool events and reuse them (an event may be
  // re-recorded once its previous record has completed, or at any time on the same stream).
  [[nodiscard]] virtual EventHandle create_event(int device) = 0;

  // Releases the event; pending records and waits of it still complete (the object outlives them). Null: ignored.
  virtual void destroy_event(EventHandle event) noexcept = 0;

  // Enqueues on `stream` the record of `event`: the event now captures all work enqueued on `stream` so far. The
  // event must be of the stream's device. Throws StreamError for a backend failure.
  virtual void record(StreamHandle stream, EventHandle event) = 0;

  // Enqueues on `stream` a device-side wait for `event`'s most recent record (as of this call); an event never
  // recorded is complete and the wait is a no-op. The event may be of another device. Never blocks the caller.
  virtual void wait(StreamHandle stream, EventHandle event) = 0;

  // Enqueues a completion notification: fn(context, error) once the work enqueued on `stream` before it has
  // completed (see the rules at the top). `context` must stay valid until fn has been called. fn is called exactly
  // once unless notify() throws, in which case it is never called.
  virtual void notify(StreamHandle stream, NotifyFn fn, void* context) = 0;

  // Whether `event`'s most recent record has completed. Never blocks (safe from a poller loop). Throws the sticky
  // StreamError if the captured work failed (cudaEventQuery's semantics). Not a host synchronisation.
  [[nodiscard]] virtual bool try_query(EventHandle event) = 0;

  // Whether a notification per op is cheap. True for the host backend (a queue entry its stream thread runs); false
  // for CUDA and HIP, whose host callbacks stall their stream until they return (measured on an H100: a kernel chain
  // across two streams took 5.1 us per kernel, 10.7 us with a cudaLaunchHostFunc after each). The stream executor
  // polls events with try_query() instead where this is false.
  [[nodiscard]] virtual bool cheap_notifications() const noexcept { return false; }

  // Blocks until `event`'s most recent record (as of the call) has completed; throws the sticky StreamError if the
  // captured work failed. Counted in host_synchronizations(). For slow paths and tests.
  void synchronize(EventHandle event) {
    // relaxed: a statistic; readers need no ordering with the synchronisation itself.
    host_synchronizations_.fetch_add(1, std::memory_order_relaxed);
    synchronize_event(event);
  }

  // Blocks until everything enqueued on `stream` so far has completed (notifications included); throws the stream's
  // sticky StreamError if any of it failed. Counted in host_synchronizations().
  void synchronize(StreamHandle stream) {
    // relaxed: a statistic, as above.
    host_synchronizations_.fetch_add(1, std::memory_order_relaxed);
    synchronize_stream(stream);
  }

  // How many synchronize() calls this backend has served, from any thread. A statistic: relaxed, so a count read
  // while calls are in flight may lag them.
  [[nodiscard]] std::uint64_t host_synchronizations() const noexcept {
    // relaxed: see above; the test that reads it has joined the callers or synchronised with them otherwise.
    return host_synchronizations_.load(std::memory_order_relaxed);
  }

  // --- Time stamps (traces) --------------------------------------------------------------------------------------

  // Enqueues on `stream` a stamp of the moment the stream reaches this point (the work enqueued before it has
  // completed), so that a trace can show when the work between two stamps ran on the device, not when it was issued or
  // reported complete. Read it with read_stamp() once work enqueued after it has completed (an event recorded, or a
  // notification enqueued, after it has). Host: a notification that reads the clock. CUDA/HIP: an event with timing,
  // whose elapsed time since a reference event of the device is put on the host clock (the reference is recorded on an
  // idle stream of the backend's own and synchronised with, a few times to bracket its completion on the host clock,
  // once per device and again every kStampAnchorAge, since elapsed times are floats); a stamp is then off by up to a
  // few microseconds, half the narrowest bracket. Slow path, for traces: allocates. Throws StreamError.
  [[nodiscard]] virtual TimeStamp stamp(StreamHandle stream) = 0;
  static constexpr std::int64_t kStampAnchorAge = 10'000'000'000;  // ns

  // The moment of `stamp`, in nanoseconds of std::chrono::steady_clock since its epoch, or -1 if it is not known (the
  // stream failed before reaching it). Releases the stamp: read each exactly once, and every one, failed or not.
  [[nodiscard]] virtual std::int64_t read_stamp(TimeStamp stamp) noexcept = 0;

  // --- Device memory ---------------------------------------------------------------------------------------------

  // `bytes` of device memory on `device` (aligned to at least 256 bytes; nullptr for 0 bytes), usable by any
  // stream of the device. Not stream-ordered: a slow path for pools (memory/), which reuse blocks themselves.
  // Throws StreamError (cudaErrorMemoryAllocation, ...).
  [[nodiscard]] virtual void* allocate(int device, std::size_t bytes) = 0;

  // Frees memory from allocate(device, ...). The caller must know that no enqueued work still uses it (an event
  // covering that work has completed); cudaFree may synchronise the device. Errors are dropped. nullptr: ignored.
  virtual void deallocate(int device, void* pointer) noexcept = 0;

  // Enqueues on `stream` a copy of `bytes` from `source` to `destination` (cudaMemcpyAsync). Device pointers must
  // come from allocate() on the stream's device; host memory must stay valid and unchanged (source) or untouched
  // (destination) until an event recorded after the copy has completed.
  virtual void copy(StreamHandle stream, void* destination, const void* source, std::size_t bytes,
                    CopyDirection direction) = 0;

  // --- Recorded work (graphs) ------------------------------------------------------------------------------------

  // Whether the backend can record the work enqueued on a stream and launch it again: CUDA and HIP (stream capture
  // into a graph); not the host backend. The engine replays a captured graph of stream ops through it (graph.h).
  [[nodiscard]] virtual bool records_work() const noexcept { return false; }

  // Starts recording `stream`: until end_recording() or abandon_recording(), the work enqueued on it (copies,
  // kernels) is recorded, not run. Calls that tie the recording to work outside it fail meanwhile or invalidate it (a
  // wait on an event recorded before the recording began: end_recording() then throws), so call it from the thread
  // that enqueues the work, and enqueue only work. Throws StreamError (std::logic_error where records_work() is
  // false).
  virtual void begin_recording(StreamHandle stream);
  // Ends the recording of `stream` and returns its work, ready to launch on any stream of the same device. Throws
  // StreamError if the runtime refused something enqueued meanwhile (the recording is then over).
  [[nodiscard]] virtual RecordedWork end_recording(StreamHandle stream);
  // Ends the recording of `stream` and discards it (a function failed while recording). Errors are dropped.
  virtual void abandon_recording(StreamHandle stream) noexcept;
  // Enqueues recorded work on `stream` (of the device it was recorded on), as if what was recorded were enqueued
  // again. Throws StreamError.
  virtual void launch(const RecordedWork& work, StreamHandle stream);

 protected:
  // The blocking waits behind synchronize(); the public wrappers count them.
  virtual void synchronize_event(EventHandle event) = 0;
  virtual void synchronize_stream(StreamHandle stream) = 0;

 private:
  std::atomic<std::uint64_t> host_synchronizations_{0};
};

}  // namespace depengine
