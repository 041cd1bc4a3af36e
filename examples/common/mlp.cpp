#include "examples/common/mlp.h"

#include <cstring>
#include <memory>
#include <stdexcept>
#include <utility>

#include <depengine/executors/host_stream/host_stream_backend.h>
#include <depengine/executors/stream/stream_executor.h>

#include "examples/common/dense_kernels.h"
#if DEPENGINE_EXAMPLES_CUDA
#include "examples/common/dense_kernels_cuda.h"
#endif

namespace depengine::examples {
namespace {

constexpr std::size_t kMaxLayers = 4;
// Op names must outlive their ops: one table per kind of op.
constexpr const char* kForward[kMaxLayers] = {"forward 0", "forward 1", "forward 2", "forward 3"};
constexpr const char* kBackward[kMaxLayers] = {"backward 0", "backward 1", "backward 2", "backward 3"};
constexpr const char* kSgd[kMaxLayers] = {"sgd 0", "sgd 1", "sgd 2", "sgd 3"};

PushOptions on(const Device& device, const char* name) {
  PushOptions options;
  options.context = device.context;
  options.name = name;
  return options;
}

float* floats(const Buffer& buffer) { return static_cast<float*>(buffer.data()); }

// Does an op's arithmetic where the op runs: here, on a CPU executor; as host work on its host stream; or as CUDA
// kernels on its CUDA stream. Buffer pointers are read by the caller, at run or issue time, after the allocations.
template <class Host, class Cuda>
void on_device(const RunContext& ctx, Host&& host, [[maybe_unused]] Cuda&& cuda) {
  if (ctx.stream == nullptr) {
    host();
    return;
  }
  if (HostStreamBackend::of(*ctx.stream) != nullptr) {
    launch_host(*ctx.stream, HostTask(std::forward<Host>(host)));
    return;
  }
#if DEPENGINE_EXAMPLES_CUDA
  cuda(ctx.stream->native);
#else
  throw std::runtime_error(std::string(ctx.stream->backend->name()) + " stream: the examples were built without CUDA");
#endif
}

}  // namespace

Buffer allocate_floats(Device& device, std::size_t count) {
  return device.buffers.allocate(count * sizeof(float), device.index, device.context.stream,
                                 device.context.stream_kind);
}

Mlp::Mlp(Device& device, const std::vector<int>& sizes, std::uint32_t seed) {
  if (sizes.size() < 2 || sizes.size() > kMaxLayers + 1) throw std::invalid_argument("Mlp: 1 to 4 layers");
  for (std::size_t k = 0; k + 1 < sizes.size(); ++k) {
    Dense layer{sizes[k], sizes[k + 1], k + 2 < sizes.size(), static_cast<std::uint32_t>(k)};
    const auto weights = static_cast<std::size_t>(layer.in) * static_cast<std::size_t>(layer.out);
    layer.w = allocate_floats(device, weights);
    layer.b = allocate_floats(device, static_cast<std::size_t>(layer.out));
    layer.dw = allocate_floats(device, weights);
    layer.db = allocate_floats(device, static_cast<std::size_t>(layer.out));
    // The initial values live until the uploads have completed: the ops own them.
    auto initial = std::make_shared<std::vector<float>>(weights + static_cast<std::size_t>(layer.out), 0.0f);
    host::init_weights(initial->data(), layer.in, layer.out, seed + static_cast<std::uint32_t>(k));
    device.engine.Push(
        [initial, w = layer.w, b = layer.b, weights](const RunContext& ctx) {
          copy_on(ctx, w.data(), initial->data(), weights * sizeof(float), CopyDirection::kHostToDevice);
          copy_on(ctx, b.data(), initial->data() + weights, b.bytes(), CopyDirection::kHostToDevice);
        },
        {}, {layer.w.var(), layer.b.var()}, on(device, "init"));
    layers.push_back(std::move(layer));
  }
}

void Mlp::free(Buffers& buffers) {
  for (Dense& layer : layers) {
    for (Buffer* b : {&layer.w, &layer.b, &layer.dw, &layer.db}) buffers.deallocate(*b);
  }
}

void push_upload(Device& device, const Buffer& dst, const void* host, std::size_t bytes, const char* name) {
  device.engine.Push(
      [dst, host, bytes](const RunContext& ctx) {
        copy_on(ctx, dst.data(), host, bytes, CopyDirection::kHostToDevice);
      },
      {}, {dst.var()}, on(device, name));
}

void push_upload(Device& device, const Buffer& dst, const void* host, std::size_t bytes, StepSlot slot,
                 const char* name) {
  device.engine.Push(
      [dst, host, bytes, slot](const RunContext& ctx) {
        copy_on(ctx, dst.data(), static_cast<const char*>(host) + slot.at(ctx) * bytes, bytes,
                CopyDirection::kHostToDevice);
      },
      {}, {dst.var()}, on(device, name));
}

void push_copy(Device& device, const Buffer& src, const Buffer& dst, std::size_t offset, std::size_t bytes,
               const char* name) {
  device.engine.Push(
      [src, dst, offset, bytes](const RunContext& ctx) {
        copy_on(ctx, static_cast<char*>(dst.data()) + offset, src.data(), bytes, CopyDirection::kDeviceToDevice);
      },
      {src.var()}, {dst.var()}, on(device, name));
}

void push_download(Device& device, const Buffer& src, void* host, std::size_t bytes, Var done) {
  device.engine.Push(
      [src, host, bytes](const RunContext& ctx) {
        copy_on(ctx, host, src.data(), bytes, CopyDirection::kDeviceToHost);
      },
      {src.var()}, {done}, on(device, "download"));
}

void push_forward(Device& device, const Dense& layer, const Buffer& x, const Buffer& y, int batch) {
  device.engine.Push(
      [&layer, x, y, batch](const RunContext& ctx) {
        const float *px = floats(x), *pw = floats(layer.w), *pb = floats(layer.b);
        float* py = floats(y);
        const int in = layer.in, out = layer.out;
        const bool relu = layer.relu;
        on_device(
            ctx, [=] { host::dense_forward(px, pw, pb, py, batch, in, out, relu); },
            [=]([[maybe_unused]] void* stream) {
#if DEPENGINE_EXAMPLES_CUDA
              cuda::dense_forward(px, pw, pb, py, batch, in, out, relu, stream);
#endif
            });
      },
      {x.var(), layer.w.var(), layer.b.var()}, {y.var()}, on(device, kForward[layer.number]));
}

void push_loss(Device& device, const Buffer& logits, const Buffer& labels, const Buffer& dlogits, const Buffer& stats,
               StepSlot slot, int batch, int classes, float grad_scale) {
  device.engine.Push(
      [=](const RunContext& ctx) {
        const float* pl = floats(logits);
        const auto* py = static_cast<const std::int32_t*>(labels.data());
        float *pd = floats(dlogits), *ps = floats(stats) + 2 * slot.at(ctx);
        on_device(
            ctx, [=] { host::softmax_cross_entropy(pl, py, pd, ps, batch, classes, grad_scale); },
            [=]([[maybe_unused]] void* stream) {
#if DEPENGINE_EXAMPLES_CUDA
              cuda::softmax_cross_entropy(pl, py, pd, ps, batch, classes, grad_scale, stream);
#endif
            });
      },
      {logits.var(), labels.var()}, {dlogits.var(), stats.var()}, on(device, "loss"));
}

void push_backward(Device& device, const Dense& layer, const Buffer& x, const Buffer& y, const Buffer& dy,
                   const Buffer* dx, int batch, int launches) {
  if (launches < 1) throw std::invalid_argument("push_backward: launches must be at least 1");
  std::vector<Var> mutates = {layer.dw.var(), layer.db.var()};
  if (dx != nullptr) mutates.push_back(dx->var());
  device.engine.Push(
      [&layer, x, y, dy, dx = dx != nullptr ? *dx : Buffer{}, batch, launches](const RunContext& ctx) {
        const float *px = floats(x), *pw = floats(layer.w), *py = floats(y), *pdy = floats(dy);
        float *pdw = floats(layer.dw), *pdb = floats(layer.db), *pdx = floats(dx);
        const int in = layer.in, out = layer.out;
        const bool relu = layer.relu;
        // Separate launches rather than one kernel looping: on a stream each is device work of its own, as a slower
        // device's longer kernel would be; the outputs are written whole each time, never accumulated.
        for (int launch = 0; launch < launches; ++launch) {
          on_device(
              ctx, [=] { host::dense_backward(px, pw, py, pdy, pdw, pdb, pdx, batch, in, out, relu); },
              [=]([[maybe_unused]] void* stream) {
#if DEPENGINE_EXAMPLES_CUDA
                cuda::dense_backward(px, pw, py, pdy, pdw, pdb, pdx, batch, in, out, relu, stream);
#endif
              });
        }
      },
      {x.var(), y.var(), dy.var(), layer.w.var()}, mutates, on(device, kBackward[layer.number]));
}

void push_sgd(Device& device, const Dense& layer, float learning_rate) {
  device.engine.Push(
      [&layer, learning_rate](const RunContext& ctx) {
        float *pw = floats(layer.w), *pb = floats(layer.b);
        const float *pdw = floats(layer.dw), *pdb = floats(layer.db);
        const int weights = layer.in * layer.out, biases = layer.out;
        on_device(
            ctx,
            [=] {
              host::sgd(pw, pdw, weights, learning_rate);
              host::sgd(pb, pdb, biases, learning_rate);
            },
            [=]([[maybe_unused]] void* stream) {
#if DEPENGINE_EXAMPLES_CUDA
              cuda::sgd(pw, pdw, weights, learning_rate, stream);
              cuda::sgd(pb, pdb, biases, learning_rate, stream);
#endif
            });
      },
      {layer.dw.var(), layer.db.var()}, {layer.w.var(), layer.b.var()}, on(device, kSgd[layer.number]));
}

void copy_on(const RunContext& ctx, void* dst, const void* src, std::size_t bytes, CopyDirection direction) {
  if (ctx.stream == nullptr) {
    std::memcpy(dst, src, bytes);
  } else {
    ctx.stream->backend->copy(ctx.stream->stream, dst, src, bytes, direction);
  }
}

void add_on(const RunContext& ctx, float* dst, const float* src, int n) {
  on_device(
      ctx, [=] { host::add_into(dst, src, n); },
      [=]([[maybe_unused]] void* stream) {
#if DEPENGINE_EXAMPLES_CUDA
        cuda::add_into(dst, src, n, stream);
#endif
      });
}

}  // namespace depengine::examples
