// Helpers for the stream-executor tests: an engine with a CPU pool and a StreamExecutor over the host backend, a way
// for an op to enqueue host work on the stream it is issued on, and a gate that holds a stream until the test opens
// it (so that every op of a scenario is issued before any of it runs, and wait counts do not depend on timing).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <utility>

#include <depengine/engine/engine.h>
#include <depengine/executors/host_stream/host_stream_backend.h>
#include <depengine/executors/stream/stream_executor.h>
#include <depengine/executors/threadpool/threadpool_executor.h>

#include "test/test_support.h"

namespace depengine::test {

inline constexpr std::uint32_t kCpu = 0;     // Context::executor of the CPU pool
inline constexpr std::uint32_t kStream = 1;  // Context::executor of the stream executor

struct StreamEngineSetup {
  int devices = 1;
  std::uint32_t compute_streams = 2;
  std::uint32_t copy_streams = 0;
  std::uint32_t collective_channels = 0;
  int workers = 2;                                        // of the CPU pool
  std::chrono::nanoseconds launch_delay{0};               // simulated device time of every launch (HostStreamOptions)
  StreamCompletion completion = StreamCompletion::kAuto;  // kNotify on the host backend
  std::size_t max_in_flight = EngineOptions{}.max_in_flight;
  bool records_work = false;  // HostStreamOptions::records_work: graphs of stream ops are recorded once
};

// The typed ids of an engine built by stream_engine_options (engine/executor_id.h).
struct StreamEngineIds {
  ExecutorId<ThreadPoolExecutor> cpu;  // kCpu
  ExecutorId<StreamExecutor> streams;  // kStream
  HostStreamBackend* host = nullptr;   // the stream executor's backend (owned by it)
};

// An engine whose executor 0 is a oneTBB pool and executor 1 a StreamExecutor over a HostStreamBackend; their ids in
// *ids when given.
inline EngineOptions stream_engine_options(const StreamEngineSetup& setup = {}, StreamEngineIds* ids = nullptr) {
  EngineOptions options;
  const auto cpu = options.emplace<ThreadPoolExecutor>(ThreadPoolOptions{.workers = setup.workers});
  auto backend = std::make_unique<HostStreamBackend>(HostStreamOptions{
      .devices = setup.devices, .launch_delay = setup.launch_delay, .records_work = setup.records_work});
  HostStreamBackend* const host = backend.get();
  const auto streams = options.emplace<StreamExecutor>(
      std::move(backend), StreamExecutorOptions{.compute_streams = setup.compute_streams,
                                                .copy_streams = setup.copy_streams,
                                                .collective_channels = setup.collective_channels,
                                                .completion = setup.completion});
  if (ids != nullptr) *ids = StreamEngineIds{cpu, streams, host};
  options.max_in_flight = setup.max_in_flight;
  return options;
}

// An engine built from stream_engine_options(setup), with the typed ids of its two executors, for the tests that reach
// the stream executor itself.
class StreamEngine : public Engine {
 public:
  explicit StreamEngine(const StreamEngineSetup& setup = {}) : StreamEngine(setup, StreamEngineIds{}) {}

  [[nodiscard]] const StreamEngineIds& ids() const noexcept { return ids_; }

 private:
  // stream_engine_options fills `ids` while the base is built; ids_ copies it after.
  StreamEngine(const StreamEngineSetup& setup, StreamEngineIds ids)
      : Engine(stream_engine_options(setup, &ids)), ids_(ids) {}

  StreamEngineIds ids_;
};

inline StreamExecutor& stream_executor(const StreamEngine& engine) { return engine.executor(engine.ids().streams); }

inline HostStreamBackend& host_backend(const StreamEngine& engine) { return *engine.ids().host; }

// The context of a stream op: device, kind, and a stream index (-1: the executor chooses).
inline PushOptions on_stream(std::int32_t stream = -1, std::uint32_t device = 0,
                             StreamKind kind = StreamKind::kCompute) {
  PushOptions options;
  options.context = Context{.executor = kStream, .device = device, .stream_kind = kind, .stream = stream};
  return options;
}

// Inside a stream op's function: enqueues `fn` on the op's stream (the host backend's kernel launch).
template <class F>
void launch(const RunContext& ctx, F&& fn) {
  launch_host(*ctx.stream, HostTask(std::forward<F>(fn)));
}

// Holds a stream: enqueue hold() as host work, and the stream (and every stream waiting on it) stops there until
// open(). A hold that times out throws, failing its stream, so a broken test fails instead of hanging.
class StreamGate {
 public:
  void hold() const {
    // acquire: pairs with the release in open().
    if (!wait_until([this] { return open_.load(std::memory_order_acquire); })) throw std::runtime_error("gate timeout");
  }
  void open() { open_.store(true, std::memory_order_release); }

 private:
  std::atomic<bool> open_{false};
};

}  // namespace depengine::test
