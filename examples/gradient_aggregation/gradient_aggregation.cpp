// Data-parallel training on N devices, written as serial code: the MXNet design note's two-GPU network, generalised.
//
// Every device holds a replica of a 2 -> 64 -> 64 -> 3 perceptron (--hidden sets the 64) and trains on its slice of
// each batch. As soon as the backward op of layer k has been pushed on every device, the aggregation of layer k is
// pushed on the executor's collective channel (aggregate.h), which sums every device's gradients of that layer into
// the master's on device 0; the SGD update of the master weights follows on the channel, and so does the copy of the
// new weights back to every device. The devices go on with the layers below meanwhile; each device's next forward
// through layer k starts once its weights are back. Those ops wait for one device event, the channel's, however many
// devices took part: the collective signals one axis, not N.
//
//   gradient_aggregation [--devices N] [--device streams|cuda] [--aggregate accumulate|sum|alternate] [--skew]
//                        [--epochs N] [--batch N] [--hidden N] [--check]
//   mpirun -np N gradient_aggregation --mpi [--epochs N] [--batch N] [--hidden N] [--check]
//
// --aggregate accumulate (default): each device's slice is added into the master's gradients by an accumulation of
// its own (Engine::PushAccumulate, docs/accumulate.md) as soon as that device's backward of the layer is done and the
// accumulations before it on the channel have run (the channel runs them in the order they are issued, which is push
// order; with --skew, also the order the devices finish). --aggregate sum: one op reads every device's gradients, so it
// starts when the last device is done and then adds the N slices in series (the aggregation before accumulate existed).
// --aggregate alternate: accumulate in even epochs and sum in odd ones, to compare the two in one process, under the
// same load.
//
// --skew makes device d's backward d + 1 times slower, as if the devices were of different speeds: each backward op of
// device d launches its kernels d + 1 times (they overwrite their outputs from the same inputs, so the gradients do
// not change). It is real device work on host streams and on CUDA alike, not a sleep: on host streams it takes CPU
// time, which the simulated devices share with one another (4 devices on 2 cores are not 4 devices' worth of compute).
//
// The program prints the time per step of each aggregation it ran: the median over its epochs, the first left out
// (it fills the buffer pools), of the epoch's wall time divided by its steps.
// bench/examples/gradient_aggregation_skew.sh runs --aggregate alternate --skew several times and takes the medians.
//
// --mpi trains one replica per MPI rank instead, each rank's all-reduces overlapping its backward (across_ranks.cpp);
// --aggregate and --skew do not apply there.
//
// --device streams (default) simulates the devices with the host stream backend, so it runs anywhere; cuda uses the
// GPUs (--devices of them; by default every GPU present). At the end it trains the same model on one device with the
// whole batch (plain loops, no engine) and compares the weights: --check exits with status 1 if any weight differs by
// more than 1e-4 relative to the largest weight (the devices sum their slices' gradients in another order than one
// device sums the batch, so the two agree to float rounding, not bit for bit).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <depengine/buffers/buffer.h>
#include <depengine/engine/engine.h>
#include <depengine/executors/host_stream/host_stream_backend.h>
#include <depengine/executors/stream/stream_executor.h>
#include <depengine/executors/threadpool/threadpool_executor.h>

#include "examples/common/arguments.h"
#include "examples/common/dense_kernels.h"
#include "examples/common/mlp.h"
#include "examples/gradient_aggregation/aggregate.h"
#include "examples/gradient_aggregation/reference.h"
#if DEPENGINE_EXAMPLES_CUDA
#include <depengine/executors/cuda_stream/cuda_stream_backend.h>
#endif
#if DEPENGINE_EXAMPLES_MPI
#include "examples/gradient_aggregation/across_ranks.h"
#endif

