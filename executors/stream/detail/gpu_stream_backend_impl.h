// The member definitions of GpuStreamBackend<Runtime> (gpu_stream_backend.h has the design), and GpuRuntimeApi, the
// helpers built on a runtime's traits (gpu_runtime.h).
//
// Include this only from a runtime's source file, after defining the traits, and follow it with the explicit
// instantiation `template class detail::GpuStreamBackend<detail::CudaRuntime>;`: it needs the traits complete, and
// so, through them, the runtime's headers. It includes neither runtime itself.
//
// Thread safety, ownership, failure and cost: as gpu_stream_backend.h. Every helper here is a function of its
// arguments and the immutable error table, safe from any thread; the ones marked "no runtime call" are safe inside a
// runtime callback.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include <depengine/executors/stream/detail/gpu_runtime.h>
#include <depengine/executors/stream/detail/gpu_stream_backend.h>
#include <depengine/executors/stream/detail/notification_pool.h>
#include <depengine/executors/stream/stream_backend.h>

namespace depengine::detail {

// What a StreamHandle of GpuStreamBackend<Runtime> points at: owned by the backend, from create_stream to
// destroy_stream.
template <class Runtime>
struct GpuStreamRecord {
  typename Runtime::Stream stream;
  int device;
  StreamKind kind;
};

// Runtime's traits, plus what GpuStreamBackend builds on them: status-to-message, the checks that turn a status into
// a StreamError, handle decoding and the stream callback. Derives from the traits so that the template reads
// Api::set_device(...) and Api::check(...) alike.
template <class Runtime>
struct GpuRuntimeApi : Runtime {
  static_assert(GpuRuntime<Runtime>,
                "GpuStreamBackend<Runtime>: Runtime must be a traits struct as executors/stream/detail/gpu_runtime.h "
                "describes (types Status, Stream, Event, MemcpyKind, DeviceProp; constants; kNames; static functions "
                "forwarding to the runtime); the failed requirement is named below");

  using Status = typename Runtime::Status;
  using Stream = typename Runtime::Stream;
  using Event = typename Runtime::Event;
  using Record = GpuStreamRecord<Runtime>;
  static_assert(sizeof(Record) <= 16, "cuda_stream_backend.h documents create_stream's allocation as 16 bytes");
  static constexpr const GpuRuntimeNames& kNames = Runtime::kNames;

  // error_name/error_string for every code below kErrorCodes, read once outside any callback: a stream callback must
  // not call the runtime, yet it must turn its status into a message. error_text() calls the runtime only the first
  // time, which the constructor makes; after that, no runtime call.
  struct ErrorText {
    std::array<const char*, Runtime::kErrorCodes> name{};
    std::array<const char*, Runtime::kErrorCodes> text{};
  };

  static const ErrorText& error_text() {
    // Immutable after its thread-safe initialisation (the constructor forces it before any callback can run).
    static const ErrorText table = [] {
      ErrorText t;
      for (int code = 0; code < Runtime::kErrorCodes; ++code) {
        const char* name = Runtime::error_name(static_cast<Status>(code));
        const char* text = Runtime::error_string(static_cast<Status>(code));
        t.name[static_cast<std::size_t>(code)] = name != nullptr ? name : kNames.unrecognized_error.c_str();
        t.text[static_cast<std::size_t>(code)] = text != nullptr ? text : kNames.unrecognized_error.c_str();
      }
      return t;
    }();
    return table;
  }

  // "<text> (<name> = <code>)", e.g. "out of memory (cudaErrorMemoryAllocation = 2)"; "<name> = <code>" where the
  // text is only the name and the runtime says it may be (kErrorStringMayBeName). No runtime call.
  static std::string describe(Status status) {
    const int code = static_cast<int>(status);
    if (code < 0 || code >= Runtime::kErrorCodes) {
      return std::string(kNames.unrecognized_error.c_str()) + " (" + std::to_string(code) + ')';
    }
    const ErrorText& table = error_text();
    const std::string_view name = table.name[static_cast<std::size_t>(code)];
    const std::string_view text = table.text[static_cast<std::size_t>(code)];
    const bool with_text = !(Runtime::kErrorStringMayBeName && text == name);
    std::string message;
    if (with_text) {
      message = text;
      message += " (";
    }
    message += name;
    message += " = ";
    message += std::to_string(code);
    if (with_text) message += ')';
    return message;
  }

  [[noreturn]] static void throw_error(StaticName call, Status status) {
    // Clear the thread's last error, so that user code checking get_last_error() after its own launch is not told
    // about ours. (A sticky error cannot be cleared; it stays, as it should.)
    (void)Runtime::get_last_error();
    throw StreamError(kNames.backend.c_str(), call.c_str(), static_cast<int>(status), describe(status));
  }

