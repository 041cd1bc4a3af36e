// GpuStreamBackend<Runtime>: the one implementation of StreamBackend over a CUDA-like runtime API. CudaStreamBackend
// (executors/cuda_stream) and HipStreamBackend (executors/hip_stream) are this template over their runtime's traits
// (gpu_runtime.h), each a thin final class that adds only its typed stream accessor.
//
// Why one template: docs/architecture.md §5 makes the GPU backends thin backends of one design, and HIP mirrors CUDA
// call for call, so the two hand-written backends were the same 160 lines with cuda* for hip*. The logic now lives here
// once (gpu_stream_backend_impl.h); a runtime contributes a traits struct that renames its calls and states its few
// real differences as named constants. A compile-time template rather than a virtual "runtime" interface: each runtime
// call stays one direct call, as in the hand-written backends, and the traits can export the runtime's own types.
// Why in executors/stream/detail/ rather than a folder of its own: it is not a backend (no runtime, no library, no
// public name) but an internal of the stream layer that both GPU folders share, as NotificationPool is; each backend
// keeps its own folder behind the one interface (STYLE.md 11).
//
// Headers and instantiation: this header declares the class and includes no runtime; Runtime may be an incomplete
// type here, so the public headers that derive from it stay free of CUDA/HIP headers and their users need neither
// toolkit's headers. The member definitions are in gpu_stream_backend_impl.h, which only a runtime's source file
// includes: it defines the traits and explicitly instantiates GpuStreamBackend<Runtime>. The public header declares
// that instantiation `extern template`, so no other translation unit instantiates (or could: it lacks the traits).
//
// Thread safety, failure and current device: StreamBackend's contract, mapped to the runtime as
// executors/cuda_stream/cuda_stream_backend.h documents (HIP identically). Any thread except the runtime's callback
// threads; device_count() and status() are fixed at construction.
//
// Ownership and lifetime: the backend owns its stream records (one per create_stream, freed by destroy_stream) and the
// NotificationPool whose records carry notify()'s function through the runtime callback; events are the runtime's
// own objects. destroy_stream drains the stream first, so no callback touches the pool after the backend is gone.
//
// Cost: one runtime call per operation (two with the set_device that makes the stream's device current). Allocation:
// create_stream (a 16-byte record), notify only while the callback-record pool grows to the peak number of
// notifications in flight (then recycled), and error paths (the StreamError's message). No other call allocates.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <depengine/executors/stream/stream_backend.h>

namespace depengine::detail {

class NotificationPool;
template <class Runtime>
struct GpuRuntimeApi;

template <class Runtime>
class GpuStreamBackend : public StreamBackend {
 public:
  // Runtime::kNames.backend: "cuda" or "hip".
  [[nodiscard]] const char* name() const noexcept override;
  [[nodiscard]] int device_count() const noexcept override { return devices_; }
  [[nodiscard]] std::string_view status() const noexcept override { return status_; }

  [[nodiscard]] StreamHandle create_stream(int device, StreamKind kind) override;
  void destroy_stream(StreamHandle stream) noexcept override;
  // The runtime's stream (cudaStream_t, hipStream_t); the public class has a typed accessor.
  [[nodiscard]] void* native_handle(StreamHandle stream) const noexcept override;

  [[nodiscard]] EventHandle create_event(int device) override;
  void destroy_event(EventHandle event) noexcept override;
  void record(StreamHandle stream, EventHandle event) override;
  void wait(StreamHandle stream, EventHandle event) override;
  void notify(StreamHandle stream, NotifyFn fn, void* context) override;
  [[nodiscard]] bool try_query(EventHandle event) override;
  // An event with timing, recorded on the stream; read against the device's anchor (below). Allocates the event and a
  // small record per stamp, and, the first time on a device and then every kStampAnchorAge, an anchor: a stream of the
  // backend's own, idle (so it waits for no work), and five events on it, each with a counted host synchronisation.
  [[nodiscard]] TimeStamp stamp(StreamHandle stream) override;
  [[nodiscard]] std::int64_t read_stamp(TimeStamp stamp) noexcept override;

  [[nodiscard]] void* allocate(int device, std::size_t bytes) override;
  void deallocate(int device, void* pointer) noexcept override;
  void copy(StreamHandle stream, void* destination, const void* source, std::size_t bytes,
            CopyDirection direction) override;

  // Stream capture into a graph (thread-local mode: only the recording thread's unsafe calls are refused meanwhile),
  // instantiated at the end; the graph itself is released once instantiated.
  [[nodiscard]] bool records_work() const noexcept override { return devices_ > 0; }
  void begin_recording(StreamHandle stream) override;
  [[nodiscard]] RecordedWork end_recording(StreamHandle stream) override;
  void abandon_recording(StreamHandle stream) noexcept override;
  void launch(const RecordedWork& work, StreamHandle stream) override;

 protected:
  // Finds the devices. Never throws for lack of a device or driver (device_count() is then 0). Protected: only the
  // public class of a runtime constructs one.
  GpuStreamBackend();
  // Every stream and event must have been destroyed.
  ~GpuStreamBackend() override;

  void synchronize_event(EventHandle event) override;
  void synchronize_stream(StreamHandle stream) override;

 private:
  using Api = GpuRuntimeApi<Runtime>;  // Runtime's traits plus the helpers built on them (gpu_stream_backend_impl.h)

  void check_device(int device, const char* call) const;

  // Traces: a timing event of a device whose completion time on the steady clock is known to within a few
  // microseconds (gpu_stream_backend_impl.h says how), and the anchor of each
  // device now (null until its first stamp). Stamps keep the anchor they were taken against (shared), so an anchor
  // replaced every kStampAnchorAge lives until its last stamp is read. Guarded by anchors_mutex_.
  struct Anchor;
  [[nodiscard]] std::shared_ptr<const Anchor> anchor(int device);
  std::mutex anchors_mutex_;
  std::vector<std::shared_ptr<const Anchor>> anchors_;

  int devices_ = 0;
  int count_status_ = 0;  // get_device_count's status when it failed (for the no-device StreamError)
  std::string status_;
  std::unique_ptr<NotificationPool> pool_;  // callback records; outlives every callback (streams drain first)
};

}  // namespace depengine::detail
