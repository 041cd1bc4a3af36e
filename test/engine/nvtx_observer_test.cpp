// NvtxObserver (engine/nvtx_observer.h): a range per op that runs, each ended once the op ends. Without a tool attached
// NVTX's calls do nothing, so the test checks the observer's own bookkeeping, on a pool and on host streams.
#include <catch2/catch.hpp>
#include <memory>
#include <stdexcept>

#include <depengine/engine/engine.h>
#include <depengine/engine/nvtx_observer.h>
#include <depengine/executors/host_stream/host_stream_backend.h>
#include <depengine/executors/stream/stream_executor.h>
#include <depengine/executors/threadpool/threadpool_executor.h>

namespace depengine {
namespace {

TEST_CASE("NvtxObserver opens a range per op that runs and ends each", "[engine][observer][nvtx]") {
  NvtxObserver nvtx;
  {
    EngineOptions options;
    options.emplace<ThreadPoolExecutor>(ThreadPoolOptions{.workers = 2});
    options.emplace<StreamExecutor>(std::make_unique<HostStreamBackend>(), StreamExecutorOptions{.devices = 1});
    options.observers.push_back(&nvtx);
    options.error_sink = [](const UnreportedError&) {};
    Engine engine(std::move(options));
    const Var a = engine.NewVariable(), b = engine.NewVariable();
    for (int i = 0; i < 100; ++i) engine.Push([] {}, {}, {a}, {.name = "cpu"});
    for (int i = 0; i < 100; ++i) engine.Push([] {}, {a}, {b}, {.context = {.executor = 1}, .name = "stream"});
    engine.Push([] { throw std::runtime_error("fails"); }, {}, {a}, {.name = "fails"});
    engine.Push([] {}, {a}, {b}, {.name = "skipped"});  // does not run: no range
    try {
      engine.WaitForAll();
    } catch (const std::runtime_error&) {  // the op that fails
    }
    REQUIRE(nvtx.OpenRanges() == 0);
    REQUIRE(nvtx.RangesStarted() == 201);
  }
}

}  // namespace
}  // namespace depengine
