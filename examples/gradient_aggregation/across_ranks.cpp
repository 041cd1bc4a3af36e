// gradient_aggregation --mpi: one replica of the perceptron per MPI rank, on the rank's CPU pool, each training on its
// slice of every global batch.
//
//   mpirun -np 4 gradient_aggregation --mpi [--epochs N] [--batch N] [--hidden N] [--check]
//
// Overlapped (what the engine is for): right after the backward op of layer k is pushed, the all-reduce of that
// layer's gradients (Communicator::AllReduceSum) and the SGD update follow. The engine starts the all-reduce as soon
// as the backward of layer k has run, while the backward of the layers below goes on, and each rank applies the same
// summed gradient, so the replicas stay equal. Then, from the same initial weights, the naive loop a framework without
// an engine writes: every backward first, then one all-reduce of all gradients (packed into one buffer), then the
// updates. It prints the time per step of both, the all-reduce's own time per step in the naive loop, and how much of
// it the overlapped loop hid behind compute ((naive - overlapped) / all-reduce). Finally every rank compares its
// weights with one process trained on the whole batch (plain loops): --check exits with status 1 on every rank if
// any weight differs by more than 1e-4 relative to the largest (MPI sums the slices' gradients in its own order, so
// the two agree to float rounding, not bit for bit).
#include "examples/gradient_aggregation/across_ranks.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <depengine/buffers/buffer.h>
#include <depengine/distributed/communicator.h>
#include <depengine/engine/engine.h>
#include <depengine/executors/mpi/mpi_executor.h>
#include <depengine/executors/threadpool/threadpool_executor.h>

#include "examples/common/dense_kernels.h"
#include "examples/common/mlp.h"
#include "examples/gradient_aggregation/reference.h"