namespace {

using depengine::Buffer;
using depengine::RunContext;
using depengine::StreamKind;
using depengine::Var;
using depengine::examples::Aggregate;
using depengine::examples::Dense;
using depengine::examples::Device;
namespace host = depengine::examples::host;

constexpr int kClasses = 3;
constexpr float kLearningRate = 0.5f;
constexpr std::uint32_t kSeed = 7;
constexpr const char* kBroadcast[3] = {"broadcast 0", "broadcast 1", "broadcast 2"};

struct Options {
  int devices = 0;  // 0 until parsed: 4 on streams, every GPU present on cuda
  std::string device = "streams";
  int epochs = 10;
  int batch = 100;  // the global batch, split evenly over the devices
  int hidden = 64;  // the width of the hidden layers
  Aggregate aggregate = Aggregate::kAccumulate;
  bool alternate = false;  // accumulate in even epochs, sum in odd ones
  bool skew = false;       // device d's backward d + 1 times slower
  bool mpi = false;        // one replica per MPI rank (across_ranks.h) instead of one per device
  bool check = false;
};

// The GPUs present; at least 1, so that a machine without any gets the stream executor's error, which says why.
int cuda_devices() {
#if DEPENGINE_EXAMPLES_CUDA
  return std::max(1, depengine::CudaStreamBackend().device_count());
#else
  return 1;
#endif
}

Options parse(int argc, char** argv) {
  Options o;
  depengine::examples::Arguments args(argc, argv,
                                      "[--devices N] [--device streams|cuda] [--aggregate accumulate|sum|alternate] "
                                      "[--skew] "
                                      "[--mpi] [--epochs N] [--batch N] [--hidden N] [--check]");
  bool aggregate_given = false;
  while (args.next()) {
    if (args.is("--devices")) {
      o.devices = args.positive();
    } else if (args.is("--device")) {
      o.device = args.value();
    } else if (args.is("--epochs")) {
      o.epochs = args.positive();
    } else if (args.is("--batch")) {
      o.batch = args.positive();
    } else if (args.is("--hidden")) {
      o.hidden = args.positive();
    } else if (args.is("--aggregate")) {
      const std::string mode = args.value();
      if (mode == "sum") {
        o.aggregate = Aggregate::kSum;
      } else if (mode == "alternate") {
        o.alternate = true;
      } else if (mode != "accumulate") {
        throw std::invalid_argument("--aggregate must be accumulate, sum or alternate, not '" + mode + "'");
      }
      aggregate_given = true;
    } else if (args.is("--skew")) {
      o.skew = true;
    } else if (args.is("--mpi")) {
      o.mpi = true;
    } else if (args.is("--check")) {
      o.check = true;
    } else {
      args.unknown();
    }
  }
  if (o.device != "streams" && o.device != "cuda") {
    throw std::invalid_argument("--device must be streams or cuda, not '" + o.device + "'");
  }
  if (o.mpi && (aggregate_given || o.skew)) {
    throw std::invalid_argument("--aggregate and --skew apply to devices, not to --mpi (one replica per rank)");
  }
  if (o.devices == 0) o.devices = o.device == "cuda" ? cuda_devices() : 4;
  // One compute stream per device and one collective channel, within an engine's streams (kMaxEngineAxes).
  if (o.devices > static_cast<int>(depengine::kMaxEngineAxes) - 1) {
    throw std::invalid_argument("--devices: at most " + std::to_string(depengine::kMaxEngineAxes - 1) +
                                " (an engine has at most " + std::to_string(depengine::kMaxEngineAxes) + " streams)");
  }
  if (!o.mpi && o.batch % o.devices != 0) throw std::invalid_argument("--batch must be a multiple of --devices");
  return o;
}

// A CPU pool and the stream executor, whose typed id goes to `streams`.
depengine::EngineOptions engine_options(const Options& options,
                                        depengine::ExecutorId<depengine::StreamExecutor>& streams) {
  depengine::EngineOptions engine;
  engine.emplace<depengine::ThreadPoolExecutor>();
  std::unique_ptr<depengine::StreamBackend> backend;
  if (options.device == "streams") {
    backend = std::make_unique<depengine::HostStreamBackend>(depengine::HostStreamOptions{.devices = options.devices});
  } else {
#if DEPENGINE_EXAMPLES_CUDA
    backend = std::make_unique<depengine::CudaStreamBackend>();
#else
    throw std::runtime_error("--device cuda: this build has no CUDA (configure with DEPENGINE_WITH_CUDA=ON)");
#endif
  }
  // One compute stream per device and one collective channel. Throws StreamError when there are fewer devices.
  streams = engine.emplace<depengine::StreamExecutor>(std::move(backend),
                                                      depengine::StreamExecutorOptions{.devices = options.devices,
                                                                                       .compute_streams = 1,
                                                                                       .copy_streams = 0,
                                                                                       .collective_channels = 1,
                                                                                       .name = options.device});
  return engine;
}

// --mpi: one replica per MPI rank instead of one per device (across_ranks.cpp).
int run_across_ranks(int argc, char** argv, const Options& options) {
#if DEPENGINE_EXAMPLES_MPI
  return depengine::examples::train_across_ranks(argc, argv,
                                                 {options.epochs, options.batch, options.hidden, options.check});
#else
  (void)argc, (void)argv, (void)options;
  throw std::runtime_error("--mpi: this build has no MPI (install libopenmpi-dev; DEPENGINE_WITH_MPI)");
#endif
}

}  // namespace

