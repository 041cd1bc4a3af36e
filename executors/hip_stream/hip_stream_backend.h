// HipStreamBackend: StreamBackend over the HIP runtime API (executors/stream/stream_backend.h has the contract), the
// CUDA backend's twin (executors/cuda_stream/cuda_stream_backend.h explains the choices; HIP mirrors CUDA's stream
// semantics call for call).
//
// Mapping, one runtime call per operation:
//   create_stream  hipSetDevice + hipStreamCreateWithFlags(hipStreamNonBlocking)
//   create_event   hipSetDevice + hipEventCreateWithFlags(hipEventDisableTiming)
//   record         hipSetDevice(stream's device) + hipEventRecord
//   wait           hipStreamWaitEvent(stream, event, 0)
//   notify         hipStreamAddCallback (runs exactly once and receives the error; HIP, like CUDA, documents no such
//                  promise for hipLaunchHostFunc after a device error, and the executor must hear of every op)
//   try_query      hipEventQuery (hipErrorNotReady -> false, and cleared from the thread's last error: HIP records it)
//   synchronize    hipEventSynchronize / hipStreamSynchronize
//   allocate/free  hipSetDevice + hipMalloc / hipFree                               (not stream-ordered)
//   copy           hipSetDevice + hipMemcpyAsync
// User device work goes on native_handle(stream) (a hipStream_t; hip_stream() gives it typed), with the stream's
// device current on the launching thread.
//
// Build: this file and its source are plain C++ against the HIP runtime headers (__HIP_PLATFORM_AMD__), linked with
// libamdhip64; the backend launches no kernels, so it needs no HIP compiler. Debian bookworm's libamdhip64 (5.2)
// runs on AMD GPUs only: HIP's NVIDIA mode does not build against CUDA 13 (docs/architecture.md §7).
//
// No device: the constructor never throws for a missing GPU. hipGetDeviceCount's failure (hipErrorNoDevice when
// there is no GPU or no /dev/kfd, as on CI, or any other) makes device_count() 0, is cleared from the thread's
// last-error state, and is kept for status() and for the StreamError that any call naming a device throws
// ("no HIP device: ..."). A callback must not call the HIP API, so error messages come from a table of
// hipGetErrorName/hipGetErrorString filled at construction (HIP 5.2's hipGetErrorString returns the name).
//
// Errors, current device, thread safety, cost and allocation: as CudaStreamBackend, with hip* for cuda*.
//
// Implementation: detail::GpuStreamBackend<detail::HipRuntime> (executors/stream/detail/gpu_stream_backend.h), the
// template the CUDA backend shares; detail::HipRuntime, the traits that name the HIP calls above, is defined in
// hip_stream_backend.cpp, the only file that includes HIP's headers.
#pragma once

#include <depengine/executors/stream/detail/gpu_stream_backend.h>
#include <depengine/executors/stream/stream_backend.h>

struct ihipStream_t;  // hipStream_t is ihipStream_t* (hip_runtime_api.h); declared here to keep HIP headers out

namespace depengine {

namespace detail {
struct HipRuntime;  // the traits (gpu_runtime.h), defined in hip_stream_backend.cpp
// Instantiated once, in hip_stream_backend.cpp: no user of this header could (it lacks the traits).
extern template class GpuStreamBackend<HipRuntime>;
}  // namespace detail

// StreamBackend's functions (create_stream, record, wait, notify, try_query, synchronize, allocate, copy, ...) are
// GpuStreamBackend's, mapped as above.
class HipStreamBackend final : public detail::GpuStreamBackend<detail::HipRuntime> {
 public:
  // Finds the devices. Never throws for lack of a device or driver (device_count() is then 0).
  HipStreamBackend();
  // Every stream and event must have been destroyed.
  ~HipStreamBackend() override;

  // The stream as a hipStream_t.
  [[nodiscard]] static ihipStream_t* hip_stream(StreamHandle stream) noexcept;
};

}  // namespace depengine
