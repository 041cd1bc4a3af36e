// The examples' kernels on a CUDA stream: the same five as dense_kernels.h's host versions (dense_forward,
// dense_backward, softmax_cross_entropy, sgd, add_into), with the same arguments, shapes and meaning, plus a
// device-count query. Compiled by nvcc (dense_kernels.cu, target depengine_example_kernels_cuda, built only with
// DEPENGINE_WITH_CUDA, which defines DEPENGINE_EXAMPLES_CUDA=1 for its users); declared here without CUDA types so that
// plain C++ translation units can include it.
//
// Streams and ordering: `stream` is a cudaStream_t (null: the legacy default stream). Each function only enqueues
// kernels on it and returns without synchronising: its device writes are ordered after the work enqueued on `stream`
// before the call and before the work enqueued after it, and are visible to the host only after the stream is
// synchronised (or an event recorded after the call has completed). Every pointer except the sizes is device memory
// and must stay allocated, with its inputs unchanged, until the kernels have run.
//
// Results: equal to the host versions to float rounding (about 1e-6 relative; the test allows 1e-4), and deterministic
// run to run: no atomics, every reduction (db, the softmax stats) is a fixed-order loop or a fixed-shape tree in one
// block. Labels outside [0, classes) cannot be reported from the device: such a row contributes NaN to stats[0], no
// hit to stats[1], and its dlogits row is the softmax alone.
//
// Failure: a negative size throws std::invalid_argument before anything is enqueued. A failed launch throws
// std::runtime_error naming the kernel, with cudaGetErrorString's message; since cudaGetLastError also reports an
// earlier asynchronous failure on the device, the error may belong to previous work. Zero-sized calls enqueue nothing
// (except softmax_cross_entropy, which still writes stats).
//
// Devices and threads: kernels launch on the calling thread's current device (cudaSetDevice), which must be the one
// that owns `stream`; every buffer must be accessible from it (its own memory, a peer's with peer access enabled, or
// managed memory). Any host thread may call these, concurrently with each other.
// Cost: a launch or three per call; no allocation. Kernels are naive (one thread per output), sized for the examples.
#pragma once

#include <cstdint>

namespace depengine::examples::cuda {

void dense_forward(const float* x, const float* w, const float* b, float* y, int batch, int in, int out, bool relu,
                   void* stream);

// Three kernels (dw, db, and dx unless dx is null), all on `stream`.
void dense_backward(const float* x, const float* w, const float* y, const float* dy, float* dw, float* db, float* dx,
                    int batch, int in, int out, bool relu, void* stream);

// One block of threads strides over the rows, so the stats reduce in a fixed order; fine for the examples' batches.
void softmax_cross_entropy(const float* logits, const std::int32_t* labels, float* dlogits, float* stats, int batch,
                           int classes, float grad_scale, void* stream);

void sgd(float* w, const float* g, int n, float learning_rate, void* stream);

void add_into(float* dst, const float* src, int n, void* stream);

// The number of CUDA devices visible to this process; 0 when there is no device or driver, or on any other error
// (which is then cleared, so that it is not reported by the next launch's check).
[[nodiscard]] int cuda_device_count() noexcept;

}  // namespace depengine::examples::cuda
