// HipRuntime, the HIP traits of GpuStreamBackend (executors/stream/detail/gpu_runtime.h has the contract), and the
// one instantiation of the template for HIP. The only translation unit that includes HIP's headers.
#include <hip/hip_runtime_api.h>

#include <cstddef>

#include <depengine/executors/hip_stream/hip_stream_backend.h>
#include <depengine/executors/stream/detail/gpu_runtime.h>
#include <depengine/executors/stream/detail/gpu_stream_backend_impl.h>

namespace depengine {
namespace detail {

// Each function forwards to the HIP call it is named after; the choices (flags, order, error clearing) are the
// template's.
struct HipRuntime {
  using Status = hipError_t;
  using Stream = hipStream_t;
  using Event = hipEvent_t;
  using MemcpyKind = hipMemcpyKind;
  using DeviceProp = hipDeviceProp_t;
  using CaptureMode = hipStreamCaptureMode;
  using Graph = hipGraph_t;
  using GraphExec = hipGraphExec_t;

  static constexpr Status kSuccess = hipSuccess;
  static constexpr Status kNotReady = hipErrorNotReady;
  static constexpr Status kInvalidDevice = hipErrorInvalidDevice;
  static constexpr unsigned kStreamNonBlocking = hipStreamNonBlocking;
  static constexpr unsigned kEventDisableTiming = hipEventDisableTiming;
  static constexpr unsigned kEventDefault = hipEventDefault;
  static constexpr MemcpyKind kMemcpyHostToDevice = hipMemcpyHostToDevice;
  static constexpr MemcpyKind kMemcpyDeviceToHost = hipMemcpyDeviceToHost;
  static constexpr MemcpyKind kMemcpyDeviceToDevice = hipMemcpyDeviceToDevice;
  static constexpr CaptureMode kCaptureModeThreadLocal = hipStreamCaptureModeThreadLocal;
  // hipError_t values in use are < 1100 (hipErrorRuntimeOther = 1053).
  static constexpr int kErrorCodes = 1100;
  // HIP 5.2's hipGetErrorString returns the name: messages then read "hipErrorNoDevice = 100".
  static constexpr bool kErrorStringMayBeName = true;

  static constexpr GpuRuntimeNames kNames{
      .backend = "hip",
      .backend_class = "HipStreamBackend",
      .no_device = "no HIP device",
      .unrecognized_error = "unrecognized HIP error",
      .get_device_count = "hipGetDeviceCount",
      .set_device = "hipSetDevice",
      .stream_create_with_flags = "hipStreamCreateWithFlags",
      .event_create_with_flags = "hipEventCreateWithFlags",
      .event_record = "hipEventRecord",
      .stream_wait_event = "hipStreamWaitEvent",
      .stream_add_callback = "hipStreamAddCallback",
      .callback_error = "hipStreamAddCallback (asynchronous error)",
      .event_query = "hipEventQuery",
      .event_synchronize = "hipEventSynchronize",
      .event_elapsed_time = "hipEventElapsedTime",
      .stream_synchronize = "hipStreamSynchronize",
      .device_malloc = "hipMalloc",
      .memcpy_async = "hipMemcpyAsync",
      .stream_begin_capture = "hipStreamBeginCapture",
      .stream_end_capture = "hipStreamEndCapture",
      .graph_instantiate = "hipGraphInstantiate",
      .graph_launch = "hipGraphLaunch",
  };

  static const char* error_name(Status status) { return hipGetErrorName(status); }
  static const char* error_string(Status status) { return hipGetErrorString(status); }
  static Status get_last_error() { return hipGetLastError(); }
  static Status get_device_count(int* count) { return hipGetDeviceCount(count); }
  static Status get_device_properties(DeviceProp* properties, int device) {
    return hipGetDeviceProperties(properties, device);
  }
  static Status runtime_get_version(int* version) { return hipRuntimeGetVersion(version); }
  static Status driver_get_version(int* version) { return hipDriverGetVersion(version); }
  static Status set_device(int device) { return hipSetDevice(device); }

  static Status stream_create_with_flags(Stream* stream, unsigned flags) {
    return hipStreamCreateWithFlags(stream, flags);
  }
  static Status stream_destroy(Stream stream) { return hipStreamDestroy(stream); }
  static Status stream_synchronize(Stream stream) { return hipStreamSynchronize(stream); }
  static Status event_create_with_flags(Event* event, unsigned flags) { return hipEventCreateWithFlags(event, flags); }
  static Status event_destroy(Event event) { return hipEventDestroy(event); }
  static Status event_record(Event event, Stream stream) { return hipEventRecord(event, stream); }
  static Status stream_wait_event(Stream stream, Event event, unsigned flags) {
    return hipStreamWaitEvent(stream, event, flags);
  }
  static Status event_query(Event event) { return hipEventQuery(event); }
  static Status event_synchronize(Event event) { return hipEventSynchronize(event); }
  static Status event_elapsed_time(float* milliseconds, Event start, Event end) {
    return hipEventElapsedTime(milliseconds, start, end);
  }

  // hipStreamAddCallback with OnStatus as the callback, through a trampoline of hipStreamCallback_t's exact type
  // (HIP declares no calling-convention macro, unlike CUDA's CUDART_CB).
  template <void (*OnStatus)(Status, void*) noexcept>
  static Status stream_add_callback(Stream stream, void* user_data, unsigned flags) {
    return hipStreamAddCallback(stream, &trampoline<OnStatus>, user_data, flags);
  }

  static Status device_malloc(void** pointer, std::size_t bytes) { return hipMalloc(pointer, bytes); }
  static Status device_free(void* pointer) { return hipFree(pointer); }
  static Status memcpy_async(void* destination, const void* source, std::size_t bytes, MemcpyKind kind, Stream stream) {
    return hipMemcpyAsync(destination, source, bytes, kind, stream);
  }
  static Status stream_begin_capture(Stream stream, CaptureMode mode) { return hipStreamBeginCapture(stream, mode); }
  static Status stream_end_capture(Stream stream, Graph* graph) { return hipStreamEndCapture(stream, graph); }
  static Status graph_instantiate(GraphExec* exec, Graph graph) {
    return hipGraphInstantiate(exec, graph, nullptr, nullptr, 0);
  }
  static Status graph_destroy(Graph graph) { return hipGraphDestroy(graph); }
  static Status graph_launch(GraphExec exec, Stream stream) { return hipGraphLaunch(exec, stream); }
  static Status graph_exec_destroy(GraphExec exec) { return hipGraphExecDestroy(exec); }

 private:
  template <void (*OnStatus)(Status, void*) noexcept>
  static void trampoline(hipStream_t /*stream*/, hipError_t status, void* user_data) {
    OnStatus(status, user_data);
  }
};

template class GpuStreamBackend<HipRuntime>;

}  // namespace detail

HipStreamBackend::HipStreamBackend() = default;

HipStreamBackend::~HipStreamBackend() = default;

ihipStream_t* HipStreamBackend::hip_stream(StreamHandle stream) noexcept {
  return detail::GpuRuntimeApi<detail::HipRuntime>::runtime_stream(stream);
}

}  // namespace depengine
