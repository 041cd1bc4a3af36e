#include <cuda_runtime_api.h>

#include <initializer_list>
#include <stdexcept>
#include <string>

#include "examples/common/dense_kernels_cuda.h"

namespace depengine::examples::cuda {
namespace {

constexpr int kThreads = 256;  // per block, for every kernel; the softmax reduction's tree assumes a power of two
static_assert((kThreads & (kThreads - 1)) == 0, "the softmax stats tree halves kThreads down to 1");

cudaStream_t as_stream(void* stream) { return static_cast<cudaStream_t>(stream); }

unsigned blocks_for(long long n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

void require_sizes(const char* function, std::initializer_list<int> sizes) {
  for (const int size : sizes) {
    if (size < 0) {
      throw std::invalid_argument(std::string("depengine::examples::cuda::") + function + ": negative size " +
                                  std::to_string(size));
    }
  }
}

// Turns a launch's status into the exception the header promises. cudaGetLastError also clears a non-sticky error,
// so one failure is reported once.
void check_launch(const char* kernel) {
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string("depengine::examples::cuda: kernel ") + kernel +
                             " failed to launch: " + cudaGetErrorString(status));
  }
}

// The dz of dense_backward, recomputed wherever it is read (see the host version).
__device__ float dz_at(const float* y, const float* dy, long long index, bool relu) {
  return relu && !(y[index] > 0.0f) ? 0.0f : dy[index];
}

// One thread per y element; sums b + x0*w0 + x1*w1 + ... in k order, as the host does.
__global__ void dense_forward_kernel(const float* x, const float* w, const float* b, float* y, int batch, int in,
                                     int out, bool relu) {
  const long long index = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= static_cast<long long>(batch) * out) return;
  const long long r = index / out;
  const int j = static_cast<int>(index % out);
  float acc = b[j];
  for (int k = 0; k < in; ++k) acc += x[r * in + k] * w[static_cast<long long>(k) * out + j];
  y[index] = relu && !(acc > 0.0f) ? 0.0f : acc;
}

// One thread per dw element, summing over the rows in order.
__global__ void dense_backward_dw_kernel(const float* x, const float* y, const float* dy, float* dw, int batch, int in,
                                         int out, bool relu) {
  const long long index = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= static_cast<long long>(in) * out) return;
  const int k = static_cast<int>(index / out);
  const int j = static_cast<int>(index % out);
  float acc = 0.0f;
  for (int r = 0; r < batch; ++r) {
    acc += x[static_cast<long long>(r) * in + k] * dz_at(y, dy, static_cast<long long>(r) * out + j, relu);
  }
  dw[index] = acc;
}

// One thread per db element, summing over the rows in order: a fixed-order reduction without atomics.
__global__ void dense_backward_db_kernel(const float* y, const float* dy, float* db, int batch, int out, bool relu) {
  const int j = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (j >= out) return;
  float acc = 0.0f;
  for (int r = 0; r < batch; ++r) acc += dz_at(y, dy, static_cast<long long>(r) * out + j, relu);
  db[j] = acc;
}

// One thread per dx element, summing over the outputs in order.
__global__ void dense_backward_dx_kernel(const float* w, const float* y, const float* dy, float* dx, int batch, int in,
                                         int out, bool relu) {
  const long long index = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= static_cast<long long>(batch) * in) return;
  const long long r = index / in;
  const int k = static_cast<int>(index % in);
  float acc = 0.0f;
  for (int j = 0; j < out; ++j) acc += dz_at(y, dy, r * out + j, relu) * w[static_cast<long long>(k) * out + j];
  dx[index] = acc;
}

