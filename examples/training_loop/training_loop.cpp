// A training loop written as engine ops: a 2 -> 64 -> 64 -> 3 ReLU perceptron learns the interleaved-spirals
// classification problem with minibatch SGD.
//
// Every weight, gradient, batch and activation is a Buffer: an engine variable plus memory from a pool. Each step
// pushes, in plain program order, the batch's allocation and upload, the forward pass, the loss, and per layer, top
// down, the backward op followed at once by that layer's SGD update, then the frees of the step's transient buffers.
// The engine runs each op as soon as its variables allow: the update of layer k runs while the backward pass of the
// layers below is still going, and the next batch's upload and forward start as soon as the updates they read are
// done. Nothing in this file synchronises by hand. The only wait is for an epoch's statistics, one epoch behind, to
// print them.
//
//   training_loop [--device cpu|streams|cuda] [--epochs N] [--batch N] [--rows N] [--workers N] [--trace FILE]
//                 [--trace-step N] [--replay [--dot FILE]] [--check]
//
// --replay trains twice from the same initial weights: first as above, then with one step captured as it is pushed
// (engine/graph.h: its buffers allocated and freed inside the capture, so planned once) and replayed steps times per
// epoch, each replay reading its batch through RunContext::replay. It prints the time per step of both and checks that
// every epoch's loss and accuracy are bitwise the same (they must be: the same kernels on the same data in an order the
// variables fix). On streams and cuda the step is a graph of stream ops, replayed as one stream op; on cuda it is
// recorded into a CUDA graph by its first replay and relaunched by the others, so there the batch's upload is pushed
// before each replay instead of captured (see train()).
//
// --trace-step N (with --trace) traces the N-th step of the first epoch of the pushed run alone (the engine idle before
// it, and its every op done when the trace stops, so the next step's ops do not overlap it) and prints the trace's
// critical path (Engine::TraceCriticalPath): which ops and waits set the step's length (docs/pictures.md).
//
// --dot FILE (with --replay) writes the captured step as a Graphviz DOT graph (Graph::write_dot): render it with
// `dot -Tpng FILE -o step.png` (docs/pictures.md shows it).
//
// --device cpu (default) runs the ops on a oneTBB thread pool; streams on simulated device streams (the host stream
// backend: CPU threads that behave like CUDA streams); cuda on the GPU's streams, when there is one. --trace writes a
// Chrome trace of the run (as DEPENGINE_TRACE does). --check exits with status 1 unless the last epoch's mean loss is
// at most a quarter of the first's and its accuracy is at least 90% (the example's self-test, run in CI), and, with
// --replay, unless the two runs agree bit for bit.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <fstream>
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
#if DEPENGINE_EXAMPLES_CUDA
#include <depengine/executors/cuda_stream/cuda_stream_backend.h>
#endif

