// The executors every engine-level test runs on: one conformance suite, written once, that each executor must pass.
//
// A test loops over executor_factories() and opens a DYNAMIC_SECTION per factory, so a failure names the executor:
//
//   for (const auto& factory : depengine::test::executor_factories()) {
//     DYNAMIC_SECTION(factory.name) {
//       depengine::Engine engine(factory.options());
//       ...
//     }
//   }
//
// A new executor joins the suite by adding one line to the list below, with its capabilities (ExecutorFactory): a
// test skips exactly the part that needs a capability the executor lacks, and checks the executor's documented
// behaviour instead where there is one (check_async_refused() for PushAsync).
#pragma once

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <depengine/engine/engine.h>
#include <depengine/executors/executor.h>
#include <depengine/executors/host_stream/host_stream_backend.h>
#include <depengine/executors/inline_executor.h>
#include <depengine/executors/stream/stream_executor.h>
#include <depengine/executors/threadpool/threadpool_executor.h>

#include "test/executors/stream/stream_test_support.h"

namespace depengine::test {

struct ExecutorFactory {
  std::string name;
  std::function<std::unique_ptr<Executor>()> make;
  // Threads of the executor's own that run ops' functions concurrently: 0 where functions run on the threads that
  // push ops or make them ready (inline; a stream executor, whose functions run when ops are issued, on the issuing
  // thread), the worker count for a pool.
  int workers = 0;

  // Capabilities. Each is true for the CPU executors; a test that needs one skips that part where it is false, and
  // checks what the executor does instead where that is documented.

  // Takes asynchronous ops (PushAsync). A stream executor does not: its ops complete when the device work they
  // enqueued on their stream does, which a Completion called from anywhere cannot take part in, so the engine
  // refuses the push with Error (engine/detail/engine_core.cpp, make_record; executors/executor.h, issues_ahead()).
  bool takes_async = true;
  // Runs the functions of two ready ops at the same time (on two pushing threads, or on workers). A stream executor
  // does not: one thread at a time issues its ops, in submission order (stream_executor.h, "Issue order and
  // threads"); their concurrency is on the device, after their functions have returned.
  bool concurrent_ops = true;
  // Runs an op's function only once every op it depends on (through a variable or a fence) has completed, so the
  // function sees their signal fences raised. A stream executor runs the function when it issues the op, as soon as
  // those ops are issued: their device work, and so their completion, may still be pending (the stream waits for it
  // on the device; stream_executor.h, "Waits"). Everything their functions did is visible either way.
  bool runs_after_completion = true;

  // Not a capability: roughly how many times a CPU pool's time an op takes here, in the tests that push the most ops
  // (back_pressure_test's million, the mixed RandSum), which divide their op counts by it to keep the suite within
  // its time budget (test/test_support.h, sized()). A stream op wakes its stream's thread to record its event and
  // notify the completion thread, which completes it: on host streams the million independent ops took 5 to 20
  // times as long as on a pool, and a CPU op that follows a stream op waits for that round trip.
  std::size_t op_cost = 1;

  // Not a capability: EngineOptions::help_above for engines of this factory (0: off, the default). Kept under the
  // bound a test asks for (an engine refuses help_above >= max_in_flight); off when that bound is 1.
  std::size_t help_above = 0;

