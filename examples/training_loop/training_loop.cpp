// A training loop written as engine ops: a 3-layer perceptron learns a synthetic regression task with SGD.
//
// Every weight matrix, activation and gradient is an engine variable; forward, backward and the SGD update of each
// layer are ops pushed in plain program order. The engine runs them as soon as their variables allow: the update of
// layer k overlaps the backward pass of the layers below it and the next step's forward of the layers before it, and
// no line below synchronises by hand. The only wait is for the loss, once per step, to print it.
//
//   training_loop [--steps N] [--workers N] [--inline] [--check]
//
// --check exits with status 1 unless the mean loss of the last 10 steps is below a quarter of the first 10's (the
// example's self-test; the per-batch loss is noisy, a mean of ten is not).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"
#include "executors/inline_executor.h"
#include "executors/threadpool/threadpool_executor.h"

namespace {

using depengine::Engine;
using depengine::Var;

constexpr int kBatch = 32;
constexpr int kIn = 16, kHidden = 32, kOut = 4;
constexpr float kLearningRate = 0.1f;

// A dense matrix and the engine variable that orders access to it.
struct Tensor {
  int rows = 0, cols = 0;
  std::vector<float> data;
  Var var;
  Tensor(Engine& engine, int r, int c) : rows(r), cols(c), data(static_cast<std::size_t>(r * c)), var(engine.NewVariable()) {}
  float& at(int r, int c) { return data[static_cast<std::size_t>(r * cols + c)]; }
  float at(int r, int c) const { return data[static_cast<std::size_t>(r * cols + c)]; }
};

// out = act(in x w), with act = tanh for hidden layers and identity for the last.
void forward(const Tensor& in, const Tensor& w, Tensor& out, bool hidden) {
  for (int b = 0; b < in.rows; ++b) {
    for (int j = 0; j < w.cols; ++j) {
      float sum = 0;
      for (int i = 0; i < in.cols; ++i) sum += in.at(b, i) * w.at(i, j);
      out.at(b, j) = hidden ? std::tanh(sum) : sum;
    }
  }
}

// Given d(loss)/d(out) in `grad_out`: the weight gradient, and d(loss)/d(in) (through in's tanh) when wanted.
void backward(const Tensor& in, const Tensor& w, const Tensor& grad_out, Tensor& grad_w, Tensor* grad_in) {
  for (int i = 0; i < w.rows; ++i) {
    for (int j = 0; j < w.cols; ++j) {
      float sum = 0;
      for (int b = 0; b < in.rows; ++b) sum += in.at(b, i) * grad_out.at(b, j);
      grad_w.at(i, j) = sum / static_cast<float>(in.rows);
    }
  }
  if (grad_in == nullptr) return;
  for (int b = 0; b < in.rows; ++b) {
    for (int i = 0; i < w.rows; ++i) {
      float sum = 0;
      for (int j = 0; j < w.cols; ++j) sum += grad_out.at(b, j) * w.at(i, j);
      grad_in->at(b, i) = sum * (1 - in.at(b, i) * in.at(b, i));  // in = tanh(...) of the layer below
    }
  }
}

struct Options {
  int steps = 200;
  int workers = 0;
  bool use_inline = false;
  bool check = false;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    auto number = [&] {
      if (i + 1 >= argc) throw std::invalid_argument(std::string(arg) + " needs a number");
      return std::stoi(argv[++i]);
    };
    if (arg == "--steps") {
      o.steps = number();
    } else if (arg == "--workers") {
      o.workers = number();
    } else if (arg == "--inline") {
      o.use_inline = true;
    } else if (arg == "--check") {
      o.check = true;
    } else {
      throw std::invalid_argument("unknown option '" + std::string(arg) + "' (--steps N, --workers N, --inline, --check)");
    }
  }
  if (o.steps < 1) throw std::invalid_argument("--steps must be at least 1");
  return o;
}

}  // namespace