namespace {

using depengine::Buffer;
using depengine::Var;
using depengine::examples::Device;

constexpr int kClasses = 3;
constexpr int kHidden = 64;
constexpr float kLearningRate = 0.5f;

struct Options {
  std::string device = "cpu";
  int epochs = 40;
  int batch = 50;
  int rows = 400;  // per class
  int workers = 0;
  std::string trace;
  std::string dot;
  int trace_step = 0;  // from 1; 0: trace the whole run (with --trace)
  bool replay = false;
  bool check = false;
};

Options parse(int argc, char** argv) {
  Options o;
  depengine::examples::Arguments args(argc, argv,
                                      "[--device cpu|streams|cuda] [--epochs N] [--batch N] [--rows N] [--workers N] "
                                      "[--trace FILE] [--trace-step N] [--replay [--dot FILE]] [--check]");
  while (args.next()) {
    if (args.is("--device")) {
      o.device = args.value();
    } else if (args.is("--epochs")) {
      o.epochs = args.positive();
    } else if (args.is("--batch")) {
      o.batch = args.positive();
    } else if (args.is("--rows")) {
      o.rows = args.positive();
    } else if (args.is("--workers")) {
      o.workers = args.positive();
    } else if (args.is("--trace")) {
      o.trace = args.value();
    } else if (args.is("--trace-step")) {
      o.trace_step = args.positive();
    } else if (args.is("--dot")) {
      o.dot = args.value();
    } else if (args.is("--replay")) {
      o.replay = true;
    } else if (args.is("--check")) {
      o.check = true;
    } else {
      args.unknown();
    }
  }
  if (!o.dot.empty() && !o.replay) throw std::invalid_argument("--dot draws the captured step: it needs --replay");
  if (o.trace_step > 0 && o.trace.empty()) throw std::invalid_argument("--trace-step needs --trace FILE");
  if (o.device != "cpu" && o.device != "streams" && o.device != "cuda") {
    throw std::invalid_argument("--device must be cpu, streams or cuda, not '" + o.device + "'");
  }
  return o;
}

// The engine's executors, by typed id (depengine/engine/executor_id.h).
struct Executors {
  depengine::ExecutorId<depengine::ThreadPoolExecutor> cpu;
  depengine::ExecutorId<depengine::StreamExecutor> streams;  // names nothing without a device
};

// A oneTBB pool; with a device, a stream executor on its backend. Their ids go to `ids`.
depengine::EngineOptions engine_options(const Options& options, Executors& ids) {
  depengine::EngineOptions engine;
  ids.cpu = engine.emplace<depengine::ThreadPoolExecutor>(depengine::ThreadPoolOptions{.workers = options.workers});
  std::unique_ptr<depengine::StreamBackend> backend;
  if (options.device == "streams") {
    backend = std::make_unique<depengine::HostStreamBackend>(depengine::HostStreamOptions{.devices = 1});
  } else if (options.device == "cuda") {
#if DEPENGINE_EXAMPLES_CUDA
    backend = std::make_unique<depengine::CudaStreamBackend>();
#else
    throw std::runtime_error("--device cuda: this build has no CUDA (configure with DEPENGINE_WITH_CUDA=ON)");
#endif
  }
  if (backend != nullptr) {
    // Throws StreamError, with the backend's reason, when there is no device.
    ids.streams = engine.emplace<depengine::StreamExecutor>(
        std::move(backend), depengine::StreamExecutorOptions{
                                .devices = 1, .compute_streams = 2, .copy_streams = 1, .name = options.device});
  }
  return engine;
}

void print_epoch(int epoch, int epochs, const std::vector<float>& stats, int steps, int batch, float& loss,
                 float& accuracy) {
  double loss_sum = 0, hits = 0;
  for (int s = 0; s < steps; ++s) {
    loss_sum += stats[static_cast<std::size_t>(2 * s)];
    hits += stats[static_cast<std::size_t>(2 * s + 1)];
  }
  loss = static_cast<float>(loss_sum / (steps * batch));
  accuracy = static_cast<float>(hits / (steps * batch));
  constexpr int kWidth = 30;
  const int done = (epoch + 1) * kWidth / epochs;
  std::printf("epoch %3d/%d [%s%s] loss %.4f  accuracy %5.1f%%\n", epoch + 1, epochs,
              std::string(static_cast<std::size_t>(done), '#').c_str(),
              std::string(static_cast<std::size_t>(kWidth - done), '.').c_str(), static_cast<double>(loss),
              100.0 * static_cast<double>(accuracy));
  std::fflush(stdout);
}

// The buffers of one step: the batch, the activations and the gradients of the layers' outputs.
struct StepBuffers {
  Buffer x, labels;
  Buffer acts[3];   // h1, h2, logits
  Buffer grads[3];  // d(loss)/d(output) of each layer

