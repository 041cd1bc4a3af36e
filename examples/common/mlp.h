// A multilayer perceptron as engine ops: what the training-loop and gradient-aggregation examples push. Every weight,
// gradient, activation and batch is a Buffer (buffers/buffer.h), so one model runs on a CPU executor (host
// memory, the arithmetic in the op itself), on host streams (the arithmetic launched as host work on the op's stream)
// and on CUDA streams (kernels on the op's stream), with the same ops and the same variables.
//
//   Device cpu{engine, buffers, 0, {}};                      // ops on executor 0, a CPU pool
//   Mlp model(cpu, {2, 64, 64, 3}, /*seed=*/1);              // pushes allocations and uploads
//   push_forward(cpu, model.layers[0], x, h, batch);        // reads x, w, b; mutates h
//
// The Mlp must outlive the ops pushed on its layers (they refer to its layers).
//
// Each push_* call pushes one op, named after the layer ("forward 1"), that reads and mutates exactly the buffers the
// arithmetic reads and writes: the engine orders everything else. Nothing here waits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <depengine/buffers/buffer.h>
#include <depengine/engine/engine.h>
#include <depengine/executors/stream/stream_backend.h>

namespace depengine::examples {

// Where a model's ops go: the engine, the Buffers its memory comes from, the Buffers device, and the context of its
// ops (an executor and, for a stream executor, the device and stream kind).
struct Device {
  Engine& engine;
  Buffers& buffers;
  std::uint32_t index = 0;
  Context context;
};

// A dense layer's parameters and their gradients, [in x out] and [out].
struct Dense {
  int in = 0, out = 0;
  bool relu = false;
  std::uint32_t number = 0;  // its index in the model, for op names
  Buffer w, b, dw, db;
};

// The layers of sizes[0] -> sizes[1] -> ... (ReLU on every layer but the last), at most 4 layers. The constructor
// pushes their allocation and the upload of He-normal weights (host::init_weights with seed + layer) and zero biases.
struct Mlp {
  Mlp(Device& device, const std::vector<int>& sizes, std::uint32_t seed);
  // Pushes the frees of every layer's buffers (after every op pushed on them).
  void free(Buffers& buffers);
  std::vector<Dense> layers;
};

// Which step of an epoch an op serves: `fixed`, given when it is pushed; or, in a step captured once and replayed
// (engine/graph.h), the replay's index modulo `steps` (RunContext::replay), so that one captured step reads batch k
// at its k-th replay.
struct StepSlot {
  StepSlot(std::size_t fixed_step) : fixed(fixed_step) {}  // NOLINT: implicit, a pushed step's index
  static StepSlot replayed(std::size_t steps_per_epoch) {
    StepSlot slot(0);
    slot.steps = steps_per_epoch;
    return slot;
  }
  [[nodiscard]] std::size_t at(const RunContext& ctx) const {
    return steps > 0 ? static_cast<std::size_t>(ctx.replay) % steps : fixed;
  }
  std::size_t fixed = 0;
  std::size_t steps = 0;  // > 0: from the replay
};

// A buffer of `count` floats (or int32s) on the device.
[[nodiscard]] Buffer allocate_floats(Device& device, std::size_t count);
// Copies `bytes` from host memory into `dst`; `host` must stay unchanged until the op has completed.
void push_upload(Device& device, const Buffer& dst, const void* host, std::size_t bytes, const char* name);
// Copies step slot.at()'s `bytes` of host memory, host + slot * bytes, into `dst` (a batch of a data set).
void push_upload(Device& device, const Buffer& dst, const void* host, std::size_t bytes, StepSlot slot,
                 const char* name);
// Copies `bytes` of `src` into `dst` at byte `offset`, on the device.
void push_copy(Device& device, const Buffer& src, const Buffer& dst, std::size_t offset, std::size_t bytes,
               const char* name);
// Copies `bytes` of `src` to host memory, readable once a wait on `done` (mutated by the op) has returned.
void push_download(Device& device, const Buffer& src, void* host, std::size_t bytes, Var done);

// y = act(x * w + b).
void push_forward(Device& device, const Dense& layer, const Buffer& x, const Buffer& y, int batch);
// dlogits = (softmax(logits) - onehot(labels)) * grad_scale; loss sum and hits into stats[2 * slot], [2 * slot + 1]
// (slot.at() when the op runs).
void push_loss(Device& device, const Buffer& logits, const Buffer& labels, const Buffer& dlogits, const Buffer& stats,
               StepSlot slot, int batch, int classes, float grad_scale);
// dw, db, and dx (unless null) from x, y = the layer's output, and dy. `launches` > 1 launches the same kernels that
// many times in the one op, each overwriting the outputs from the same inputs: the result is unchanged and the op
// takes `launches` times as long on its device (gradient_aggregation --skew). Throws std::invalid_argument if
// launches < 1.
void push_backward(Device& device, const Dense& layer, const Buffer& x, const Buffer& y, const Buffer& dy,
                   const Buffer* dx, int batch, int launches = 1);
// w -= learning_rate * dw, b -= learning_rate * db.
void push_sgd(Device& device, const Dense& layer, float learning_rate);

// For ops of one's own (inside an op's function, where it runs): copy `bytes` (memcpy on a CPU executor, an enqueued
// copy on a stream; any two devices' memory), and dst += src over n floats (src on the op's device).
void copy_on(const RunContext& ctx, void* dst, const void* src, std::size_t bytes, CopyDirection direction);
void add_on(const RunContext& ctx, float* dst, const float* src, int n);

}  // namespace depengine::examples
