// GpuRuntime: the traits struct through which a CUDA-like runtime API (CUDA, HIP) serves GpuStreamBackend
// (gpu_stream_backend.h): the runtime's types, a few constants, the strings depengine shows, and static functions that
// forward one to one to the runtime's calls.
//
// Why: the CUDA and HIP backends are one design over two spellings of one API (docs/architecture.md §5; HIP mirrors
// CUDA's stream semantics call for call). The template holds every decision once — which flags, which calls in which
// order, which errors are cleared from the thread's last-error state, how a status becomes a StreamError — and a traits
// struct only renames. So a traits function does nothing but the call it is named after (no flag choices, no error
// clearing, no fallbacks): a reviewer checks each against the runtime's documentation by eye, and every behavioural
// difference between the runtimes is one of the named members below, never an #if in the template.
//
// The differences a runtime may express, and the values CUDA and HIP give them:
//   kErrorCodes             the size of the error-text table: one more than the largest status in use
//                           (CUDA 1000: cudaErrorUnknown = 999; HIP 1100: hipErrorRuntimeOther = 1053)
//   kErrorStringMayBeName   whether the runtime's error string may be just the error's name, in which case a message
//                           says the name once (HIP: 5.2's hipGetErrorString returns the name; CUDA: never)
//   stream_add_callback<F>  registers F through a trampoline that carries the runtime's callback calling convention
//                           (CUDA: CUDART_CB, empty on Linux, __stdcall on Windows; HIP: none), which the template
//                           cannot spell without the runtime's headers
//   kNames                  every string: backend name, class name for argument errors, the "no device" and
//                           "unrecognized error" texts, and the name of each runtime call a StreamError reports
//
// Headers: a traits struct is defined in its runtime's source file (executors/cuda_stream/cuda_stream_backend.cpp,
// executors/hip_stream/hip_stream_backend.cpp), the one translation unit that includes that runtime's headers. This
// header includes neither runtime, and neither runtime's headers ever meet the other's.
//
// Thread safety: as the runtime calls the functions forward to (all callable from any thread; none from a stream
// callback, which is why error texts are read into a table up front). Ownership: none; a traits struct has no state.
// Failure: functions return the runtime's status and never throw. Cost: each is one inline forwarding call.
#pragma once

#include <concepts>
#include <cstddef>
#include <type_traits>

namespace depengine::detail {

// A string with static storage duration, checked at compile time. The constructor is consteval, so only a constant
// expression converts (a string literal; never a pointer into a local buffer), which keeps the promise StreamError
// needs of its `backend` and `call` arguments. No default constructor, so a traits struct that leaves a name out of
// its kNames initializer does not compile (rather than reporting a null name at run time).
class StaticName {
 public:
  // Implicit on purpose: kNames is written {.backend = "cuda", ...}.
  consteval StaticName(const char* text) noexcept : text_(text) {}  // NOLINT: implicit by design

  [[nodiscard]] constexpr const char* c_str() const noexcept { return text_; }