int main(int argc, char** argv) try {
  const Options options = parse(argc, argv);
  depengine::EngineOptions engine_options;
  if (options.use_inline) {
    engine_options.executors.push_back(std::make_unique<depengine::InlineExecutor>());
  } else {
    engine_options.executors.push_back(
        std::make_unique<depengine::ThreadPoolExecutor>(depengine::ThreadPoolOptions{.workers = options.workers}));
  }
  Engine engine(std::move(engine_options));

  // The task: targets are a fixed random nonlinear function of the inputs; the network must learn it.
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0, 1);
  Tensor teacher(engine, kIn, kOut);
  for (float& x : teacher.data) x = normal(rng) * 0.5f;

  // Layers: weights, their gradients, activations and activation gradients. acts[0] is the input batch.
  const int sizes[] = {kIn, kHidden, kHidden, kOut};
  std::vector<std::unique_ptr<Tensor>> weights, grads, acts, act_grads;
  for (int k = 0; k < 3; ++k) {
    weights.push_back(std::make_unique<Tensor>(engine, sizes[k], sizes[k + 1]));
    const float scale = 1.0f / std::sqrt(static_cast<float>(sizes[k]));
    for (float& x : weights.back()->data) x = normal(rng) * scale;
    grads.push_back(std::make_unique<Tensor>(engine, sizes[k], sizes[k + 1]));
  }
  for (int k = 0; k < 4; ++k) {
    acts.push_back(std::make_unique<Tensor>(engine, kBatch, sizes[k]));
    act_grads.push_back(std::make_unique<Tensor>(engine, kBatch, sizes[k]));
  }
  Tensor targets(engine, kBatch, kOut);
  Var rng_state = engine.NewVariable();  // the data generator's PRNG: serialises batch generation
  std::vector<float> losses(static_cast<std::size_t>(options.steps));

  for (int step = 0; step < options.steps; ++step) {
    // Next batch: inputs, and targets = tanh(inputs x teacher).
    engine.Push(
        [&] {
          for (float& x : acts[0]->data) x = normal(rng);
          forward(*acts[0], teacher, targets, true);
        },
        {teacher.var}, {acts[0]->var, targets.var, rng_state}, {.name = "batch"});
    for (int k = 0; k < 3; ++k) {
      engine.Push([&, k] { forward(*acts[k], *weights[k], *acts[k + 1], k < 2); },
                  {acts[k]->var, weights[k]->var}, {acts[k + 1]->var}, {.name = "forward"});
    }
    // Loss (mean squared error) and its gradient.
    engine.Push(
        [&, step] {
          float loss = 0;
          for (int b = 0; b < kBatch; ++b) {
            for (int j = 0; j < kOut; ++j) {
              const float diff = acts[3]->at(b, j) - targets.at(b, j);
              loss += diff * diff;
              act_grads[3]->at(b, j) = 2 * diff;
            }
          }
          losses[static_cast<std::size_t>(step)] = loss / (kBatch * kOut);
        },
        {acts[3]->var, targets.var}, {act_grads[3]->var}, {.name = "loss"});
    // Backward, top layer first; each layer's update is pushed right after its gradient, so it runs while the layers
    // below are still back-propagating.
    for (int k = 2; k >= 0; --k) {
      Tensor* grad_in = k > 0 ? act_grads[static_cast<std::size_t>(k)].get() : nullptr;
      std::vector<Var> mutated = {grads[k]->var};
      if (grad_in != nullptr) mutated.push_back(grad_in->var);
      engine.Push([&, k, grad_in] { backward(*acts[k], *weights[k], *act_grads[k + 1], *grads[k], grad_in); },
                  {acts[k]->var, weights[k]->var, act_grads[k + 1]->var}, mutated, {.name = "backward"});
      engine.Push(
          [&, k] {
            for (std::size_t i = 0; i < weights[k]->data.size(); ++i) {
              weights[k]->data[i] -= kLearningRate * grads[k]->data[i];
            }
          },
          {grads[k]->var}, {weights[k]->var}, {.name = "sgd"});
    }
    if ((step + 1) % 20 == 0 || step == 0) {
      engine.WaitForVar(act_grads[3]->var);  // the loss op of this step has run
      const int width = 30, done = (step + 1) * width / options.steps;
      std::printf("[%.*s%*s] step %4d/%d  loss %.5f\n", done, "==============================", width - done, "",
                  step + 1, options.steps, static_cast<double>(losses[static_cast<std::size_t>(step)]));
    }
  }
  engine.WaitForAll();
  const std::size_t window = std::min<std::size_t>(10, losses.size());
  float first = 0, last = 0;
  for (std::size_t i = 0; i < window; ++i) {
    first += losses[i] / static_cast<float>(window);
    last += losses[losses.size() - 1 - i] / static_cast<float>(window);
  }
  std::printf("mean loss of the first and last %zu steps: %.5f -> %.5f (%.1fx lower)\n", window,
              static_cast<double>(first), static_cast<double>(last), static_cast<double>(first / last));
  if (options.check && !(last < first / 4)) {
    std::fprintf(stderr, "training_loop: the loss did not fall fourfold\n");
    return 1;
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "training_loop: %s\n", e.what());
  return 1;
}
