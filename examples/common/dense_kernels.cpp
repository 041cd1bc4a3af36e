#include "examples/common/dense_kernels.h"

#include <cmath>
#include <cstddef>
#include <initializer_list>
#include <numbers>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>

namespace depengine::examples::host {
namespace {

void require_sizes(const char* function, std::initializer_list<int> sizes) {
  for (const int size : sizes) {
    if (size < 0) {
      throw std::invalid_argument(std::string("depengine::examples::host::") + function + ": negative size " +
                                  std::to_string(size));
    }
  }
}

// A uniform index in [0, bound) from one mt19937 draw by multiply-and-shift (Lemire): written out because
// std::uniform_int_distribution's algorithm is implementation-defined. The bias, at most bound / 2^32, is irrelevant
// at our sizes.
std::uint32_t uniform_index(std::mt19937& rng, std::uint32_t bound) {
  return static_cast<std::uint32_t>((std::uint64_t{rng()} * bound) >> 32);
}

// One standard normal deviate by Box-Muller (the cosine branch only: simpler than caching the sine pair, and the
// generator is cheap). u1 is in (0, 1], so the log is finite. Written out because std::normal_distribution's algorithm
// is implementation-defined.
double standard_normal(std::mt19937& rng) {
  constexpr double kTwoTo32 = 4294967296.0;
  const double u1 = (static_cast<double>(rng()) + 1.0) / kTwoTo32;
  const double u2 = static_cast<double>(rng()) / kTwoTo32;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

}  // namespace

void dense_forward(const float* x, const float* w, const float* b, float* y, int batch, int in, int out, bool relu) {
  require_sizes("dense_forward", {batch, in, out});
  for (int r = 0; r < batch; ++r) {
    float* y_row = y + static_cast<std::ptrdiff_t>(r) * out;
    for (int j = 0; j < out; ++j) y_row[j] = b[j];
    // k outer, j inner: w is read along its rows, and the inner loop vectorises. Each y element still sums
    // b + x0*w0 + x1*w1 + ... in k order, the order the CUDA kernel uses.
    for (int k = 0; k < in; ++k) {
      const float xv = x[static_cast<std::ptrdiff_t>(r) * in + k];
      const float* w_row = w + static_cast<std::ptrdiff_t>(k) * out;
      for (int j = 0; j < out; ++j) y_row[j] += xv * w_row[j];
    }
    if (relu) {
      for (int j = 0; j < out; ++j) y_row[j] = y_row[j] > 0.0f ? y_row[j] : 0.0f;
    }
  }
}

void dense_backward(const float* x, const float* w, const float* y, const float* dy, float* dw, float* db, float* dx,
                    int batch, int in, int out, bool relu) {
  require_sizes("dense_backward", {batch, in, out});
  // The ReLU mask is recomputed wherever dz is read rather than stored: the layer sizes make that cheaper than a
  // scratch buffer the caller would have to own.
  auto dz = [&](std::ptrdiff_t index) { return relu && !(y[index] > 0.0f) ? 0.0f : dy[index]; };
  for (int i = 0; i < in * out; ++i) dw[i] = 0.0f;
  for (int j = 0; j < out; ++j) db[j] = 0.0f;
  for (int r = 0; r < batch; ++r) {
    const std::ptrdiff_t row = static_cast<std::ptrdiff_t>(r) * out;
    for (int j = 0; j < out; ++j) db[j] += dz(row + j);
    for (int k = 0; k < in; ++k) {
      const float xv = x[static_cast<std::ptrdiff_t>(r) * in + k];
      float* dw_row = dw + static_cast<std::ptrdiff_t>(k) * out;
      for (int j = 0; j < out; ++j) dw_row[j] += xv * dz(row + j);
    }
    if (dx != nullptr) {
      for (int k = 0; k < in; ++k) {
        const float* w_row = w + static_cast<std::ptrdiff_t>(k) * out;
        float sum = 0.0f;
        for (int j = 0; j < out; ++j) sum += dz(row + j) * w_row[j];
        dx[static_cast<std::ptrdiff_t>(r) * in + k] = sum;
      }
    }
  }
}

void softmax_cross_entropy(const float* logits, const std::int32_t* labels, float* dlogits, float* stats, int batch,
                           int classes, float grad_scale) {
  require_sizes("softmax_cross_entropy", {batch, classes});
  if (classes < 1) throw std::invalid_argument("depengine::examples::host::softmax_cross_entropy: no classes");
  for (int r = 0; r < batch; ++r) {
    if (labels[r] < 0 || labels[r] >= classes) {
      throw std::invalid_argument("depengine::examples::host::softmax_cross_entropy: row " + std::to_string(r) +
                                  " has label " + std::to_string(labels[r]) + ", outside [0, " +
                                  std::to_string(classes) + ")");
    }
  }
  // The batch loss is summed in double: a few hundred float terms of similar size would lose about log2(batch) bits.
  double loss = 0.0;
  int hits = 0;
  for (int r = 0; r < batch; ++r) {
    const float* l = logits + static_cast<std::ptrdiff_t>(r) * classes;
    float* d = dlogits + static_cast<std::ptrdiff_t>(r) * classes;
    const int label = labels[r];
    int argmax = 0;
    for (int j = 1; j < classes; ++j) argmax = l[j] > l[argmax] ? j : argmax;  // strict: ties keep the lowest index
    const float max = l[argmax];
    float sum = 0.0f;
    for (int j = 0; j < classes; ++j) sum += std::exp(l[j] - max);
    // -log(exp(l[label] - max) / sum), without forming a probability that could underflow to 0.
    loss += static_cast<double>(std::log(sum) - (l[label] - max));
    hits += argmax == label ? 1 : 0;
    // Everything read from l is read above, except l[j] itself just before d[j] is written: dlogits may alias logits.
    const float inv_sum = 1.0f / sum;
    for (int j = 0; j < classes; ++j) {
      const float p = std::exp(l[j] - max) * inv_sum;
      d[j] = (p - (j == label ? 1.0f : 0.0f)) * grad_scale;
    }
  }
  stats[0] = static_cast<float>(loss);
  stats[1] = static_cast<float>(hits);
}

void sgd(float* w, const float* g, int n, float learning_rate) {
  require_sizes("sgd", {n});
  for (int i = 0; i < n; ++i) w[i] -= learning_rate * g[i];
}

void add_into(float* dst, const float* src, int n) {
  require_sizes("add_into", {n});
  for (int i = 0; i < n; ++i) dst[i] += src[i];
}

Dataset make_spirals(int classes, int rows_per_class, std::uint32_t seed) {
  if (classes < 1 || rows_per_class < 1) {
    throw std::invalid_argument(
        "depengine::examples::host::make_spirals: needs at least one class and one row per "
        "class, got " +
        std::to_string(classes) + " x " + std::to_string(rows_per_class));
  }
  Dataset data;
  data.features = 2;
  data.classes = classes;
  data.rows = classes * rows_per_class;
  data.x.resize(static_cast<std::size_t>(data.rows) * 2);
  data.labels.resize(static_cast<std::size_t>(data.rows));
  std::mt19937 rng(seed);
  for (int c = 0; c < classes; ++c) {
    for (int i = 0; i < rows_per_class; ++i) {
      const std::size_t row = static_cast<std::size_t>(c) * rows_per_class + i;
      const double r = static_cast<double>(i) / rows_per_class;
      const double t = 4.0 * c + 4.0 * r + 0.2 * standard_normal(rng);
      data.x[2 * row] = static_cast<float>(r * std::sin(t));
      data.x[2 * row + 1] = static_cast<float>(r * std::cos(t));
      data.labels[row] = c;
    }
  }
  // Fisher-Yates, written out: std::shuffle's algorithm is implementation-defined.
  for (std::size_t i = data.labels.size() - 1; i > 0; --i) {
    const std::size_t j = uniform_index(rng, static_cast<std::uint32_t>(i + 1));
    std::swap(data.labels[i], data.labels[j]);
    std::swap(data.x[2 * i], data.x[2 * j]);
    std::swap(data.x[2 * i + 1], data.x[2 * j + 1]);
  }
  return data;
}

void init_weights(float* w, int in, int out, std::uint32_t seed) {
  require_sizes("init_weights", {in, out});
  std::mt19937 rng(seed);
  const double scale = in > 0 ? std::sqrt(2.0 / in) : 0.0;
  for (int i = 0; i < in * out; ++i) w[i] = static_cast<float>(scale * standard_normal(rng));
}

}  // namespace depengine::examples::host