  StepBuffers(Device& device, int batch, int features, const std::vector<depengine::examples::Dense>& layers) {
    const auto rows = static_cast<std::size_t>(batch);
    x = depengine::examples::allocate_floats(device, rows * static_cast<std::size_t>(features));
    labels = depengine::examples::allocate_floats(device, rows);
    for (std::size_t k = 0; k < 3; ++k) {
      acts[k] = depengine::examples::allocate_floats(device, rows * static_cast<std::size_t>(layers[k].out));
      grads[k] = depengine::examples::allocate_floats(device, rows * static_cast<std::size_t>(layers[k].out));
    }
  }
  void free(depengine::Buffers& buffers) {
    for (Buffer* b : {&x, &labels, &acts[0], &acts[1], &acts[2], &grads[0], &grads[1], &grads[2]}) {
      buffers.deallocate(*b);
    }
  }
};

// Pushes one training step on `b`: the batch's upload (batch `slot`), the forward pass, the loss (into stats[slot]),
// and per layer, top down, the backward op followed at once by that layer's SGD update. Each layer's update runs while
// the layers below are still back-propagating, and the next batch's forward through this layer waits for it alone.
// A step's batch: its inputs and labels uploaded into the step's buffers.
void push_batch(Device& device, const depengine::examples::host::Dataset& data, StepBuffers& b,
                depengine::examples::StepSlot slot) {
  depengine::examples::push_upload(device, b.x, data.x.data(), b.x.bytes(), slot, "load x");
  depengine::examples::push_upload(device, b.labels, data.labels.data(), b.labels.bytes(), slot, "load labels");
}

// A step's arithmetic on its uploaded batch: forward, loss (into stats at the slot), and per layer backward and SGD.
void push_compute(Device& device, depengine::examples::Mlp& model, StepBuffers& b, const Buffer& stats,
                  depengine::examples::StepSlot slot, int batch) {
  auto& layers = model.layers;
  const Buffer* in = &b.x;
  for (std::size_t k = 0; k < 3; ++k) {
    depengine::examples::push_forward(device, layers[k], *in, b.acts[k], batch);
    in = &b.acts[k];
  }
  depengine::examples::push_loss(device, b.acts[2], b.labels, b.grads[2], stats, slot, batch, kClasses,
                                 1.0f / static_cast<float>(batch));
  for (int k = 2; k >= 0; --k) {
    const auto layer = static_cast<std::size_t>(k);
    depengine::examples::push_backward(device, layers[layer], k > 0 ? b.acts[layer - 1] : b.x, b.acts[layer],
                                       b.grads[layer], k > 0 ? &b.grads[layer - 1] : nullptr, batch);
    depengine::examples::push_sgd(device, layers[layer], kLearningRate);
  }
}

void push_step(Device& device, depengine::examples::Mlp& model, const depengine::examples::host::Dataset& data,
               StepBuffers& b, const Buffer& stats, depengine::examples::StepSlot slot, int batch) {
  push_batch(device, data, b, slot);
  push_compute(device, model, b, stats, slot, batch);
}

// What one training run printed and measured.
struct Run {
  std::vector<float> losses, accuracies;  // per epoch
  double seconds = 0;
  int steps = 0;  // per epoch
};

// Trains from the initial weights for options.epochs epochs: pushing every step (`replay` false) or replaying one
// captured step.
Run train(const Options& options, bool replay) {
  Executors ids;
  depengine::Engine engine(engine_options(options, ids));
  if (!options.trace.empty() && options.trace_step == 0) engine.StartTrace(options.trace);
  const bool on_streams = options.device != "cpu";
  const depengine::ExecutorRef where =
      on_streams ? depengine::ExecutorRef(ids.streams) : depengine::ExecutorRef(ids.cpu);
  depengine::Buffers buffers(engine, where);
  Device device{engine, buffers, 0, {.executor = where}};

  const depengine::examples::host::Dataset data = depengine::examples::host::make_spirals(kClasses, options.rows, 1);
  const int batch = options.batch;
  const int steps = data.rows / batch;
  if (steps < 1) throw std::invalid_argument("--batch is larger than the data set (" + std::to_string(data.rows) + ")");
  if (options.trace_step > steps) {
    throw std::invalid_argument("--trace-step " + std::to_string(options.trace_step) + " is past the epoch's " +
                                std::to_string(steps) + " steps");
  }
  depengine::examples::Mlp model(device, {data.features, kHidden, kHidden, kClasses}, 7);

  std::printf("training a %d-%d-%d-%d perceptron on %d spiral points, batch %d, %d epochs, on %s%s\n", data.features,
              kHidden, kHidden, kClasses, data.rows, batch, options.epochs, options.device.c_str(),
              replay ? ", one step captured and replayed" : "");
  const auto started = std::chrono::steady_clock::now();
  // Each epoch's statistics (loss sum and hits per step) are downloaded into one of two host arrays; the main thread
  // prints epoch e - 1 while epoch e runs.
  std::vector<float> host_stats[2] = {std::vector<float>(static_cast<std::size_t>(2 * steps)),
                                      std::vector<float>(static_cast<std::size_t>(2 * steps))};
  const Var downloaded[2] = {engine.NewVariable(), engine.NewVariable()};
  // Replayed: the step captured as a pushed step is, its buffers allocated and freed inside the capture (the graph's:
  // planned once, one block each for every replay), each replay reading its batch and writing its statistics through
  // RunContext::replay into one statistics buffer allocated once. On CUDA a replay launches the work its first replay
  // recorded, so what differs from step to step stays outside the graph: the step buffers are allocated once, outside,
  // the batch's upload is pushed before each replay, and the step's two statistics, which the graph's loss writes to a
  // scratch buffer, are copied to the step's place after it.
  const bool recorded = replay && options.device == "cuda";
  std::unique_ptr<StepBuffers> replayed;
  Buffer replayed_stats, scratch_stats;
  depengine::Graph step_graph;
  if (replay) {
    replayed_stats = depengine::examples::allocate_floats(device, static_cast<std::size_t>(2 * steps));
    if (recorded) {
      replayed = std::make_unique<StepBuffers>(device, batch, data.features, model.layers);
      scratch_stats = depengine::examples::allocate_floats(device, 2);
      step_graph = engine.Capture([&] { push_compute(device, model, *replayed, scratch_stats, 0, batch); });
    } else {
      step_graph = engine.Capture([&] {
        StepBuffers b(device, batch, data.features, model.layers);
        push_step(device, model, data, b, replayed_stats,
                  depengine::examples::StepSlot::replayed(static_cast<std::size_t>(steps)), batch);
        b.free(buffers);
      });
    }
  }
  if (replay && !options.dot.empty()) {
    std::ofstream out(options.dot);
    step_graph.write_dot(out);
    if (!out) throw std::runtime_error("cannot write the step's graph to '" + options.dot + "'");
    std::printf("the captured step's graph (%zu ops) written to %s\n", step_graph.size(), options.dot.c_str());
  }
  Run run;
  run.steps = steps;
  for (int epoch = 0; epoch <= options.epochs; ++epoch) {
    if (epoch < options.epochs && recorded) {
      for (int step = 0; step < steps; ++step) {
        push_batch(device, data, *replayed, static_cast<std::size_t>(step));
        engine.Replay(step_graph);
        depengine::examples::push_copy(device, scratch_stats, replayed_stats,
                                       static_cast<std::size_t>(2 * step) * sizeof(float), 2 * sizeof(float), "stats");
      }
      depengine::examples::push_download(device, replayed_stats, host_stats[epoch % 2].data(), replayed_stats.bytes(),
                                         downloaded[epoch % 2]);
    } else if (epoch < options.epochs && replay) {
      for (int step = 0; step < steps; ++step) engine.Replay(step_graph);
      depengine::examples::push_download(device, replayed_stats, host_stats[epoch % 2].data(), replayed_stats.bytes(),
                                         downloaded[epoch % 2]);
    } else if (epoch < options.epochs) {
      Buffer stats = depengine::examples::allocate_floats(device, static_cast<std::size_t>(2 * steps));
      for (int step = 0; step < steps; ++step) {
        const bool traced = epoch == 0 && step + 1 == options.trace_step;  // --trace-step: this step alone
        if (traced) {
          engine.WaitForAll();
          engine.StartTrace(options.trace);
        }
        StepBuffers b(device, batch, data.features, model.layers);
        push_step(device, model, data, b, stats, static_cast<std::size_t>(step), batch);
        b.free(buffers);
        if (traced) {
          engine.StopTrace();
          std::printf("step %d traced to %s; its %s", step + 1, options.trace.c_str(),
                      engine.TraceCriticalPath().c_str());
        }
      }
      depengine::examples::push_download(device, stats, host_stats[epoch % 2].data(), stats.bytes(),
                                         downloaded[epoch % 2]);
      buffers.deallocate(stats);
    }
    if (epoch > 0) {  // print the previous epoch, while this one runs
      engine.WaitForVar(downloaded[(epoch - 1) % 2]);
      float loss = 0, accuracy = 0;
      print_epoch(epoch - 1, options.epochs, host_stats[(epoch - 1) % 2], steps, batch, loss, accuracy);
      run.losses.push_back(loss);
      run.accuracies.push_back(accuracy);
    }
  }
  engine.WaitForAll();
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const float first_loss = run.losses.front(), loss = run.losses.back();
  std::printf("%d steps in %.2f s (%.0f us per step); mean loss %.4f -> %.4f (%.1fx lower), accuracy %.1f%%\n",
              steps * options.epochs, run.seconds, 1e6 * run.seconds / (steps * options.epochs),
              static_cast<double>(first_loss), static_cast<double>(loss), static_cast<double>(first_loss / loss),
              100.0 * static_cast<double>(run.accuracies.back()));
  const depengine::MemoryPoolStats pool = buffers.pool(0).stats();
  std::printf("memory: %llu fresh blocks, %llu reused without a wait, peak %zu KiB held\n",
              static_cast<unsigned long long>(pool.fresh_allocations),
              static_cast<unsigned long long>(pool.reuse_dominated + pool.reuse_complete), pool.peak_bytes_held / 1024);
  if (on_streams) {
    const depengine::StreamStats streams = engine.executor(ids.streams).stats();
    std::printf("streams: %llu ops issued, %llu device waits issued, %llu elided, %llu host synchronisations\n",
                static_cast<unsigned long long>(streams.ops_issued),
                static_cast<unsigned long long>(streams.waits_issued),
                static_cast<unsigned long long>(streams.waits_elided + streams.waits_complete),
                static_cast<unsigned long long>(streams.host_synchronizations));
  }
  if (replay) {
    step_graph = depengine::Graph();  // frees the buffers it planned
    buffers.deallocate(replayed_stats);
    if (recorded) {
      replayed->free(buffers);
      buffers.deallocate(scratch_stats);
    }
  }
  model.free(buffers);
  engine.WaitForAll();
  if (!options.trace.empty() && options.trace_step == 0) {
    engine.StopTrace();
    std::printf("trace written to %s\n", options.trace.c_str());
  }
  return run;
}

}  // namespace