 private:
  const char* text_;
};

// The strings a GPU backend shows. Examples are CUDA's.
struct GpuRuntimeNames {
  StaticName backend;             // name() and StreamError::backend(): "cuda"
  StaticName backend_class;       // prefix of std::invalid_argument texts: "CudaStreamBackend"
  StaticName no_device;           // how status() and the no-device StreamError start: "no CUDA device"
  StaticName unrecognized_error;  // the text of a status the runtime cannot name: "unrecognized CUDA error"
  // The runtime calls a StreamError names as call(), one per function of the traits that can fail:
  StaticName get_device_count;          // "cudaGetDeviceCount"
  StaticName set_device;                // "cudaSetDevice"
  StaticName stream_create_with_flags;  // "cudaStreamCreateWithFlags"
  StaticName event_create_with_flags;   // "cudaEventCreateWithFlags"
  StaticName event_record;              // "cudaEventRecord"
  StaticName stream_wait_event;         // "cudaStreamWaitEvent"
  StaticName stream_add_callback;       // "cudaStreamAddCallback"
  StaticName callback_error;            // a callback's error status: "cudaStreamAddCallback (asynchronous error)"
  StaticName event_query;               // "cudaEventQuery"
  StaticName event_synchronize;         // "cudaEventSynchronize"
  StaticName event_elapsed_time;        // "cudaEventElapsedTime"
  StaticName stream_synchronize;        // "cudaStreamSynchronize"
  StaticName device_malloc;             // "cudaMalloc"
  StaticName memcpy_async;              // "cudaMemcpyAsync"
  StaticName stream_begin_capture;      // "cudaStreamBeginCapture"
  StaticName stream_end_capture;        // "cudaStreamEndCapture"
  StaticName graph_instantiate;         // "cudaGraphInstantiate"
  StaticName graph_launch;              // "cudaGraphLaunch"
};

// What GpuStreamBackend<R> requires of R. Each function is named after the runtime call it forwards to, with that
// call's arguments (CUDA's in the comments); `unsigned` flags take the constants below.
template <class R>
concept GpuRuntime = requires(typename R::Status status, typename R::Stream stream, typename R::Event event,
                              typename R::MemcpyKind kind, typename R::Stream* new_stream, typename R::Event* new_event,
                              typename R::DeviceProp* properties, int* out, void** memory, void* pointer,
                              const void* source, std::size_t bytes, int device, unsigned flags, float* milliseconds,
                              typename R::Graph graph, typename R::Graph* new_graph, typename R::GraphExec exec,
                              typename R::GraphExec* new_exec) {
  // Types: cudaError_t (an enum), cudaStream_t and cudaEvent_t (pointers), cudaMemcpyKind, cudaDeviceProp,
  // cudaStreamCaptureMode, cudaGraph_t and cudaGraphExec_t (pointers).
  requires std::is_enum_v<typename R::Status>;
  requires std::is_pointer_v<typename R::Stream> && std::is_pointer_v<typename R::Event>;
  requires std::is_pointer_v<typename R::Graph> && std::is_pointer_v<typename R::GraphExec>;
  { properties->name } -> std::convertible_to<const char*>;
  // Constants.
  { R::kSuccess } -> std::convertible_to<typename R::Status>;        // cudaSuccess
  { R::kNotReady } -> std::convertible_to<typename R::Status>;       // cudaErrorNotReady
  { R::kInvalidDevice } -> std::convertible_to<typename R::Status>;  // cudaErrorInvalidDevice
  { R::kStreamNonBlocking } -> std::convertible_to<unsigned>;        // cudaStreamNonBlocking
  { R::kEventDisableTiming } -> std::convertible_to<unsigned>;       // cudaEventDisableTiming
  { R::kEventDefault } -> std::convertible_to<unsigned>;             // cudaEventDefault (with timing: traces)
  { R::kMemcpyHostToDevice } -> std::convertible_to<typename R::MemcpyKind>;
  { R::kMemcpyDeviceToHost } -> std::convertible_to<typename R::MemcpyKind>;
  { R::kMemcpyDeviceToDevice } -> std::convertible_to<typename R::MemcpyKind>;
  { R::kCaptureModeThreadLocal } -> std::convertible_to<typename R::CaptureMode>;  // cudaStreamCaptureModeThreadLocal
  { R::kErrorCodes } -> std::convertible_to<int>;
  { R::kErrorStringMayBeName } -> std::convertible_to<bool>;
  { R::kNames } -> std::same_as<const GpuRuntimeNames&>;
  // Errors and devices. error_name/error_string may return null for an unknown code; get_last_error also clears.
  { R::error_name(status) } -> std::same_as<const char*>;    // cudaGetErrorName
  { R::error_string(status) } -> std::same_as<const char*>;  // cudaGetErrorString
  { R::get_last_error() } -> std::same_as<typename R::Status>;
  { R::get_device_count(out) } -> std::same_as<typename R::Status>;
  { R::get_device_properties(properties, device) } -> std::same_as<typename R::Status>;
  { R::runtime_get_version(out) } -> std::same_as<typename R::Status>;
  { R::driver_get_version(out) } -> std::same_as<typename R::Status>;
  { R::set_device(device) } -> std::same_as<typename R::Status>;
  // Streams and events.
  { R::stream_create_with_flags(new_stream, flags) } -> std::same_as<typename R::Status>;
  { R::stream_destroy(stream) } -> std::same_as<typename R::Status>;
  { R::stream_synchronize(stream) } -> std::same_as<typename R::Status>;
  { R::event_create_with_flags(new_event, flags) } -> std::same_as<typename R::Status>;
  { R::event_destroy(event) } -> std::same_as<typename R::Status>;
  { R::event_record(event, stream) } -> std::same_as<typename R::Status>;
  { R::stream_wait_event(stream, event, flags) } -> std::same_as<typename R::Status>;
  { R::event_query(event) } -> std::same_as<typename R::Status>;
  { R::event_synchronize(event) } -> std::same_as<typename R::Status>;
  { R::event_elapsed_time(milliseconds, event, event) } -> std::same_as<typename R::Status>;
  // cudaStreamAddCallback(stream, <a trampoline calling F(status, user_data)>, user_data, flags): a member template
  // over the function F, checked where GpuStreamBackend names it (a concept cannot quantify over F).
  // Memory: cudaMalloc, cudaFree, cudaMemcpyAsync.
  { R::device_malloc(memory, bytes) } -> std::same_as<typename R::Status>;
  { R::device_free(pointer) } -> std::same_as<typename R::Status>;
  { R::memcpy_async(pointer, source, bytes, kind, stream) } -> std::same_as<typename R::Status>;
  // Graphs: cudaStreamBeginCapture, cudaStreamEndCapture, cudaGraphInstantiate (no flags, no error log),
  // cudaGraphDestroy, cudaGraphLaunch, cudaGraphExecDestroy.
  { R::stream_begin_capture(stream, R::kCaptureModeThreadLocal) } -> std::same_as<typename R::Status>;
  { R::stream_end_capture(stream, new_graph) } -> std::same_as<typename R::Status>;
  { R::graph_instantiate(new_exec, graph) } -> std::same_as<typename R::Status>;
  { R::graph_destroy(graph) } -> std::same_as<typename R::Status>;
  { R::graph_launch(exec, stream) } -> std::same_as<typename R::Status>;
  { R::graph_exec_destroy(exec) } -> std::same_as<typename R::Status>;
};

}  // namespace depengine::detail