  // Engine options with this executor alone.
  [[nodiscard]] EngineOptions options(std::size_t max_in_flight = EngineOptions{}.max_in_flight) const {
    EngineOptions result;
    result.executors.push_back(make());
    result.max_in_flight = max_in_flight;
    result.help_above = std::min(help_above, max_in_flight - 1);
    return result;
  }
};

inline ExecutorFactory inline_factory() {
  return {"inline", [] { return std::make_unique<InlineExecutor>(); }, 0};
}

inline ExecutorFactory threadpool_factory(int workers) {
  return {"threadpool-" + std::to_string(workers),
          [workers] { return std::make_unique<ThreadPoolExecutor>(ThreadPoolOptions{.workers = workers}); }, workers};
}

// A pool with work-first pushes (ThreadPoolOptions::work_first): a pushing thread may run what it pushed. Not in
// executor_factories(): a push there may run its op before it returns, which tests that hold an op until the pushing
// thread opens it cannot allow; the randomized oracles and test/engine/work_first_test.cpp run on it.
inline ExecutorFactory work_first_factory(int workers) {
  return {"threadpool-" + std::to_string(workers) + "-work-first",
          [workers] {
            return std::make_unique<ThreadPoolExecutor>(ThreadPoolOptions{.workers = workers, .work_first = true});
          },
          workers};
}

// A pool whose waiting threads work as workers (ThreadPoolOptions::waiters_work). In the randomized oracles only, as
// the work-first pools: a waiting thread there takes queued ops and ops from stuck workers, so a test whose op waits
// for the thread that waits could block it.
inline ExecutorFactory waiters_work_factory(int workers) {
  return {"threadpool-" + std::to_string(workers) + "-waiters-work",
          [workers] {
            return std::make_unique<ThreadPoolExecutor>(ThreadPoolOptions{.workers = workers, .waiters_work = true});
          },
          workers};
}

// A pool whose pushes help (EngineOptions::help_above): a push of an op that waits, far ahead of the workers, runs
// queued ops on the pushing thread. In the randomized oracles only, as the work-first pools, for the same reason. A
// bound of 8 ops in flight has the pushers help on almost every push of an op that waits.
inline ExecutorFactory helping_factory(int workers) {
  ExecutorFactory factory = threadpool_factory(workers);
  factory.name += "-helping";
  factory.help_above = 8;
  return factory;
}

// The stream executor over a backend of stream_test_support.h. One device: ops use the default placement (device 0),
// so more devices would only add idle streams. Four compute streams: independent ops spread over the unused or idle
// ones, so dependent ops on different streams make the executor issue, elide and chain device waits.
inline ExecutorFactory stream_factory(const StreamBackendFactory& backend) {
  ExecutorFactory factory{std::string(backend.name) + "-stream",
                          [make_backend = backend.make] {
                            return std::make_unique<StreamExecutor>(
                                make_backend(), StreamExecutorOptions{.devices = 1, .compute_streams = 4});
                          },
                          0};
  factory.takes_async = false;
  factory.concurrent_ops = false;
  factory.runs_after_completion = false;
  factory.op_cost = 5;
  return factory;
}

inline ExecutorFactory host_stream_factory() { return stream_factory(host_backend_factory()); }

// Every executor of the conformance suite: inline, two pools, the stream executor on host streams, and on the GPU
// backends that were built (stream_test_support.h) where a device exists. Those skipped are printed once, with the
// backend's reason (its status()).
inline const std::vector<ExecutorFactory>& executor_factories() {
  static const std::vector<ExecutorFactory> factories = [] {
    std::vector<ExecutorFactory> result{inline_factory(), threadpool_factory(1), threadpool_factory(2),
                                        host_stream_factory()};
    for (const StreamBackendFactory& gpu : gpu_backend_factories()) {
      const std::unique_ptr<StreamBackend> probe = gpu.make();
      const std::string status(probe->status());
      if (probe->device_count() > 0) {
        std::printf("engine conformance: running on %s-stream (%s)\n", gpu.name.c_str(), status.c_str());
        result.push_back(stream_factory(gpu));
      } else {
        std::printf("engine conformance: skipping %s-stream: %s\n", gpu.name.c_str(), status.c_str());
      }
    }
    std::fflush(stdout);
    return result;
  }();
  return factories;
}

// For an executor that does not take async ops (takes_async is false): PushAsync, here mutating `v`, throws Error
// saying why, and its function never runs. (misuse_test.cpp checks once that such a refused push leaves nothing
// behind; this is the short check for the places where a test would push an async op.)
inline void check_async_refused(Engine& engine, const Var& v, const PushOptions& options = {}) {
  // Shared with the function: were the push wrongly accepted, the op could run after this returns.
  const auto ran = std::make_shared<std::atomic<bool>>(false);
  CHECK_THROWS_WITH(engine.PushAsync(
                        [ran](Completion done) {
                          ran->store(true, std::memory_order_relaxed);  // relaxed: a flag that publishes nothing
                          done();
                        },
                        {}, {v}, options),
                    Catch::Contains("PushAsync") && Catch::Contains("a stream executor"));
  CHECK_FALSE(ran->load(std::memory_order_relaxed));
}

// Engine options with several executors at once: context.executor = i picks factories[i].
[[nodiscard]] inline EngineOptions mixed_options(const std::vector<ExecutorFactory>& factories,
                                                 std::size_t max_in_flight = EngineOptions{}.max_in_flight) {
  EngineOptions result;
  for (const ExecutorFactory& factory : factories) result.executors.push_back(factory.make());
  result.max_in_flight = max_in_flight;
  return result;
}

// The thread pools alone, for tests of behaviour only a pool has (helping, several workers).
inline std::vector<ExecutorFactory> threadpool_factories() { return {threadpool_factory(1), threadpool_factory(2)}; }

// executor_factories(), the work-first pools, a pool whose waiters work and the helping pools: for the randomized
// oracles, whose ops never wait for the pusher.
inline std::vector<ExecutorFactory> oracle_factories() {
  std::vector<ExecutorFactory> result = executor_factories();
  result.push_back(work_first_factory(1));
  result.push_back(work_first_factory(2));
  result.push_back(waiters_work_factory(1));
  result.push_back(helping_factory(1));
  result.push_back(helping_factory(2));
  return result;
}

}  // namespace depengine::test