int main(int argc, char** argv) try {
  const Options options = parse(argc, argv);
  if (options.mpi) return run_across_ranks(argc, argv, options);
  depengine::ExecutorId<depengine::StreamExecutor> stream_id;
  depengine::Engine engine(engine_options(options, stream_id));
  depengine::StreamExecutor& streams = engine.executor(stream_id);
  depengine::Buffers buffers(engine, stream_id);
  const int n = options.devices;
  std::vector<Device> devices;
  for (int d = 0; d < n; ++d) {
    devices.push_back(Device{engine,
                             buffers,
                             static_cast<std::uint32_t>(d),
                             {.executor = stream_id, .device = static_cast<std::uint32_t>(d)}});
  }
  // The master copy of the model lives on device 0 and is updated by ops on the collective channel.
  Device channel{engine, buffers, 0, {.executor = stream_id, .device = 0, .stream_kind = StreamKind::kCollective}};

  const host::Dataset data = host::make_spirals(kClasses, 400, 1);
  const int batch = options.batch, slice = batch / n;
  const int steps = data.rows / batch;
  if (steps < 1) throw std::invalid_argument("--batch is larger than the data set (" + std::to_string(data.rows) + ")");
  const std::vector<int> sizes = {data.features, options.hidden, options.hidden, kClasses};
  depengine::examples::Mlp master(channel, sizes, kSeed);
  std::vector<std::unique_ptr<depengine::examples::Mlp>> replicas;
  for (Device& device : devices) replicas.push_back(std::make_unique<depengine::examples::Mlp>(device, sizes, kSeed));
  std::vector<Buffer> scratch;  // on device 0: one device's gradients of a layer, on their way into the sum
  for (const Dense& layer : master.layers) {
    scratch.push_back(
        depengine::examples::allocate_floats(channel, static_cast<std::size_t>((layer.in + 1) * layer.out)));
  }
  // Per layer, the step whose sum --aggregate accumulate last started (aggregate.h): none yet.
  std::vector<std::uint64_t> started(master.layers.size(), ~std::uint64_t{0});

  std::printf(
      "data-parallel training on %d %s devices: global batch %d (%d rows per device), %d epochs of %d steps; "
      "aggregate: %s%s\n",
      n, options.device.c_str(), batch, slice, options.epochs, steps,
      options.alternate ? "alternate (accumulate in even epochs, sum in odd ones)"
                        : depengine::examples::aggregate_name(options.aggregate),
      options.skew ? ", skewed (device d's backward d + 1 times)" : "");
  // Per aggregation, indexed by Aggregate: each epoch's wall time / steps, the first epoch's left out.
  std::vector<double> step_us[2];
  std::vector<float> host_stats(static_cast<std::size_t>(2 * n * steps));
  const Var stats_read = engine.NewVariable();
  for (int epoch = 0; epoch < options.epochs; ++epoch) {
    const auto epoch_start = std::chrono::steady_clock::now();
    const Aggregate aggregate =
        options.alternate ? (epoch % 2 == 0 ? Aggregate::kAccumulate : Aggregate::kSum) : options.aggregate;
    std::vector<Buffer> stats;
    for (Device& device : devices)
      stats.push_back(depengine::examples::allocate_floats(device, static_cast<std::size_t>(2 * steps)));
    for (int step = 0; step < steps; ++step) {
      // Forward and loss on every device, on its slice of the batch.
      struct Step {
        Buffer x, labels, acts[3], grads[3];
      };
      std::vector<Step> work(static_cast<std::size_t>(n));
      for (int d = 0; d < n; ++d) {
        Device& device = devices[static_cast<std::size_t>(d)];
        Step& s = work[static_cast<std::size_t>(d)];
        const auto& layers = replicas[static_cast<std::size_t>(d)]->layers;
        const std::size_t row = static_cast<std::size_t>(step * batch + d * slice);
        s.x = depengine::examples::allocate_floats(device, static_cast<std::size_t>(slice * data.features));
        s.labels = depengine::examples::allocate_floats(device, static_cast<std::size_t>(slice));
        depengine::examples::push_upload(device, s.x, data.x.data() + row * static_cast<std::size_t>(data.features),
                                         s.x.bytes(), "load x");
        depengine::examples::push_upload(device, s.labels, data.labels.data() + row, s.labels.bytes(), "load labels");
        for (std::size_t k = 0; k < 3; ++k) {
          s.acts[k] = depengine::examples::allocate_floats(device, static_cast<std::size_t>(slice * layers[k].out));
          depengine::examples::push_forward(device, layers[k], k == 0 ? s.x : s.acts[k - 1], s.acts[k], slice);
        }
        s.grads[2] = depengine::examples::allocate_floats(device, static_cast<std::size_t>(slice * kClasses));
        // The gradient of the mean loss over the global batch: the devices' gradients add up to it.
        depengine::examples::push_loss(device, s.acts[2], s.labels, s.grads[2], stats[static_cast<std::size_t>(d)],
                                       static_cast<std::size_t>(step), slice, kClasses,
                                       1.0f / static_cast<float>(batch));
      }
      // Backward, top layer first; each layer's all-reduce, update and broadcast as soon as its backward is pushed.
      for (std::size_t k = 3; k-- > 0;) {
        for (int d = 0; d < n; ++d) {
          Step& s = work[static_cast<std::size_t>(d)];
          const Dense& layer = replicas[static_cast<std::size_t>(d)]->layers[k];
          Buffer* dx = nullptr;
          if (k > 0) {
            s.grads[k - 1] = depengine::examples::allocate_floats(devices[static_cast<std::size_t>(d)],
                                                                  static_cast<std::size_t>(slice * layer.in));
            dx = &s.grads[k - 1];
          }
          depengine::examples::push_backward(devices[static_cast<std::size_t>(d)], layer, k > 0 ? s.acts[k - 1] : s.x,
                                             s.acts[k], s.grads[k], dx, slice, options.skew ? d + 1 : 1);
        }
        // Layer k's gradients summed into the master's on the channel, by one op or by one accumulation per device.
        depengine::examples::push_aggregate(aggregate, channel, replicas, master, k, scratch[k],
                                            static_cast<std::uint64_t>(epoch * steps + step), started[k]);
        const Dense& into = master.layers[k];
        depengine::examples::push_sgd(channel, into, kLearningRate);
        // Weights back to every device: the broadcast mutates every replica's weights of layer k.
        std::vector<Var> replica_weights;
        for (const auto& replica : replicas) {
          replica_weights.push_back(replica->layers[k].w.var());
          replica_weights.push_back(replica->layers[k].b.var());
        }
        engine.Push(
            [&replicas, &into, k](const RunContext& ctx) {
              for (const auto& replica : replicas) {
                const Dense& to = replica->layers[k];
                depengine::examples::copy_on(ctx, to.w.data(), into.w.data(), to.w.bytes(),
                                             depengine::CopyDirection::kDeviceToDevice);
                depengine::examples::copy_on(ctx, to.b.data(), into.b.data(), to.b.bytes(),
                                             depengine::CopyDirection::kDeviceToDevice);
              }
            },
            {into.w.var(), into.b.var()}, replica_weights, {.context = channel.context, .name = kBroadcast[k]});
      }
      for (Step& s : work) {
        for (Buffer* b : {&s.x, &s.labels, &s.acts[0], &s.acts[1], &s.acts[2], &s.grads[0], &s.grads[1], &s.grads[2]}) {
          buffers.deallocate(*b);
        }
      }
    }
    for (int d = 0; d < n; ++d) {
      Buffer& s = stats[static_cast<std::size_t>(d)];
      depengine::examples::push_download(devices[static_cast<std::size_t>(d)], s,
                                         host_stats.data() + static_cast<std::size_t>(2 * d * steps), s.bytes(),
                                         stats_read);
      buffers.deallocate(s);
    }
    engine.WaitForVar(stats_read);  // the epoch's statistics: the one wait of the loop
    if (epoch > 0 || options.epochs == 1) {
      step_us[static_cast<int>(aggregate)].push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - epoch_start).count() / steps);
    }
    double loss = 0, hits = 0;
    for (std::size_t i = 0; i < host_stats.size(); i += 2) {
      loss += host_stats[i];
      hits += host_stats[i + 1];
    }
    std::printf("epoch %2d/%d  loss %.4f  accuracy %5.1f%%\n", epoch + 1, options.epochs, loss / (steps * batch),
                100.0 * hits / (steps * batch));
  }

  // What a device's forward through layer 0 now waits for: the broadcast's signal, one entry on the channel.
  std::string frontier;
  engine.Push(
      [&](const RunContext& ctx) {
        for (const depengine::FrontierEntry& entry : *ctx.waits) {
          frontier +=
              (frontier.empty() ? "" : ", ") + streams.axis_name(entry.axis) + ": " + std::to_string(entry.epoch);
        }
      },
      {replicas.back()->layers[0].w.var()}, {}, {.context = devices.back().context, .name = "probe"});
  engine.WaitForAll();
  const depengine::StreamStats total = streams.stats();
  const depengine::StreamStats on_channel = streams.stats(0, StreamKind::kCollective, 0);
  std::printf(
      "device waits: %llu issued, %llu elided (the channel issued %llu, at most one per device per all-reduce); "
      "%llu host synchronisations\n",
      static_cast<unsigned long long>(total.waits_issued),
      static_cast<unsigned long long>(total.waits_elided + total.waits_complete),
      static_cast<unsigned long long>(on_channel.waits_issued),
      static_cast<unsigned long long>(total.host_synchronizations));
  std::printf("device %d's next forward waits for {%s}\n", n - 1, frontier.c_str());
  for (const Aggregate aggregate : {Aggregate::kAccumulate, Aggregate::kSum}) {
    std::vector<double>& times = step_us[static_cast<int>(aggregate)];
    if (times.empty()) continue;
    std::sort(times.begin(), times.end());
    const std::size_t mid = times.size() / 2;
    const double median = times.size() % 2 == 1 ? times[mid] : (times[mid - 1] + times[mid]) / 2;
    std::printf("step time, aggregate %s%s: %.0f us (median of %zu epochs)\n",
                depengine::examples::aggregate_name(aggregate), options.skew ? ", skewed" : "", median, times.size());
  }

  // Compare with one device on the whole batch.
  std::vector<std::vector<float>> trained;
  const Var downloaded = engine.NewVariable();
  for (const Dense& layer : master.layers) {
    for (const Buffer* b : {&layer.w, &layer.b}) {
      trained.emplace_back(b->bytes() / sizeof(float));
      depengine::examples::push_download(channel, *b, trained.back().data(), b->bytes(), downloaded);
    }
  }
  engine.WaitForVar(downloaded);
  const float relative = depengine::examples::relative_difference(
      trained,
      depengine::examples::train_on_one_device(data, {sizes, batch, options.epochs, steps, kLearningRate, kSeed}));
  std::printf(
      "weights after %d steps: largest difference from one device on the whole batch %.3g relative "
      "(tolerance 1e-4)\n",
      steps * options.epochs, static_cast<double>(relative));

  master.free(buffers);
  for (auto& replica : replicas) replica->free(buffers);
  for (Buffer& b : scratch) buffers.deallocate(b);
  engine.WaitForAll();
  if (options.check && !(relative <= 1e-4f)) {
    std::fprintf(stderr, "gradient_aggregation: check failed: the weights differ from single-device training by %.3g\n",
                 static_cast<double>(relative));
    return 1;
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "gradient_aggregation: %s\n", e.what());
  return 1;
}
