#include "examples/gradient_aggregation/reference.h"

#include <algorithm>
#include <cmath>

namespace depengine::examples {

std::vector<std::vector<float>> train_on_one_device(const host::Dataset& data, const ReferenceRun& run) {
  const std::vector<int>& sizes = run.sizes;
  const int batch = run.batch;
  const int classes = sizes[3];
  std::vector<std::vector<float>> w(3), b(3), dw(3), db(3), acts(3), grads(3);
  for (std::size_t k = 0; k < 3; ++k) {
    w[k].resize(static_cast<std::size_t>(sizes[k] * sizes[k + 1]));
    host::init_weights(w[k].data(), sizes[k], sizes[k + 1], run.seed + static_cast<std::uint32_t>(k));
    b[k].assign(static_cast<std::size_t>(sizes[k + 1]), 0.0f);
    dw[k].resize(w[k].size());
    db[k].resize(b[k].size());
    acts[k].resize(static_cast<std::size_t>(batch * sizes[k + 1]));
    grads[k].resize(static_cast<std::size_t>(batch * sizes[k + 1]));
  }
  float stats[2];
  for (int epoch = 0; epoch < run.epochs; ++epoch) {
    for (int step = 0; step < run.steps; ++step) {
      const std::size_t row = static_cast<std::size_t>(step * batch);
      const float* x = data.x.data() + row * static_cast<std::size_t>(data.features);
      for (std::size_t k = 0; k < 3; ++k) {
        host::dense_forward(k == 0 ? x : acts[k - 1].data(), w[k].data(), b[k].data(), acts[k].data(), batch, sizes[k],
                            sizes[k + 1], k < 2);
      }
      host::softmax_cross_entropy(acts[2].data(), data.labels.data() + row, grads[2].data(), stats, batch, classes,
                                  1.0f / static_cast<float>(batch));
      for (std::size_t k = 3; k-- > 0;) {
        host::dense_backward(k == 0 ? x : acts[k - 1].data(), w[k].data(), acts[k].data(), grads[k].data(),
                             dw[k].data(), db[k].data(), k > 0 ? grads[k - 1].data() : nullptr, batch, sizes[k],
                             sizes[k + 1], k < 2);
        host::sgd(w[k].data(), dw[k].data(), static_cast<int>(w[k].size()), run.learning_rate);
        host::sgd(b[k].data(), db[k].data(), static_cast<int>(b[k].size()), run.learning_rate);
      }
    }
  }
  std::vector<std::vector<float>> parameters;
  for (std::size_t k = 0; k < 3; ++k) {
    parameters.push_back(w[k]);
    parameters.push_back(b[k]);
  }
  return parameters;
}

float relative_difference(const std::vector<std::vector<float>>& trained,
                          const std::vector<std::vector<float>>& reference) {
  float largest = 0, difference = 0;
  for (std::size_t i = 0; i < reference.size(); ++i) {
    for (std::size_t j = 0; j < reference[i].size(); ++j) {
      largest = std::max(largest, std::fabs(reference[i][j]));
      difference = std::max(difference, std::fabs(reference[i][j] - trained[i][j]));
    }
  }
  return difference / largest;
}

}  // namespace depengine::examples
