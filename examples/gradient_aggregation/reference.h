// The reference the data-parallel runs are checked against: the same perceptron trained on one device with the whole
// batch, in plain loops (no engine).
#pragma once

#include <cstdint>
#include <vector>

#include "examples/common/dense_kernels.h"

namespace depengine::examples {

struct ReferenceRun {
  std::vector<int> sizes;  // features -> hidden -> hidden -> classes
  int batch = 0;           // the global batch
  int epochs = 0;
  int steps = 0;  // per epoch
  float learning_rate = 0;
  std::uint32_t seed = 0;  // layer k's weights: host::init_weights with seed + k
};

// The weights and biases of every layer after training: w0, b0, w1, b1, w2, b2.
[[nodiscard]] std::vector<std::vector<float>> train_on_one_device(const host::Dataset& data, const ReferenceRun& run);

// The largest difference between `trained` and `reference`, relative to the largest reference value.
[[nodiscard]] float relative_difference(const std::vector<std::vector<float>>& trained,
                                        const std::vector<std::vector<float>>& reference);

}  // namespace depengine::examples