  static void check(Status status, StaticName call) {
    if (status != Runtime::kSuccess) [[unlikely]] {
      throw_error(call, status);
    }
  }

  static Record& stream_of(StreamHandle handle) {
    if (!handle) throw std::invalid_argument(std::string(kNames.backend_class.c_str()) + ": null StreamHandle");
    return *static_cast<Record*>(handle.impl);
  }

  static Event event_of(EventHandle handle) {
    if (!handle) throw std::invalid_argument(std::string(kNames.backend_class.c_str()) + ": null EventHandle");
    return static_cast<Event>(handle.impl);
  }

  // The runtime stream a handle names; null for a null handle. No runtime call.
  static Stream runtime_stream(StreamHandle handle) noexcept {
    return handle ? static_cast<Record*>(handle.impl)->stream : nullptr;
  }

  static typename Runtime::MemcpyKind memcpy_kind(CopyDirection direction) {
    switch (direction) {
      case CopyDirection::kHostToDevice:
        return Runtime::kMemcpyHostToDevice;
      case CopyDirection::kDeviceToHost:
        return Runtime::kMemcpyDeviceToHost;
      case CopyDirection::kDeviceToDevice:
        return Runtime::kMemcpyDeviceToDevice;
    }
    throw std::invalid_argument(std::string(kNames.backend_class.c_str()) + "::copy: bad CopyDirection");
  }

  // The stream callback (through the traits' trampoline): runs on a runtime thread once the work before it completed
  // (or failed). No runtime call here.
  static void on_callback(Status status, void* user_data) noexcept {
    const auto [fn, context] = NotificationPool::take(user_data);
    std::exception_ptr error;
    if (status != Runtime::kSuccess) {
      try {
        throw StreamError(kNames.backend.c_str(), kNames.callback_error.c_str(), static_cast<int>(status),
                          describe(status));
      } catch (...) {
        error = std::current_exception();  // the StreamError, or std::bad_alloc if even that failed
      }
    }
    fn(context, std::move(error));  // last: may destroy the backend (the record is back in the pool already)
  }