namespace depengine::examples {
namespace {

constexpr int kClasses = 3;
constexpr float kLearningRate = 0.5f;
constexpr std::uint32_t kSeed = 7;
constexpr std::uint32_t kCompute = 0;
constexpr const char* kReduceW[3] = {"all-reduce dw 0", "all-reduce dw 1", "all-reduce dw 2"};
constexpr const char* kReduceB[3] = {"all-reduce db 0", "all-reduce db 1", "all-reduce db 2"};

using Clock = std::chrono::steady_clock;

struct Result {
  double step_us = 0;        // wall time per step
  double all_reduce_us = 0;  // the naive loop's all-reduce per step, from the end of the packing to the unpacking
  std::vector<std::vector<float>> parameters;
  std::vector<float> stats;  // per epoch: summed loss and hits over every rank
};

// One training run from the initial weights; `overlapped` picks the loop.
Result train(Engine& engine, Buffers& buffers, Communicator& world, const host::Dataset& data, const AcrossRanks& o,
             bool overlapped) {
  Device cpu{engine, buffers, 0, {.executor = kCompute}};
  const int slice = o.batch / world.size();
  const int steps = data.rows / o.batch;
  const std::vector<int> sizes = {data.features, o.hidden, o.hidden, kClasses};
  Mlp model(cpu, sizes, kSeed);
  std::size_t gradient_floats = 0;
  for (const Dense& layer : model.layers) gradient_floats += static_cast<std::size_t>((layer.in + 1) * layer.out);
  Buffer flat = allocate_floats(cpu, gradient_floats);  // the naive loop's one all-reduce
  std::vector<Clock::time_point> packed(static_cast<std::size_t>(steps * o.epochs));
  std::vector<Clock::time_point> unpacked(packed.size());
  Result result;
  const Var stats_read = engine.NewVariable();
  engine.WaitForAll();  // the model's uploads: not part of the timing
  const auto start = Clock::now();
  for (int epoch = 0; epoch < o.epochs; ++epoch) {
    Buffer stats = allocate_floats(cpu, static_cast<std::size_t>(2 * steps));
    for (int step = 0; step < steps; ++step) {
      const std::size_t row = static_cast<std::size_t>(step * o.batch + world.rank() * slice);
      Buffer x = allocate_floats(cpu, static_cast<std::size_t>(slice * data.features));
      Buffer labels = allocate_floats(cpu, static_cast<std::size_t>(slice));
      push_upload(cpu, x, data.x.data() + row * static_cast<std::size_t>(data.features), x.bytes(), "load x");
      push_upload(cpu, labels, data.labels.data() + row, labels.bytes(), "load labels");
      Buffer acts[3], grads[3];
      for (std::size_t k = 0; k < 3; ++k) {
        acts[k] = allocate_floats(cpu, static_cast<std::size_t>(slice * model.layers[k].out));
        push_forward(cpu, model.layers[k], k == 0 ? x : acts[k - 1], acts[k], slice);
      }
      grads[2] = allocate_floats(cpu, static_cast<std::size_t>(slice * kClasses));
      // The gradient of the mean loss over the global batch: the ranks' gradients add up to it.
      push_loss(cpu, acts[2], labels, grads[2], stats, static_cast<std::size_t>(step), slice, kClasses,
                1.0f / static_cast<float>(o.batch));
      for (std::size_t k = 3; k-- > 0;) {
        const Dense& layer = model.layers[k];
        if (k > 0) grads[k - 1] = allocate_floats(cpu, static_cast<std::size_t>(slice * layer.in));
        push_backward(cpu, layer, k > 0 ? acts[k - 1] : x, acts[k], grads[k], k > 0 ? &grads[k - 1] : nullptr, slice);
        if (overlapped) {
          world.AllReduceSum<float>(layer.dw, kReduceW[k]);
          world.AllReduceSum<float>(layer.db, kReduceB[k]);
          push_sgd(cpu, layer, kLearningRate);
        }
      }
      if (!overlapped) {
        std::vector<Var> gradients;
        for (const Dense& layer : model.layers) {
          gradients.push_back(layer.dw.var());
          gradients.push_back(layer.db.var());
        }
        const std::size_t at = static_cast<std::size_t>(epoch * steps + step);
        engine.Push(
            [&model, flat, &packed, at] {
              auto* to = static_cast<float*>(flat.data());
              for (const Dense& layer : model.layers) {
                to = std::copy_n(static_cast<const float*>(layer.dw.data()), layer.in * layer.out, to);
                to = std::copy_n(static_cast<const float*>(layer.db.data()), layer.out, to);
              }
              packed[at] = Clock::now();
            },
            gradients, {flat.var()}, {.context = {.executor = kCompute}, .name = "pack gradients"});
        world.AllReduceSum<float>(flat, "all-reduce gradients");
        engine.Push(
            [&model, flat, &unpacked, at] {
              unpacked[at] = Clock::now();
              const auto* from = static_cast<const float*>(flat.data());
              for (const Dense& layer : model.layers) {
                std::copy_n(from, layer.in * layer.out, static_cast<float*>(layer.dw.data()));
                from += layer.in * layer.out;
                std::copy_n(from, layer.out, static_cast<float*>(layer.db.data()));
                from += layer.out;
              }
            },
            {flat.var()}, gradients, {.context = {.executor = kCompute}, .name = "unpack gradients"});
        for (const Dense& layer : model.layers) push_sgd(cpu, layer, kLearningRate);
      }
      for (Buffer* b : {&x, &labels, &acts[0], &acts[1], &acts[2], &grads[0], &grads[1], &grads[2]}) {
        buffers.deallocate(*b);
      }
    }
    world.AllReduceSum<float>(stats, "all-reduce statistics");
    std::vector<float> epoch_stats(static_cast<std::size_t>(2 * steps));
    push_download(cpu, stats, epoch_stats.data(), stats.bytes(), stats_read);
    buffers.deallocate(stats);
    engine.WaitForVar(stats_read);
    float loss = 0, hits = 0;
    for (std::size_t i = 0; i < epoch_stats.size(); i += 2) {
      loss += epoch_stats[i];
      hits += epoch_stats[i + 1];
    }
    result.stats.push_back(loss);
    result.stats.push_back(hits);
  }
  engine.WaitForAll();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  result.step_us = 1e6 * seconds / (steps * o.epochs);
  if (!overlapped) {
    double total = 0;
    for (std::size_t i = 0; i < packed.size(); ++i)
      total += std::chrono::duration<double>(unpacked[i] - packed[i]).count();
    result.all_reduce_us = 1e6 * total / static_cast<double>(packed.size());
  }
  const Var downloaded = engine.NewVariable();
  for (const Dense& layer : model.layers) {
    for (const Buffer* b : {&layer.w, &layer.b}) {
      result.parameters.emplace_back(b->bytes() / sizeof(float));
      push_download(cpu, *b, result.parameters.back().data(), b->bytes(), downloaded);
    }
  }
  engine.WaitForVar(downloaded);
  model.free(buffers);
  buffers.deallocate(flat);
  engine.WaitForAll();
  return result;
}

// CPU workers per rank: the machine's hardware threads shared among the ranks on it (at least 1), unless
// DEPENGINE_CPU_WORKERS says otherwise. Ranks that each took every core would fight over them.
int workers_per_rank() {
  if (const char* env = std::getenv("DEPENGINE_CPU_WORKERS"); env != nullptr && *env != '\0') return 0;
  MPI_Comm local = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  int ranks_here = 1;
  MPI_Comm_size(local, &ranks_here);
  MPI_Comm_free(&local);
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / ranks_here);
}

int train_with_mpi(const AcrossRanks& o) {
  EngineOptions options;
  const ExecutorId<ThreadPoolExecutor> compute =
      options.emplace<ThreadPoolExecutor>(ThreadPoolOptions{.workers = workers_per_rank()});  // kCompute
  const ExecutorId<MpiExecutor> comm = options.emplace<MpiExecutor>();
  Engine engine(std::move(options));
  Buffers buffers(engine, compute);
  Communicator world(engine, comm);
  if (o.batch % world.size() != 0) {
    throw std::invalid_argument("--batch " + std::to_string(o.batch) + " is not a multiple of the " +
                                std::to_string(world.size()) + " ranks");
  }
  const host::Dataset data = host::make_spirals(kClasses, 400, 1);
  const int steps = data.rows / o.batch;
  if (steps < 1) throw std::invalid_argument("--batch is larger than the data set (" + std::to_string(data.rows) + ")");
  const bool report = world.rank() == 0;
  if (report) {
    std::printf(
        "data-parallel training on %d MPI ranks (%d CPU workers each): a 2-%d-%d-3 perceptron, global batch "
        "%d (%d rows per rank), %d epochs of %d steps\n",
        world.size(), engine.executor(compute).workers(), o.hidden, o.hidden, o.batch, o.batch / world.size(), o.epochs,
        steps);
  }
  const Result overlapped = train(engine, buffers, world, data, o, true);
  if (report) {
    for (int epoch = 0; epoch < o.epochs; ++epoch) {
      const auto e = static_cast<std::size_t>(2 * epoch);
      std::printf("epoch %2d/%d  loss %.4f  accuracy %5.1f%%\n", epoch + 1, o.epochs,
                  overlapped.stats[e] / static_cast<float>(steps * o.batch),
                  100.0 * overlapped.stats[e + 1] / (steps * o.batch));
    }
  }
  const Result naive = train(engine, buffers, world, data, o, false);
  const float relative = relative_difference(
      overlapped.parameters,
      train_on_one_device(
          data, {{data.features, o.hidden, o.hidden, kClasses}, o.batch, o.epochs, steps, kLearningRate, kSeed}));
  if (report) {
    const double hidden = (naive.step_us - overlapped.step_us) / naive.all_reduce_us;
    std::printf(
        "per step: overlapped %.0f us; naive (one all-reduce after backward) %.0f us, of which the all-reduce "
        "%.0f us; hidden behind compute: %.0f%% of the all-reduce (overlapped / naive %.2f)\n",
        overlapped.step_us, naive.step_us, naive.all_reduce_us, 100.0 * hidden, overlapped.step_us / naive.step_us);
    std::printf(
        "weights after %d steps: largest difference from one process on the whole batch %.3g relative "
        "(tolerance 1e-4)\n",
        steps * o.epochs, static_cast<double>(relative));
  }
  const int failed = o.check && !(relative <= 1e-4f) ? 1 : 0;
  int any_failed = 0;  // engine idle: the progress thread makes no MPI call now
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (any_failed != 0 && report) {
    std::fprintf(stderr, "gradient_aggregation: check failed: the weights differ from one-process training\n");
  }
  return any_failed;
}

}  // namespace

int train_across_ranks(int argc, char** argv, const AcrossRanks& options) {
  int provided = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  int status = 1;
  try {
    status = train_with_mpi(options);
  } catch (...) {
    MPI_Finalize();
    throw;
  }
  MPI_Finalize();
  return status;
}

}  // namespace depengine::examples
