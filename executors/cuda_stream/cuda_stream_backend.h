// CudaStreamBackend: StreamBackend over the CUDA runtime API (executors/stream/stream_backend.h has the contract).
//
// Mapping, one runtime call per operation:
//   create_stream  cudaSetDevice + cudaStreamCreateWithFlags(cudaStreamNonBlocking)  (never syncs with stream 0)
//   create_event   cudaSetDevice + cudaEventCreateWithFlags(cudaEventDisableTiming)
//   record         cudaSetDevice(stream's device) + cudaEventRecord
//   wait           cudaStreamWaitEvent(stream, event, 0)                               (cross-device allowed)
//   notify         cudaStreamAddCallback                                               (see below)
//   try_query      cudaEventQuery (cudaErrorNotReady -> false)
//   synchronize    cudaEventSynchronize / cudaStreamSynchronize
//   allocate/free  cudaSetDevice + cudaMalloc / cudaFree                               (not stream-ordered)
//   copy           cudaSetDevice + cudaMemcpyAsync
// User device work goes on native_handle(stream) (a cudaStream_t; cuda_stream() gives it typed). Launching a kernel
// there needs the stream's device current on the launching thread: the executor sets it.
//
// Notifications use cudaStreamAddCallback, not cudaLaunchHostFunc: after a device error cudaLaunchHostFunc's
// function is never called (its documentation says so), which would leave the executor waiting for ever for an op's
// completion; cudaStreamAddCallback's callback runs exactly once and receives the error, which becomes the
// StreamError passed to NotifyFn. (CUDA marks cudaStreamAddCallback "slated for eventual deprecation"; if it goes,
// switch to cudaLaunchHostFunc plus an event query on a poller thread.) A callback must not call the CUDA API, so
// the error's message comes from a table of cudaGetErrorName/cudaGetErrorString filled at construction.
//
// No device: the constructor never throws for a missing GPU or driver. cudaGetDeviceCount's failure
// (cudaErrorNoDevice, cudaErrorInsufficientDriver, or any other) makes device_count() 0, is cleared from the
// thread's last-error state, and is kept for status() and for the StreamError that any call naming a device throws
// ("no CUDA device: ...").
//
// Errors: a failing call throws StreamError("cuda", "<runtime call>", status, "<cudaGetErrorString>
// (<cudaGetErrorName> = <code>)") and clears the thread's last error (a sticky error stays sticky). Asynchronous
// errors (a faulting kernel) are sticky for the whole device context: every later query, synchronize and callback
// on that device reports them.
//
// Current device: every call that names a device (including record and copy, for the stream's device) makes it the
// calling thread's current device (cudaSetDevice, a thread-local switch) and leaves it so.
//
// Thread safety: as StreamBackend; any thread except CUDA callback threads. Cost: one runtime call per operation
// (two with cudaSetDevice). Allocation: create_stream (a 16-byte record), notify only while its callback-record
// pool grows to the number of notifications in flight (then recycled), error paths.
//
// Implementation: detail::GpuStreamBackend<detail::CudaRuntime> (executors/stream/detail/gpu_stream_backend.h), the
// template the HIP backend shares; detail::CudaRuntime, the traits that name the CUDA calls above, is defined in
// cuda_stream_backend.cpp, the only file that includes CUDA's headers.
#pragma once

#include <depengine/executors/stream/detail/gpu_stream_backend.h>
#include <depengine/executors/stream/stream_backend.h>

struct CUstream_st;  // cudaStream_t is CUstream_st* (driver_types.h); declared here to keep CUDA headers out

namespace depengine {

namespace detail {
struct CudaRuntime;  // the traits (gpu_runtime.h), defined in cuda_stream_backend.cpp
// Instantiated once, in cuda_stream_backend.cpp: no user of this header could (it lacks the traits).
extern template class GpuStreamBackend<CudaRuntime>;
}  // namespace detail

// StreamBackend's functions (create_stream, record, wait, notify, try_query, synchronize, allocate, copy, ...) are
// GpuStreamBackend's, mapped as above.
class CudaStreamBackend final : public detail::GpuStreamBackend<detail::CudaRuntime> {
 public:
  // Finds the devices. Never throws for lack of a device or driver (device_count() is then 0).
  CudaStreamBackend();
  // Every stream and event must have been destroyed.
  ~CudaStreamBackend() override;

  // The stream as a cudaStream_t.
  [[nodiscard]] static CUstream_st* cuda_stream(StreamHandle stream) noexcept;
};

}  // namespace depengine