int main(int argc, char** argv) try {
  const Options options = parse(argc, argv);
  const Run run = train(options, false);
  const float first_loss = run.losses.front(), loss = run.losses.back(), accuracy = run.accuracies.back();
  if (options.check && !(loss <= first_loss / 4 && accuracy >= 0.9f)) {
    std::fprintf(stderr,
                 "training_loop: check failed: the loss fell %.1fx (needs 4x) to accuracy %.1f%% (needs 90%%)\n",
                 static_cast<double>(first_loss / loss), 100.0 * static_cast<double>(accuracy));
    return 1;
  }
  if (!options.replay) return 0;
  std::printf("\n");
  const Run replayed = train(options, true);
  const double steps = static_cast<double>(run.steps) * options.epochs;
  const bool same = replayed.losses == run.losses && replayed.accuracies == run.accuracies;
  std::printf("per step: pushed %.1f us, replayed %.1f us (%.2fx); every epoch's loss and accuracy %s\n",
              1e6 * run.seconds / steps, 1e6 * replayed.seconds / steps, replayed.seconds / run.seconds,
              same ? "bitwise identical" : "DIFFER");
  if (options.check && !same) {
    std::fprintf(stderr, "training_loop: check failed: the replayed run's losses differ from the pushed run's\n");
    return 1;
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "training_loop: %s\n", e.what());
  return 1;
}
