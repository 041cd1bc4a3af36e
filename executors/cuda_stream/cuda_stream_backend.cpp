// CudaRuntime, the CUDA traits of GpuStreamBackend (executors/stream/detail/gpu_runtime.h has the contract), and the
// one instantiation of the template for CUDA. The only translation unit that includes CUDA's headers.
#include <cuda_runtime_api.h>

#include <cstddef>

#include <depengine/executors/cuda_stream/cuda_stream_backend.h>
#include <depengine/executors/stream/detail/gpu_runtime.h>
#include <depengine/executors/stream/detail/gpu_stream_backend_impl.h>

namespace depengine {
namespace detail {

// Each function forwards to the CUDA call it is named after; the choices (flags, order, error clearing) are the
// template's.
struct CudaRuntime {
  using Status = cudaError_t;
  using Stream = cudaStream_t;
  using Event = cudaEvent_t;
  using MemcpyKind = cudaMemcpyKind;
  using DeviceProp = cudaDeviceProp;
  using CaptureMode = cudaStreamCaptureMode;
  using Graph = cudaGraph_t;
  using GraphExec = cudaGraphExec_t;

  static constexpr Status kSuccess = cudaSuccess;
  static constexpr Status kNotReady = cudaErrorNotReady;
  static constexpr Status kInvalidDevice = cudaErrorInvalidDevice;
  static constexpr unsigned kStreamNonBlocking = cudaStreamNonBlocking;
  static constexpr unsigned kEventDisableTiming = cudaEventDisableTiming;
  static constexpr unsigned kEventDefault = cudaEventDefault;
  static constexpr MemcpyKind kMemcpyHostToDevice = cudaMemcpyHostToDevice;
  static constexpr MemcpyKind kMemcpyDeviceToHost = cudaMemcpyDeviceToHost;
  static constexpr MemcpyKind kMemcpyDeviceToDevice = cudaMemcpyDeviceToDevice;
  static constexpr CaptureMode kCaptureModeThreadLocal = cudaStreamCaptureModeThreadLocal;
  // cudaError_t values in use are < 1000 (cudaErrorUnknown = 999).
  static constexpr int kErrorCodes = 1000;
  // Messages always give text and name, even for an unused code, where both are "unrecognized error code".
  static constexpr bool kErrorStringMayBeName = false;

  static constexpr GpuRuntimeNames kNames{
      .backend = "cuda",
      .backend_class = "CudaStreamBackend",
      .no_device = "no CUDA device",
      .unrecognized_error = "unrecognized CUDA error",
      .get_device_count = "cudaGetDeviceCount",
      .set_device = "cudaSetDevice",
      .stream_create_with_flags = "cudaStreamCreateWithFlags",
      .event_create_with_flags = "cudaEventCreateWithFlags",
      .event_record = "cudaEventRecord",
      .stream_wait_event = "cudaStreamWaitEvent",
      .stream_add_callback = "cudaStreamAddCallback",
      .callback_error = "cudaStreamAddCallback (asynchronous error)",
      .event_query = "cudaEventQuery",
      .event_synchronize = "cudaEventSynchronize",
      .event_elapsed_time = "cudaEventElapsedTime",
      .stream_synchronize = "cudaStreamSynchronize",
      .device_malloc = "cudaMalloc",
      .memcpy_async = "cudaMemcpyAsync",
      .stream_begin_capture = "cudaStreamBeginCapture",
      .stream_end_capture = "cudaStreamEndCapture",
      .graph_instantiate = "cudaGraphInstantiate",
      .graph_launch = "cudaGraphLaunch",
  };

  static const char* error_name(Status status) { return cudaGetErrorName(status); }
  static const char* error_string(Status status) { return cudaGetErrorString(status); }
  static Status get_last_error() { return cudaGetLastError(); }
  static Status get_device_count(int* count) { return cudaGetDeviceCount(count); }
  static Status get_device_properties(DeviceProp* properties, int device) {
    return cudaGetDeviceProperties(properties, device);
  }
  static Status runtime_get_version(int* version) { return cudaRuntimeGetVersion(version); }
  static Status driver_get_version(int* version) { return cudaDriverGetVersion(version); }
  static Status set_device(int device) { return cudaSetDevice(device); }

  static Status stream_create_with_flags(Stream* stream, unsigned flags) {
    return cudaStreamCreateWithFlags(stream, flags);
  }
  static Status stream_destroy(Stream stream) { return cudaStreamDestroy(stream); }
  static Status stream_synchronize(Stream stream) { return cudaStreamSynchronize(stream); }
  static Status event_create_with_flags(Event* event, unsigned flags) { return cudaEventCreateWithFlags(event, flags); }
  static Status event_destroy(Event event) { return cudaEventDestroy(event); }
  static Status event_record(Event event, Stream stream) { return cudaEventRecord(event, stream); }
  static Status stream_wait_event(Stream stream, Event event, unsigned flags) {
    return cudaStreamWaitEvent(stream, event, flags);
  }
  static Status event_query(Event event) { return cudaEventQuery(event); }
  static Status event_synchronize(Event event) { return cudaEventSynchronize(event); }
  static Status event_elapsed_time(float* milliseconds, Event start, Event end) {
    return cudaEventElapsedTime(milliseconds, start, end);
  }

  // cudaStreamAddCallback with OnStatus as the callback. The trampoline carries CUDART_CB, CUDA's callback calling
  // convention (empty on Linux, __stdcall on Windows), which the shared template cannot spell.
  template <void (*OnStatus)(Status, void*) noexcept>
  static Status stream_add_callback(Stream stream, void* user_data, unsigned flags) {
    return cudaStreamAddCallback(stream, &trampoline<OnStatus>, user_data, flags);
  }

  static Status device_malloc(void** pointer, std::size_t bytes) { return cudaMalloc(pointer, bytes); }
  static Status device_free(void* pointer) { return cudaFree(pointer); }
  static Status memcpy_async(void* destination, const void* source, std::size_t bytes, MemcpyKind kind, Stream stream) {
    return cudaMemcpyAsync(destination, source, bytes, kind, stream);
  }
  static Status stream_begin_capture(Stream stream, CaptureMode mode) { return cudaStreamBeginCapture(stream, mode); }
  static Status stream_end_capture(Stream stream, Graph* graph) { return cudaStreamEndCapture(stream, graph); }
  static Status graph_instantiate(GraphExec* exec, Graph graph) { return cudaGraphInstantiate(exec, graph, 0); }
  static Status graph_destroy(Graph graph) { return cudaGraphDestroy(graph); }
  static Status graph_launch(GraphExec exec, Stream stream) { return cudaGraphLaunch(exec, stream); }
  static Status graph_exec_destroy(GraphExec exec) { return cudaGraphExecDestroy(exec); }

 private:
  template <void (*OnStatus)(Status, void*) noexcept>
  static void CUDART_CB trampoline(cudaStream_t /*stream*/, cudaError_t status, void* user_data) {
    OnStatus(status, user_data);
  }
};

template class GpuStreamBackend<CudaRuntime>;

}  // namespace detail

CudaStreamBackend::CudaStreamBackend() = default;

CudaStreamBackend::~CudaStreamBackend() = default;

CUstream_st* CudaStreamBackend::cuda_stream(StreamHandle stream) noexcept {
  return detail::GpuRuntimeApi<detail::CudaRuntime>::runtime_stream(stream);
}

}  // namespace depengine