  // "cuda: 2 devices (NVIDIA H100, NVIDIA H100); runtime 13000, driver 13000".
  static std::string describe_devices(int count) {
    std::string text =
        std::string(kNames.backend.c_str()) + ": " + std::to_string(count) + " device" + (count == 1 ? "" : "s") + " (";
    for (int device = 0; device < count; ++device) {
      typename Runtime::DeviceProp properties{};
      if (device > 0) text += ", ";
      text += Runtime::get_device_properties(&properties, device) == Runtime::kSuccess ? properties.name : "?";
    }
    int runtime = 0;
    int driver = 0;
    (void)Runtime::runtime_get_version(&runtime);
    (void)Runtime::driver_get_version(&driver);
    (void)Runtime::get_last_error();
    return text + "); runtime " + std::to_string(runtime) + ", driver " + std::to_string(driver);
  }
};

template <class Runtime>
GpuStreamBackend<Runtime>::GpuStreamBackend() : pool_(std::make_unique<NotificationPool>()) {
  (void)Api::error_text();  // fill the table now, outside any callback
  int count = 0;
  const typename Api::Status status = Api::get_device_count(&count);
  if (status != Api::kSuccess) {
    // No GPU (cudaErrorNoDevice; hipErrorNoDevice, also when there is no /dev/kfd, as on CI), no driver at all
    // (cudaErrorInsufficientDriver, as on CI), or anything else: this process has no usable device, which is a state
    // to report, not a failure to construct.
    (void)Api::get_last_error();
    devices_ = 0;
    count_status_ = static_cast<int>(status);
    status_ = std::string(Api::kNames.no_device.c_str()) + ": " + Api::kNames.get_device_count.c_str() + ": " +
              Api::describe(status);
  } else if (count <= 0) {
    devices_ = 0;
    status_ = std::string(Api::kNames.no_device.c_str()) + ": " + Api::kNames.get_device_count.c_str() + " found none";
  } else {
    devices_ = count;
    status_ = Api::describe_devices(count);
  }
}

template <class Runtime>
GpuStreamBackend<Runtime>::~GpuStreamBackend() = default;

template <class Runtime>
const char* GpuStreamBackend<Runtime>::name() const noexcept {
  return Api::kNames.backend.c_str();
}

template <class Runtime>
void GpuStreamBackend<Runtime>::check_device(int device, const char* call) const {
  if (device >= 0 && device < devices_) return;
  if (devices_ == 0) {
    throw StreamError(Api::kNames.backend.c_str(), call, count_status_ != 0 ? count_status_ : StreamError::kNoDevice,
                      status_);
  }
  throw StreamError(Api::kNames.backend.c_str(), call, static_cast<int>(Api::kInvalidDevice),
                    "device " + std::to_string(device) + " out of range (" + std::to_string(devices_) + " devices)");
}

template <class Runtime>
StreamHandle GpuStreamBackend<Runtime>::create_stream(int device, StreamKind kind) {
  check_device(device, "create_stream");
  Api::check(Api::set_device(device), Api::kNames.set_device);
  auto record = std::make_unique<typename Api::Record>(typename Api::Record{nullptr, device, kind});
  // Non-blocking: never implicitly synchronised with the legacy default stream, so user code on stream 0 cannot
  // serialise the engine's streams.
  Api::check(Api::stream_create_with_flags(&record->stream, Api::kStreamNonBlocking),
             Api::kNames.stream_create_with_flags);
  return StreamHandle{record.release()};
}

template <class Runtime>
void GpuStreamBackend<Runtime>::destroy_stream(StreamHandle stream) noexcept {
  if (!stream) return;
  auto* record = static_cast<typename Api::Record*>(stream.impl);
  // Drain first, so that no callback of this stream runs after destroy returns (its records live in pool_).
  // Partner: every enqueue on this stream, the stream_add_callback of notify() included (stream order).
  (void)Api::stream_synchronize(record->stream);
  (void)Api::stream_destroy(record->stream);
  (void)Api::get_last_error();  // errors are dropped at teardown (see the interface)
  delete record;
}

template <class Runtime>
void* GpuStreamBackend<Runtime>::native_handle(StreamHandle stream) const noexcept {
  return Api::runtime_stream(stream);
}

template <class Runtime>
EventHandle GpuStreamBackend<Runtime>::create_event(int device) {
  check_device(device, "create_event");
  Api::check(Api::set_device(device), Api::kNames.set_device);
  typename Api::Event event = nullptr;
  Api::check(Api::event_create_with_flags(&event, Api::kEventDisableTiming), Api::kNames.event_create_with_flags);
  return EventHandle{event};
}

template <class Runtime>
void GpuStreamBackend<Runtime>::destroy_event(EventHandle event) noexcept {
  if (!event) return;
  // Returns at once; the runtime releases the event once pending records/waits of it complete (the interface's
  // promise).
  (void)Api::event_destroy(static_cast<typename Api::Event>(event.impl));
  (void)Api::get_last_error();
}

template <class Runtime>
void GpuStreamBackend<Runtime>::record(StreamHandle stream, EventHandle event) {
  typename Api::Record& s = Api::stream_of(stream);
  Api::check(Api::set_device(s.device), Api::kNames.set_device);
  // Partner: the stream_wait_event (cudaStreamWaitEvent) in wait(), or the event_query/event_synchronize in
  // try_query()/synchronize_event(), of this event; they see the work enqueued on s before this call.
  Api::check(Api::event_record(Api::event_of(event), s.stream), Api::kNames.event_record);
}

template <class Runtime>
void GpuStreamBackend<Runtime>::wait(StreamHandle stream, EventHandle event) {
  // Partner: the event_record (cudaEventRecord) in record() most recently called on this event. Device-side; the
  // host goes on.
  Api::check(Api::stream_wait_event(Api::stream_of(stream).stream, Api::event_of(event), 0),
             Api::kNames.stream_wait_event);
}

template <class Runtime>
void GpuStreamBackend<Runtime>::notify(StreamHandle stream, NotifyFn fn, void* context) {
  typename Api::Record& s = Api::stream_of(stream);
  if (fn == nullptr) {
    throw std::invalid_argument(std::string(Api::kNames.backend_class.c_str()) + "::notify: null function");
  }
  NotificationPool::Record* record = pool_->acquire(fn, context);
  // Runs on_callback once everything enqueued on s before it has completed, with the stream's error status.
  const typename Api::Status status = Api::template stream_add_callback<&Api::on_callback>(s.stream, record, 0);
  if (status != Api::kSuccess) {
    pool_->give_back(record);  // never called: the record is ours again
    Api::throw_error(Api::kNames.stream_add_callback, status);
  }
}

template <class Runtime>
bool GpuStreamBackend<Runtime>::try_query(EventHandle event) {
  // Partner: the event_record (cudaEventRecord) of this event's most recent record().
  const typename Api::Status status = Api::event_query(Api::event_of(event));
  if (status == Api::kSuccess) return true;
  if (status == Api::kNotReady) {
    (void)Api::get_last_error();  // "not ready" is an answer, not an error to leave in the thread's last-error state
    return false;
  }
  Api::throw_error(Api::kNames.event_query, status);
}

// A device's anchor: a timing event recorded on an idle stream of the backend's own, and the host time it completed.
// The host cannot read that time, only bracket it: it lies between the clock read just before the record and the one
// just after the synchronisation returned. The anchor is the middle of the narrowest of kAnchorTries brackets, so a
// stamp is off by at most half that width (a few microseconds; the end of the bracket alone put stamps 5 us late on an
// H100, after the moment the host saw the work complete).
template <class Runtime>
struct GpuStreamBackend<Runtime>::Anchor {
  typename Runtime::Event event = nullptr;
  std::int64_t at = 0;  // steady-clock ns when `event` completed, to within `error`
  std::int64_t error = 0;
  ~Anchor() {
    if (event != nullptr) (void)Runtime::event_destroy(event);
  }
};

// One stamp: its timing event and the anchor it is read against (recorded before it, so the elapsed time is >= 0).
template <class Runtime>
struct GpuStamp {
  typename Runtime::Event event = nullptr;
  std::shared_ptr<const void> anchor;  // GpuStreamBackend<Runtime>::Anchor, kept alive until the stamp is read
  typename Runtime::Event anchor_event = nullptr;
  std::int64_t anchor_at = 0;
};

template <class Runtime>
std::shared_ptr<const typename GpuStreamBackend<Runtime>::Anchor> GpuStreamBackend<Runtime>::anchor(int device) {
  const auto steady_ns = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  const std::lock_guard lock(anchors_mutex_);
  if (anchors_.size() < static_cast<std::size_t>(devices_)) anchors_.resize(static_cast<std::size_t>(devices_));
  std::shared_ptr<const Anchor>& current = anchors_[static_cast<std::size_t>(device)];
  if (current != nullptr && steady_ns() - current->at < kStampAnchorAge) return current;
  constexpr int kAnchorTries = 5;
  std::shared_ptr<Anchor> best;
  typename Api::Stream idle = nullptr;
  Api::check(Api::stream_create_with_flags(&idle, Api::kStreamNonBlocking), Api::kNames.stream_create_with_flags);
  try {
    for (int attempt = 0; attempt < kAnchorTries; ++attempt) {
      auto tried = std::make_shared<Anchor>();
      Api::check(Api::event_create_with_flags(&tried->event, Api::kEventDefault), Api::kNames.event_create_with_flags);
      const std::int64_t before = steady_ns();
      Api::check(Api::event_record(tried->event, idle), Api::kNames.event_record);
      synchronize(EventHandle{tried->event});  // counted: kAnchorTries host synchronisations per anchor
      const std::int64_t after = steady_ns();
      tried->at = before + (after - before) / 2;
      tried->error = (after - before + 1) / 2;
      if (best == nullptr || tried->error < best->error) best = std::move(tried);
    }
  } catch (...) {
    (void)Api::stream_destroy(idle);
    throw;
  }
  (void)Api::stream_destroy(idle);
  current = std::move(best);
  return current;
}

template <class Runtime>
TimeStamp GpuStreamBackend<Runtime>::stamp(StreamHandle stream) {
  typename Api::Record& s = Api::stream_of(stream);
  Api::check(Api::set_device(s.device), Api::kNames.set_device);
  std::shared_ptr<const Anchor> base = anchor(s.device);
  auto owned = std::make_unique<GpuStamp<Runtime>>();
  owned->anchor_event = base->event;
  owned->anchor_at = base->at;
  owned->anchor = std::move(base);
  Api::check(Api::event_create_with_flags(&owned->event, Api::kEventDefault), Api::kNames.event_create_with_flags);
  try {
    // Partner: the event_elapsed_time in read_stamp(), called once work enqueued after this has completed.
    Api::check(Api::event_record(owned->event, s.stream), Api::kNames.event_record);
  } catch (...) {
    (void)Api::event_destroy(owned->event);
    throw;
  }
  return TimeStamp{owned.release()};
}

template <class Runtime>
std::int64_t GpuStreamBackend<Runtime>::read_stamp(TimeStamp stamp) noexcept {
  const std::unique_ptr<GpuStamp<Runtime>> owned(static_cast<GpuStamp<Runtime>*>(stamp.impl));
  float milliseconds = 0;
  // Partner: the event_record of stamp(), complete by the caller's contract (a later event or notification has).
  const typename Api::Status status = Api::event_elapsed_time(&milliseconds, owned->anchor_event, owned->event);
  (void)Api::event_destroy(owned->event);
  if (status != Api::kSuccess) {
    (void)Api::get_last_error();
    return -1;
  }
  return owned->anchor_at + static_cast<std::int64_t>(static_cast<double>(milliseconds) * 1e6);
}

template <class Runtime>
void GpuStreamBackend<Runtime>::synchronize_event(EventHandle event) {
  // Partner: the event_record (cudaEventRecord) of this event's most recent record().
  Api::check(Api::event_synchronize(Api::event_of(event)), Api::kNames.event_synchronize);
}

template <class Runtime>
void GpuStreamBackend<Runtime>::synchronize_stream(StreamHandle stream) {
  // Partner: every enqueue on this stream before the call (stream order alone; no event is involved).
  Api::check(Api::stream_synchronize(Api::stream_of(stream).stream), Api::kNames.stream_synchronize);
}

template <class Runtime>
void* GpuStreamBackend<Runtime>::allocate(int device, std::size_t bytes) {
  check_device(device, "allocate");
  if (bytes == 0) return nullptr;
  Api::check(Api::set_device(device), Api::kNames.set_device);
  void* pointer = nullptr;
  Api::check(Api::device_malloc(&pointer, bytes), Api::kNames.device_malloc);
  return pointer;
}

template <class Runtime>
void GpuStreamBackend<Runtime>::deallocate(int device, void* pointer) noexcept {
  if (pointer == nullptr) return;
  (void)Api::set_device(device);
  (void)Api::device_free(pointer);  // synchronises the device; the caller knows no enqueued work uses the block
  (void)Api::get_last_error();
}

template <class Runtime>
void GpuStreamBackend<Runtime>::copy(StreamHandle stream, void* destination, const void* source, std::size_t bytes,
                                     CopyDirection direction) {
  typename Api::Record& s = Api::stream_of(stream);
  if (bytes == 0) return;
  Api::check(Api::set_device(s.device), Api::kNames.set_device);
  Api::check(Api::memcpy_async(destination, source, bytes, Api::memcpy_kind(direction), s.stream),
             Api::kNames.memcpy_async);
}

template <class Runtime>
void GpuStreamBackend<Runtime>::begin_recording(StreamHandle stream) {
  typename Api::Record& s = Api::stream_of(stream);
  Api::check(Api::set_device(s.device), Api::kNames.set_device);
  Api::check(Api::stream_begin_capture(s.stream, Api::kCaptureModeThreadLocal), Api::kNames.stream_begin_capture);
}

template <class Runtime>
RecordedWork GpuStreamBackend<Runtime>::end_recording(StreamHandle stream) {
  typename Api::Record& s = Api::stream_of(stream);
  typename Api::Graph graph = nullptr;
  Api::check(Api::stream_end_capture(s.stream, &graph), Api::kNames.stream_end_capture);
  typename Api::GraphExec exec = nullptr;
  const typename Api::Status status = Api::graph_instantiate(&exec, graph);
  // The executable graph does not need it. A failure is dropped, and cleared from the thread's last error only then,
  // so that an error of the caller's own stays for it to find.
  if (Api::graph_destroy(graph) != Api::kSuccess) (void)Api::get_last_error();
  Api::check(status, Api::kNames.graph_instantiate);
  return RecordedWork(exec, [](void* impl) noexcept {
    // Released on whichever thread drops the last reference: a failure is dropped as above.
    if (Runtime::graph_exec_destroy(static_cast<typename Runtime::GraphExec>(impl)) != Runtime::kSuccess) {
      (void)Runtime::get_last_error();
    }
  });
}

template <class Runtime>
void GpuStreamBackend<Runtime>::abandon_recording(StreamHandle stream) noexcept {
  typename Api::Record& s = Api::stream_of(stream);
  typename Api::Graph graph = nullptr;
  (void)Api::stream_end_capture(s.stream, &graph);
  if (graph != nullptr) (void)Api::graph_destroy(graph);
  (void)Api::get_last_error();
}

template <class Runtime>
void GpuStreamBackend<Runtime>::launch(const RecordedWork& work, StreamHandle stream) {
  typename Api::Record& s = Api::stream_of(stream);
  Api::check(Api::set_device(s.device), Api::kNames.set_device);
  Api::check(Api::graph_launch(static_cast<typename Api::GraphExec>(work.impl()), s.stream), Api::kNames.graph_launch);
}

}  // namespace depengine::detail
