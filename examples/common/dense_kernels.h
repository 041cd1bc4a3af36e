// The numeric kernels the examples share, on the host: a dense (fully connected) layer forward and backward, softmax
// cross-entropy, SGD and gradient accumulation, plus the interleaved-spirals data set and a weight initialiser. They
// are what the examples push as ops: the engine orders them, these do the arithmetic. dense_kernels_cuda.h has the
// same five kernels on a CUDA stream; the two agree to float rounding (test/examples/common/dense_kernels_test.cpp).
//
// Layout: every matrix is row-major float32. A layer maps `in` features to `out`: x is [batch x in], w is [in x out],
// b is [out], y is [batch x out].
//
// Thread safety: every function is pure apart from the buffers it writes, so calls on disjoint output buffers may run
// on any threads at once; a call must not run while another thread writes one of its inputs. Outputs must not alias
// inputs unless a function says so.
//
// Failure: a negative size throws std::invalid_argument, as does a label outside [0, classes); nothing is written then.
// Pointers are not checked: each must address as many floats as its shape says (a zero-sized shape allows null).
//
// Cost: naive loops, sized for the examples (a few hundred rows, layers up to a few hundred wide); dense_forward and
// dense_backward are O(batch * in * out). Only make_spirals allocates (its result).
#pragma once

#include <cstdint>
#include <vector>

namespace depengine::examples::host {

// y = x * w + b, then max(y, 0) element-wise if `relu`. y is overwritten.
void dense_forward(const float* x, const float* w, const float* b, float* y, int batch, int in, int out, bool relu);

// The gradients of a dense layer given dy = dL/dy, where y is the layer's own output from dense_forward (the ReLU
// mask is read from it: dz = relu ? dy * [y > 0] : dy, computed on the fly, so no scratch buffer is needed):
//   dw = x^T * dz   [in x out]
//   db = sum over rows of dz   [out]
//   dx = dz * w^T   [batch x in]; skipped when dx is null (the first layer has no use for it).
// Each output is overwritten, not accumulated into; reduce gradients across replicas with add_into.
void dense_backward(const float* x, const float* w, const float* y, const float* dy, float* dw, float* db, float* dx,
                    int batch, int in, int out, bool relu);

// Softmax cross-entropy over `batch` rows of `classes` logits, with labels in [0, classes):
//   dlogits = (softmax(logits) - onehot(label)) * grad_scale   (pass 1/batch for the gradient of the mean loss)
//   stats[0] = sum over rows of -log softmax(logits)[label]    (stable: the row maximum is subtracted first)
//   stats[1] = number of rows whose argmax is the label, as a float (ties go to the lowest index)
// dlogits and stats[0..1] are overwritten; dlogits may alias logits. classes must be at least 1.
void softmax_cross_entropy(const float* logits, const std::int32_t* labels, float* dlogits, float* stats, int batch,
                           int classes, float grad_scale);

// w -= learning_rate * g over n floats.
void sgd(float* w, const float* g, int n, float learning_rate);

// dst += src over n floats (gradient reduction across replicas). dst may equal src (it doubles).
void add_into(float* dst, const float* src, int n);

// A labelled data set: x is [rows x features], labels[i] in [0, classes).
struct Dataset {
  int features = 0;
  int classes = 0;
  int rows = 0;
  std::vector<float> x;
  std::vector<std::int32_t> labels;
};

// The interleaved-spirals problem (CS231n's): `classes` arms in 2D, rows_per_class points each. Point i of class c has
// radius r = i / rows_per_class and angle t = 4c + 4r + 0.2 * noise (noise standard normal), at (r sin t, r cos t).
// Not linearly separable: a 2 -> 64 -> 64 -> 3 ReLU MLP learns three classes to over 90% train accuracy in a few
// hundred full-batch SGD steps (the test checks it). Rows are shuffled, so any prefix holds every class in about equal
// shares.
//
// Deterministic: the same seed gives the same bytes on every standard library (std::mt19937 is specified exactly; the
// shuffle, the range reduction and the normal deviates are written out here rather than taken from std::shuffle and
// the std distributions, whose algorithms are implementation-defined). The remaining dependence is on the C library's
// sin, cos, log and sqrt, which agree across the usual 64-bit platforms. Allocates the result; throws
// std::invalid_argument for classes < 1 or rows_per_class < 1.
[[nodiscard]] Dataset make_spirals(int classes, int rows_per_class, std::uint32_t seed);

// Fills w [in x out] with He-normal weights, N(0, 2 / in): the variance that keeps a ReLU layer's activations at the
// scale of its inputs. Deterministic in the same sense as make_spirals. Biases are not touched: callers zero them.
void init_weights(float* w, int in, int out, std::uint32_t seed);

}  // namespace depengine::examples::host