// One block of kThreads. Thread t handles rows t, t + kThreads, ... and keeps its own loss and hit count; a tree over
// shared memory then sums them in a fixed shape, so the stats are the same bits every run (atomics would not be).
__global__ void softmax_cross_entropy_kernel(const float* logits, const std::int32_t* labels, float* dlogits,
                                             float* stats, int batch, int classes, float grad_scale) {
  __shared__ double loss_part[kThreads];
  __shared__ int hits_part[kThreads];
  const int t = static_cast<int>(threadIdx.x);
  double loss = 0.0;
  int hits = 0;
  for (int r = t; r < batch; r += kThreads) {
    const float* l = logits + static_cast<long long>(r) * classes;
    float* d = dlogits + static_cast<long long>(r) * classes;
    const int label = labels[r];
    const bool label_valid = label >= 0 && label < classes;
    int argmax = 0;
    for (int j = 1; j < classes; ++j) argmax = l[j] > l[argmax] ? j : argmax;  // strict: ties keep the lowest index
    const float max = l[argmax];
    float sum = 0.0f;
    for (int j = 0; j < classes; ++j) sum += expf(l[j] - max);
    loss += label_valid ? static_cast<double>(logf(sum) - (l[label] - max)) : nan("");
    hits += label_valid && argmax == label ? 1 : 0;
    // As on the host, everything but l[j] is read before d[j] is written, so dlogits may alias logits.
    const float inv_sum = 1.0f / sum;
    for (int j = 0; j < classes; ++j) {
      const float p = expf(l[j] - max) * inv_sum;
      d[j] = (p - (j == label ? 1.0f : 0.0f)) * grad_scale;
    }
  }
  loss_part[t] = loss;
  hits_part[t] = hits;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (t < half) {
      loss_part[t] += loss_part[t + half];
      hits_part[t] += hits_part[t + half];
    }
    __syncthreads();
  }
  if (t == 0) {
    stats[0] = static_cast<float>(loss_part[0]);
    stats[1] = static_cast<float>(hits_part[0]);
  }
}

__global__ void sgd_kernel(float* w, const float* g, int n, float learning_rate) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) w[i] -= learning_rate * g[i];
}

__global__ void add_into_kernel(float* dst, const float* src, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) dst[i] += src[i];
}

}  // namespace

void dense_forward(const float* x, const float* w, const float* b, float* y, int batch, int in, int out, bool relu,
                   void* stream) {
  require_sizes("dense_forward", {batch, in, out});
  const long long n = static_cast<long long>(batch) * out;
  if (n == 0) return;
  dense_forward_kernel<<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(x, w, b, y, batch, in, out, relu);
  check_launch("dense_forward");
}

void dense_backward(const float* x, const float* w, const float* y, const float* dy, float* dw, float* db, float* dx,
                    int batch, int in, int out, bool relu, void* stream) {
  require_sizes("dense_backward", {batch, in, out});
  const cudaStream_t s = as_stream(stream);
  if (const long long n = static_cast<long long>(in) * out; n > 0) {
    dense_backward_dw_kernel<<<blocks_for(n), kThreads, 0, s>>>(x, y, dy, dw, batch, in, out, relu);
    check_launch("dense_backward (dw)");
  }
  if (out > 0) {
    dense_backward_db_kernel<<<blocks_for(out), kThreads, 0, s>>>(y, dy, db, batch, out, relu);
    check_launch("dense_backward (db)");
  }
  if (const long long n = static_cast<long long>(batch) * in; dx != nullptr && n > 0) {
    dense_backward_dx_kernel<<<blocks_for(n), kThreads, 0, s>>>(w, y, dy, dx, batch, in, out, relu);
    check_launch("dense_backward (dx)");
  }
}

void softmax_cross_entropy(const float* logits, const std::int32_t* labels, float* dlogits, float* stats, int batch,
                           int classes, float grad_scale, void* stream) {
  require_sizes("softmax_cross_entropy", {batch, classes});
  if (classes < 1) throw std::invalid_argument("depengine::examples::cuda::softmax_cross_entropy: no classes");
  softmax_cross_entropy_kernel<<<1, kThreads, 0, as_stream(stream)>>>(logits, labels, dlogits, stats, batch, classes,
                                                                      grad_scale);
  check_launch("softmax_cross_entropy");
}

void sgd(float* w, const float* g, int n, float learning_rate, void* stream) {
  require_sizes("sgd", {n});
  if (n == 0) return;
  sgd_kernel<<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(w, g, n, learning_rate);
  check_launch("sgd");
}

void add_into(float* dst, const float* src, int n, void* stream) {
  require_sizes("add_into", {n});
  if (n == 0) return;
  add_into_kernel<<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(dst, src, n);
  check_launch("add_into");
}

int cuda_device_count() noexcept {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // clear it: the next launch's check must not report it
    return 0;
  }
  return count;
}

}  // namespace depengine::examples::cuda
