// The examples' numeric kernels (examples/common/dense_kernels.h, dense_kernels_cuda.h): the host kernels against a
// naive reference and against central finite differences, softmax cross-entropy's stats and stability, the spirals
// data set's determinism and learnability (the property the training example relies on), and the CUDA kernels
// against the host ones when they were built and a device exists.
//
// Randomized cases run once per seed of test_seeds() and CAPTURE it; DEPENGINE_TEST_SEED=<seed> reruns one.
#include "examples/common/dense_kernels.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "test/test_support.h"

#if defined(DEPENGINE_EXAMPLES_CUDA)
#include <cuda_runtime_api.h>

#include "examples/common/dense_kernels_cuda.h"
#endif

namespace depengine::test {
namespace {

namespace host = depengine::examples::host;

std::vector<float> random_floats(std::mt19937_64& rng, std::size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

std::vector<std::int32_t> random_labels(std::mt19937_64& rng, int rows, int classes) {
  std::uniform_int_distribution<std::int32_t> dist(0, classes - 1);
  std::vector<std::int32_t> v(static_cast<std::size_t>(rows));
  for (std::int32_t& l : v) l = dist(rng);
  return v;
}

int random_size(std::mt19937_64& rng, int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }

std::size_t sz(int a, int b = 1) { return static_cast<std::size_t>(a) * static_cast<std::size_t>(b); }

// y = x * w + b (+ ReLU), accumulated in double: the reference dense_forward is checked against.
std::vector<float> reference_forward(const std::vector<float>& x, const std::vector<float>& w,
                                     const std::vector<float>& b, int batch, int in, int out, bool relu) {
  std::vector<float> y(sz(batch, out));
  for (int r = 0; r < batch; ++r) {
    for (int j = 0; j < out; ++j) {
      double acc = b[sz(j)];
      for (int k = 0; k < in; ++k) acc += double{x[sz(r, in) + sz(k)]} * double{w[sz(k, out) + sz(j)]};
      y[sz(r, out) + sz(j)] = static_cast<float>(relu ? std::max(acc, 0.0) : acc);
    }
  }
  return y;
}

// Passes when every |a - b| is within `tolerance` of the larger of 1 and b's largest magnitude: a norm-wise bound,
// since an element that cancels to near zero carries the rounding error of its terms, not of its own size.
void require_close(const std::vector<float>& a, const std::vector<float>& b, double tolerance, const char* what) {
  INFO(what);
  REQUIRE(a.size() == b.size());
  if (a.empty()) return;
  double scale = 1.0;
  for (const float v : b) scale = std::max(scale, std::fabs(double{v}));
  std::size_t worst = 0;
  double worst_diff = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double diff = std::fabs(double{a[i]} - double{b[i]});
    if (!(diff <= worst_diff)) {  // also catches NaN
      worst_diff = diff;
      worst = i;
    }
  }
  CAPTURE(worst, worst_diff, scale, a[worst], b[worst]);
  REQUIRE(worst_diff <= tolerance * scale);
}

TEST_CASE("dense_forward matches a naive reference; ReLU zeroes negatives", "[examples][kernels]") {
  for (const std::uint64_t seed : test_seeds()) {
    CAPTURE(seed);
    std::mt19937_64 rng(seed);
    for (int round = 0; round < 20; ++round) {
      const int batch = random_size(rng, 1, 17), in = random_size(rng, 1, 19), out = random_size(rng, 1, 23);
      CAPTURE(round, batch, in, out);
      const auto x = random_floats(rng, sz(batch, in)), w = random_floats(rng, sz(in, out)),
                 b = random_floats(rng, sz(out));
      for (const bool relu : {false, true}) {
        CAPTURE(relu);
        std::vector<float> y(sz(batch, out), 12345.0f);
        host::dense_forward(x.data(), w.data(), b.data(), y.data(), batch, in, out, relu);
        require_close(y, reference_forward(x, w, b, batch, in, out, relu), 1e-5, "y");
        if (relu) REQUIRE(std::all_of(y.begin(), y.end(), [](float v) { return v >= 0.0f; }));
      }
    }
  }
  // A bias far below anything x * w can reach: every pre-activation is negative, so ReLU leaves exact zeros.
  const std::vector<float> x{0.5f, -0.25f}, w{1.0f, 2.0f, -1.0f, 0.5f}, b{-100.0f, -100.0f};
  std::vector<float> y(2, 1.0f);
  host::dense_forward(x.data(), w.data(), b.data(), y.data(), 1, 2, 2, true);
  REQUIRE(y == std::vector<float>{0.0f, 0.0f});
  host::dense_forward(x.data(), w.data(), b.data(), y.data(), 1, 2, 2, false);
  REQUIRE(y == std::vector<float>{-100.0f + 0.5f + 0.25f, -100.0f + 1.0f - 0.125f});
  REQUIRE_THROWS_AS(host::dense_forward(x.data(), w.data(), b.data(), y.data(), -1, 2, 2, false),
                    std::invalid_argument);
}

// L = sum(y * r) for a layer's output y, in double so that only the layer's own float rounding reaches the
// differences.
double probe_loss(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& b,
                  const std::vector<float>& r, int batch, int in, int out, bool relu) {
  std::vector<float> y(sz(batch, out));
  host::dense_forward(x.data(), w.data(), b.data(), y.data(), batch, in, out, relu);
  double loss = 0.0;
  for (std::size_t i = 0; i < y.size(); ++i) loss += double{y[i]} * double{r[i]};
  return loss;
}

TEST_CASE("dense_backward matches central finite differences, with and without ReLU", "[examples][kernels]") {
  // A step of kStep moves any pre-activation by at most kStep (|x|, |w| <= 1), so inputs whose pre-activations all
  // lie further than kMargin from 0 never cross a ReLU kink while being differenced.
  constexpr float kStep = 1e-2f;
  constexpr float kMargin = 5e-2f;
  for (const std::uint64_t seed : test_seeds()) {
    CAPTURE(seed);
    std::mt19937_64 rng(seed);
    for (int round = 0; round < 10; ++round) {
      for (const bool relu : {false, true}) {
        const int batch = random_size(rng, 1, 5), in = random_size(rng, 1, 6), out = random_size(rng, 1, 5);
        CAPTURE(round, relu, batch, in, out);
        std::vector<float> x, w, b;
        for (int attempt = 0;; ++attempt) {
          REQUIRE(attempt < 10000);
          x = random_floats(rng, sz(batch, in));
          w = random_floats(rng, sz(in, out));
          b = random_floats(rng, sz(out));
          const auto z = reference_forward(x, w, b, batch, in, out, false);
          if (std::all_of(z.begin(), z.end(), [&](float v) { return std::fabs(v) > kMargin; })) break;
        }
        const auto r = random_floats(rng, sz(batch, out));
        std::vector<float> y(sz(batch, out));
        host::dense_forward(x.data(), w.data(), b.data(), y.data(), batch, in, out, relu);
        // Filled with a value no gradient takes: the kernel must overwrite, not accumulate.
        std::vector<float> dw(sz(in, out), 777.0f), db(sz(out), 777.0f), dx(sz(batch, in), 777.0f);
        host::dense_backward(x.data(), w.data(), y.data(), r.data(), dw.data(), db.data(), dx.data(), batch, in, out,
                             relu);

        auto differences = [&](std::vector<float>& param) {
          std::vector<float> fd(param.size());
          for (std::size_t i = 0; i < param.size(); ++i) {
            const float saved = param[i];
            param[i] = saved + kStep;
            const double plus = probe_loss(x, w, b, r, batch, in, out, relu);
            param[i] = saved - kStep;
            const double minus = probe_loss(x, w, b, r, batch, in, out, relu);
            param[i] = saved;
            fd[i] = static_cast<float>((plus - minus) / (2.0 * double{kStep}));
          }
          return fd;
        };
        require_close(dw, differences(w), 1e-2, "dw");
        require_close(db, differences(b), 1e-2, "db");
        require_close(dx, differences(x), 1e-2, "dx");

        // Without dx: the same dw and db, and nothing else written.
        std::vector<float> dw2(dw.size(), 777.0f), db2(db.size(), 777.0f);
        host::dense_backward(x.data(), w.data(), y.data(), r.data(), dw2.data(), db2.data(), nullptr, batch, in, out,
                             relu);
        REQUIRE(dw2 == dw);
        REQUIRE(db2 == db);
      }
    }
  }
}

TEST_CASE("softmax_cross_entropy: gradient, argmax hits, and stability", "[examples][kernels]") {
  SECTION("the gradient is the finite difference of stats[0] * grad_scale; stats[1] counts argmax hits") {
    constexpr float kStep = 1e-2f;
    for (const std::uint64_t seed : test_seeds()) {
      CAPTURE(seed);
      std::mt19937_64 rng(seed);
      for (int round = 0; round < 10; ++round) {
        const int batch = random_size(rng, 1, 8), classes = random_size(rng, 1, 6);
        const float grad_scale = 1.0f / static_cast<float>(batch);
        CAPTURE(round, batch, classes);
        auto logits = random_floats(rng, sz(batch, classes), -3.0f, 3.0f);
        const auto labels = random_labels(rng, batch, classes);
        std::vector<float> dlogits(logits.size(), 777.0f), stats{777.0f, 777.0f};
        host::softmax_cross_entropy(logits.data(), labels.data(), dlogits.data(), stats.data(), batch, classes,
                                    grad_scale);

        int hits = 0;
        for (int r = 0; r < batch; ++r) {
          const auto row = logits.begin() + static_cast<std::ptrdiff_t>(sz(r, classes));
          hits += std::max_element(row, row + classes) - row == labels[sz(r)] ? 1 : 0;  // the first maximum
        }
        REQUIRE(stats[1] == static_cast<float>(hits));

        std::vector<float> fd(logits.size());
        for (std::size_t i = 0; i < logits.size(); ++i) {
          std::vector<float> scratch(logits.size()), probe(2);
          const float saved = logits[i];
          logits[i] = saved + kStep;
          host::softmax_cross_entropy(logits.data(), labels.data(), scratch.data(), probe.data(), batch, classes,
                                      grad_scale);
          const double plus = double{probe[0]} * grad_scale;
          logits[i] = saved - kStep;
          host::softmax_cross_entropy(logits.data(), labels.data(), scratch.data(), probe.data(), batch, classes,
                                      grad_scale);
          const double minus = double{probe[0]} * grad_scale;
          logits[i] = saved;
          fd[i] = static_cast<float>((plus - minus) / (2.0 * double{kStep}));
        }
        // fd's own error (float loss rounding over a 2e-2 step) is about 1e-5 of stats[0]; dlogits are O(grad_scale).
        require_close(dlogits, fd, 1e-2 * grad_scale, "dlogits");

        // In place (dlogits == logits): the same gradient.
        std::vector<float> in_place = logits, stats2(2);
        host::softmax_cross_entropy(in_place.data(), labels.data(), in_place.data(), stats2.data(), batch, classes,
                                    grad_scale);
        REQUIRE(in_place == dlogits);
        REQUIRE(stats2 == stats);
      }
    }
  }
  SECTION("ties go to the lowest index") {
    const std::vector<float> logits{1.0f, 5.0f, 5.0f, 2.0f, 2.0f, 2.0f};
    std::vector<float> dlogits(6), stats(2);
    const std::vector<std::int32_t> first{1, 0}, second{2, 1};
    host::softmax_cross_entropy(logits.data(), first.data(), dlogits.data(), stats.data(), 2, 3, 1.0f);
    REQUIRE(stats[1] == 2.0f);
    host::softmax_cross_entropy(logits.data(), second.data(), dlogits.data(), stats.data(), 2, 3, 1.0f);
    REQUIRE(stats[1] == 0.0f);
    // Row 0 (label 2): -log(e^5 / (e^1 + 2 e^5)) = log(2 + e^-4); row 1 (label 1): log 3.
    REQUIRE(stats[0] == Approx(std::log(2.0 + std::exp(-4.0)) + std::log(3.0)).epsilon(1e-5));
  }
  SECTION("logits of +-1000 give finite, exact-enough results") {
    const std::vector<float> logits{1000.0f, -1000.0f, 0.0f, -1000.0f, 1000.0f, 1000.0f};
    const std::vector<std::int32_t> labels{0, 0};
    std::vector<float> dlogits(6), stats(2);
    host::softmax_cross_entropy(logits.data(), labels.data(), dlogits.data(), stats.data(), 2, 3, 0.5f);
    REQUIRE(std::all_of(dlogits.begin(), dlogits.end(), [](float v) { return std::isfinite(v); }));
    // Row 0 is certain and right (loss 0); row 1 puts half on each of classes 1 and 2 and nothing on 0 (loss 2000 +
    // log 2).
    REQUIRE(stats[0] == Approx(2000.0 + std::log(2.0)).epsilon(1e-6));
    REQUIRE(stats[1] == 1.0f);
    REQUIRE(dlogits == std::vector<float>{0.0f, 0.0f, 0.0f, -0.5f, 0.25f, 0.25f});
  }
  SECTION("a label outside [0, classes) throws") {
    const std::vector<float> logits{1.0f, 2.0f};
    std::vector<float> dlogits(2), stats(2);
    for (const std::int32_t bad : {-1, 2}) {
      REQUIRE_THROWS_AS(host::softmax_cross_entropy(logits.data(), &bad, dlogits.data(), stats.data(), 1, 2, 1.0f),
                        std::invalid_argument);
    }
  }
}

TEST_CASE("sgd and add_into", "[examples][kernels]") {
  std::vector<float> w{1.0f, 2.0f, 3.0f};
  const std::vector<float> g{0.5f, -1.0f, 0.0f};
  host::sgd(w.data(), g.data(), 3, 2.0f);
  REQUIRE(w == std::vector<float>{0.0f, 4.0f, 3.0f});
  host::add_into(w.data(), g.data(), 3);
  REQUIRE(w == std::vector<float>{0.5f, 3.0f, 3.0f});
  host::add_into(w.data(), w.data(), 3);
  REQUIRE(w == std::vector<float>{1.0f, 6.0f, 6.0f});
}

// A 2 -> 64 -> 64 -> classes ReLU MLP trained by full-batch SGD with the host kernels; returns the train accuracy.
double train_spirals_mlp(const host::Dataset& data, int steps, float learning_rate) {
  constexpr int kHidden = 64;
  const int n = data.rows, f = data.features, c = data.classes;
  std::vector<float> w1(sz(f, kHidden)), b1(sz(kHidden)), w2(sz(kHidden, kHidden)), b2(sz(kHidden)), w3(sz(kHidden, c)),
      b3(sz(c));
  host::init_weights(w1.data(), f, kHidden, 1);
  host::init_weights(w2.data(), kHidden, kHidden, 2);
  host::init_weights(w3.data(), kHidden, c, 3);
  std::vector<float> h1(sz(n, kHidden)), h2(sz(n, kHidden)), logits(sz(n, c)), dlogits(sz(n, c)), dh2(sz(n, kHidden)),
      dh1(sz(n, kHidden)), stats(2);
  std::vector<float> dw1(w1.size()), db1(b1.size()), dw2(w2.size()), db2(b2.size()), dw3(w3.size()), db3(b3.size());
  const float grad_scale = 1.0f / static_cast<float>(n);
  for (int step = 0; step < steps; ++step) {
    host::dense_forward(data.x.data(), w1.data(), b1.data(), h1.data(), n, f, kHidden, true);
    host::dense_forward(h1.data(), w2.data(), b2.data(), h2.data(), n, kHidden, kHidden, true);
    host::dense_forward(h2.data(), w3.data(), b3.data(), logits.data(), n, kHidden, c, false);
    host::softmax_cross_entropy(logits.data(), data.labels.data(), dlogits.data(), stats.data(), n, c, grad_scale);
    host::dense_backward(h2.data(), w3.data(), logits.data(), dlogits.data(), dw3.data(), db3.data(), dh2.data(), n,
                         kHidden, c, false);
    host::dense_backward(h1.data(), w2.data(), h2.data(), dh2.data(), dw2.data(), db2.data(), dh1.data(), n, kHidden,
                         kHidden, true);
    host::dense_backward(data.x.data(), w1.data(), h1.data(), dh1.data(), dw1.data(), db1.data(), nullptr, n, f,
                         kHidden, true);
    for (auto [p, g] : {std::pair{&w1, &dw1}, {&b1, &db1}, {&w2, &dw2}, {&b2, &db2}, {&w3, &dw3}, {&b3, &db3}}) {
      host::sgd(p->data(), g->data(), static_cast<int>(p->size()), learning_rate);
    }
  }
  host::dense_forward(data.x.data(), w1.data(), b1.data(), h1.data(), n, f, kHidden, true);
  host::dense_forward(h1.data(), w2.data(), b2.data(), h2.data(), n, kHidden, kHidden, true);
  host::dense_forward(h2.data(), w3.data(), b3.data(), logits.data(), n, kHidden, c, false);
  host::softmax_cross_entropy(logits.data(), data.labels.data(), dlogits.data(), stats.data(), n, c, grad_scale);
  return double{stats[1]} / n;
}

TEST_CASE("make_spirals is deterministic, balanced, and learnable by the examples' MLP", "[examples][kernels]") {
  const host::Dataset a = host::make_spirals(3, 100, 42), b = host::make_spirals(3, 100, 42),
                      other = host::make_spirals(3, 100, 43);
  REQUIRE(a.features == 2);
  REQUIRE(a.classes == 3);
  REQUIRE(a.rows == 300);
  REQUIRE(a.x.size() == 600);
  REQUIRE(a.labels.size() == 300);
  REQUIRE(std::memcmp(a.x.data(), b.x.data(), a.x.size() * sizeof(float)) == 0);
  REQUIRE(a.labels == b.labels);
  REQUIRE(std::memcmp(a.x.data(), other.x.data(), a.x.size() * sizeof(float)) != 0);
  REQUIRE(a.labels != other.labels);
  for (std::int32_t c = 0; c < 3; ++c) REQUIRE(std::count(a.labels.begin(), a.labels.end(), c) == 100);
  REQUIRE(std::all_of(a.x.begin(), a.x.end(), [](float v) { return std::fabs(v) <= 1.0f; }));
  // Shuffled: the first 30 rows are not all one class.
  REQUIRE(std::count(a.labels.begin(), a.labels.begin() + 30, a.labels[0]) < 30);
  REQUIRE_THROWS_AS(host::make_spirals(0, 10, 1), std::invalid_argument);
  // Pinned values: the same data on every platform is the point of writing the shuffle and the normal deviates out.
  // The labels depend on std::mt19937 and integer arithmetic alone, so they must match exactly; the coordinates also
  // go through the C library's sin, cos and log, so they are compared to float rounding.
  REQUIRE(std::vector<std::int32_t>(a.labels.begin(), a.labels.begin() + 12) ==
          std::vector<std::int32_t>{1, 1, 0, 2, 0, 2, 0, 2, 1, 2, 2, 0});
  const float pinned_x[] = {0.824651837f, 0.244027302f, -0.256989181f, 0.237605914f};
  for (int i = 0; i < 4; ++i) REQUIRE(a.x[sz(i)] == Approx(pinned_x[i]).epsilon(1e-5));

  // The examples' property: 300 full-batch SGD steps reach over 90% train accuracy (about 99% in practice). Under a
  // sanitizer, 50 rows per class halve the cost and still reach about 99%.
  const int rows_per_class = static_cast<int>(sized(100, 50, 50));
  const double accuracy = train_spirals_mlp(host::make_spirals(3, rows_per_class, 42), 300, 0.5f);
  CAPTURE(accuracy);
  REQUIRE(accuracy > 0.9);
}

TEST_CASE("init_weights is deterministic with He scale", "[examples][kernels]") {
  constexpr int kIn = 64, kOut = 64;
  std::vector<float> w(sz(kIn, kOut)), again(w.size()), other(w.size());
  host::init_weights(w.data(), kIn, kOut, 5);
  host::init_weights(again.data(), kIn, kOut, 5);
  host::init_weights(other.data(), kIn, kOut, 6);
  REQUIRE(w == again);
  REQUIRE(w != other);
  std::vector<float> pinned(4);
  host::init_weights(pinned.data(), 2, 2, 1);
  const float expected[] = {1.32237864f, 0.738360643f, 2.95291638f, 1.54672825f};
  for (int i = 0; i < 4; ++i) REQUIRE(pinned[sz(i)] == Approx(expected[i]).epsilon(1e-5));
  double mean = 0.0, square = 0.0;
  for (const float v : w) {
    mean += v;
    square += double{v} * v;
  }
  mean /= static_cast<double>(w.size());
  const double variance = square / static_cast<double>(w.size()) - mean * mean;
  REQUIRE(std::fabs(mean) < 0.02);
  REQUIRE(variance == Approx(2.0 / kIn).epsilon(0.1));
}

#if defined(DEPENGINE_EXAMPLES_CUDA)
// Turns a CUDA status in the test's own setup (allocation, copies, synchronisation) into a failure with its message.
void check_cuda(cudaError_t status, const char* what) {
  INFO(what << ": " << cudaGetErrorString(status));
  REQUIRE(status == cudaSuccess);
}

// Device memory holding a copy of a host vector, freed on scope exit.
template <class T>
class DeviceVector {
 public:
  explicit DeviceVector(const std::vector<T>& host) : size_(host.size()) {
    void* raw = nullptr;
    check_cuda(cudaMalloc(&raw, std::max<std::size_t>(size_, 1) * sizeof(T)), "cudaMalloc");
    data_ = static_cast<T*>(raw);
    check_cuda(cudaMemcpy(data_, host.data(), size_ * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy to device");
  }
  ~DeviceVector() { (void)cudaFree(data_); }
  DeviceVector(const DeviceVector&) = delete;
  DeviceVector& operator=(const DeviceVector&) = delete;

  T* get() const { return data_; }
  // Synchronises the device first: the kernels only enqueue.
  std::vector<T> to_host() const {
    check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    std::vector<T> host(size_);
    check_cuda(cudaMemcpy(host.data(), data_, size_ * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy to host");
    return host;
  }

 private:
  T* data_ = nullptr;
  std::size_t size_;
};

class Stream {
 public:
  Stream() { check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"); }
  ~Stream() { (void)cudaStreamDestroy(stream_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  void* get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// Each CUDA kernel against its host version on one random shape, on a non-default stream.
void compare_with_host(std::mt19937_64& rng, int batch, int in, int out, int classes) {
  namespace gpu = depengine::examples::cuda;
  constexpr double kTolerance = 1e-4;
  CAPTURE(batch, in, out, classes);
  Stream stream;
  const auto x = random_floats(rng, sz(batch, in)), w = random_floats(rng, sz(in, out)),
             b = random_floats(rng, sz(out));
  const auto dy = random_floats(rng, sz(batch, out));
  const DeviceVector<float> d_x(x), d_w(w), d_b(b), d_dy(dy);
  for (const bool relu : {false, true}) {
    CAPTURE(relu);
    std::vector<float> y(sz(batch, out));
    host::dense_forward(x.data(), w.data(), b.data(), y.data(), batch, in, out, relu);
    const DeviceVector<float> d_y(std::vector<float>(y.size(), 777.0f));
    gpu::dense_forward(d_x.get(), d_w.get(), d_b.get(), d_y.get(), batch, in, out, relu, stream.get());
    require_close(d_y.to_host(), y, kTolerance, "dense_forward y");

    // Backward from the host's y, so that both sides see the same ReLU mask.
    std::vector<float> dw(sz(in, out)), db(sz(out)), dx(sz(batch, in));
    host::dense_backward(x.data(), w.data(), y.data(), dy.data(), dw.data(), db.data(), dx.data(), batch, in, out,
                         relu);
    const DeviceVector<float> d_host_y(y), d_dw(std::vector<float>(dw.size(), 777.0f)),
        d_db(std::vector<float>(db.size(), 777.0f)), d_dx(std::vector<float>(dx.size(), 777.0f));
    gpu::dense_backward(d_x.get(), d_w.get(), d_host_y.get(), d_dy.get(), d_dw.get(), d_db.get(), d_dx.get(), batch, in,
                        out, relu, stream.get());
    require_close(d_dw.to_host(), dw, kTolerance, "dense_backward dw");
    require_close(d_db.to_host(), db, kTolerance, "dense_backward db");
    require_close(d_dx.to_host(), dx, kTolerance, "dense_backward dx");
    const DeviceVector<float> d_dw2(std::vector<float>(dw.size(), 777.0f)),
        d_db2(std::vector<float>(db.size(), 777.0f));
    gpu::dense_backward(d_x.get(), d_w.get(), d_host_y.get(), d_dy.get(), d_dw2.get(), d_db2.get(), nullptr, batch, in,
                        out, relu, stream.get());
    REQUIRE(d_dw2.to_host() == d_dw.to_host());
    REQUIRE(d_db2.to_host() == d_db.to_host());
  }

  const auto logits = random_floats(rng, sz(batch, classes), -4.0f, 4.0f);
  const auto labels = random_labels(rng, batch, classes);
  const float grad_scale = 1.0f / static_cast<float>(batch);
  std::vector<float> dlogits(logits.size()), stats(2);
  host::softmax_cross_entropy(logits.data(), labels.data(), dlogits.data(), stats.data(), batch, classes, grad_scale);
  const DeviceVector<float> d_logits(logits), d_dlogits(std::vector<float>(logits.size(), 777.0f)),
      d_stats(std::vector<float>{777.0f, 777.0f});
  const DeviceVector<std::int32_t> d_labels(labels);
  gpu::softmax_cross_entropy(d_logits.get(), d_labels.get(), d_dlogits.get(), d_stats.get(), batch, classes, grad_scale,
                             stream.get());
  require_close(d_dlogits.to_host(), dlogits, kTolerance, "softmax_cross_entropy dlogits");
  const auto gpu_stats = d_stats.to_host();
  REQUIRE(gpu_stats[0] == Approx(stats[0]).epsilon(kTolerance));
  REQUIRE(gpu_stats[1] == stats[1]);
  // Deterministic: a second run gives the same bits.
  gpu::softmax_cross_entropy(d_logits.get(), d_labels.get(), d_dlogits.get(), d_stats.get(), batch, classes, grad_scale,
                             stream.get());
  REQUIRE(d_stats.to_host() == gpu_stats);

  const int n = static_cast<int>(w.size());
  const auto g = random_floats(rng, w.size());
  std::vector<float> stepped = w, summed = w;
  host::sgd(stepped.data(), g.data(), n, 0.3f);
  host::add_into(summed.data(), g.data(), n);
  const DeviceVector<float> d_stepped(w), d_summed(w), d_g(g);
  gpu::sgd(d_stepped.get(), d_g.get(), n, 0.3f, stream.get());
  gpu::add_into(d_summed.get(), d_g.get(), n, stream.get());
  require_close(d_stepped.to_host(), stepped, kTolerance, "sgd");
  require_close(d_summed.to_host(), summed, kTolerance, "add_into");
}
#endif

TEST_CASE("CUDA kernels equal the host kernels", "[examples][kernels][gpu]") {
#if defined(DEPENGINE_EXAMPLES_CUDA)
  if (examples::cuda::cuda_device_count() == 0) {
    WARN("CUDA example kernels: skipped: no CUDA device");
    return;
  }
  REQUIRE_THROWS_AS(examples::cuda::sgd(nullptr, nullptr, -1, 1.0f, nullptr), std::invalid_argument);
  for (const std::uint64_t seed : test_seeds()) {
    CAPTURE(seed);
    std::mt19937_64 rng(seed);
    for (int round = 0; round < 5; ++round) {
      compare_with_host(rng, random_size(rng, 1, 40), random_size(rng, 1, 70), random_size(rng, 1, 300),
                        random_size(rng, 1, 10));
    }
    // More rows than the softmax block has threads (each thread then takes several), and the examples' layer shapes.
    compare_with_host(rng, 300, 64, 64, 3);
    compare_with_host(rng, 256, 2, 64, 3);
  }
#else
  WARN("CUDA example kernels: skipped: built without DEPENGINE_WITH_CUDA");
#endif
}

}  // namespace
}  // namespace depengine::test
