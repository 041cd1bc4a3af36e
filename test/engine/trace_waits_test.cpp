// Why each op waited, and the critical path (engine/detail/trace_recorder.h; docs/pictures.md): the wait reasons of a
// scripted scenario are exactly those, and the critical path of a known graph is its long chain.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <future>
#include <iterator>
#include <latch>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <depengine/engine/engine.h>
#include <depengine/executors/host_stream/host_stream_backend.h>
#include <depengine/executors/stream/stream_executor.h>
#include <depengine/executors/threadpool/threadpool_executor.h>
#include <depengine/frontier/timeline.h>

#include "test/engine/test_support.h"
#include "test/engine/trace_file.h"
#include "test/executors/executor_factories.h"

namespace depengine::test {
namespace {

// The slice named `name` (one per test).
const TraceFile::Slice& slice_named(const TraceFile& trace, const std::string& name, std::uint64_t* op = nullptr) {
  for (const auto& [id, slice] : trace.slices) {
    if (slice.name == name) {
      if (op != nullptr) *op = id;
      return slice;
    }
  }
  FAIL("no slice named " << name);
  throw;  // not reached: FAIL throws
}

// The op's own work: a busy loop of `duration` on its thread (a spin, so that it takes that long of the op's time).
void spin(std::chrono::microseconds duration) {
  const auto until = std::chrono::steady_clock::now() + duration;
  while (std::chrono::steady_clock::now() < until) {
  }
}

// An op whose work is spin(duration), then a wait for `after` if given, then a count down of `done`: on a CPU executor
// its function; on a stream, the host task it launches there.
auto work(std::chrono::microseconds duration, std::latch& done, std::latch* after = nullptr) {
  return [duration, &done, after](const RunContext& ctx) {
    auto body = [duration, &done, after] {
      spin(duration);
      if (after != nullptr) after->wait();
      done.count_down();
    };
    if (ctx.stream == nullptr) {
      body();
    } else {
      launch_host(*ctx.stream, HostTask(body));
    }
  };
}

TEST_CASE("each slice names what its op waited on last: a variable's holder, a fence and its raiser, nothing",
          "[engine][trace][waits]") {
  Watchdog watchdog("wait reasons");
  const std::string path = temporary_trace_path("waits");
  Engine engine(threadpool_factory(2).options());
  const Var v = engine.NewVariable(), w = engine.NewVariable(), u = engine.NewVariable();  // v0, v1, v2
  Timeline t;
  engine.StartTrace(path);
  engine.Push([] {}, {}, {u}, {.name = "free"});  // nothing before it on u
  HeldOp holder(engine, {}, {v}, {.name = "holder"});
  engine.Push([] {}, {v}, {w}, {.name = "reader"});  // waits on v, held by 'holder' until its Completion
  engine.Push([] {}, {}, {}, {.name = "fenced", .wait_fences = {{&t, 1}}});
  engine.Push([] {}, {}, {}, {.name = "raiser", .signal_fences = {{&t, 1}}});
  engine.Push([] {}, {}, {}, {.name = "outside", .wait_fences = {{&t, 2}}});
  REQUIRE(holder.release());
  engine.WaitForVar(w);
  engine.WaitForFence({&t, 1});  // raised by 'raiser' (else the signal below may reach it first)
  t.signal_external(2);          // reached from outside the engine
  engine.WaitForAll();
  engine.StopTrace();
  const TraceFile trace = read_trace(path);
  std::uint64_t holder_op = 0, raiser_op = 0;
  (void)slice_named(trace, "holder", &holder_op);
  (void)slice_named(trace, "raiser", &raiser_op);
  CHECK(slice_named(trace, "free").waited_on == "nothing: ready at its push");
  CHECK(slice_named(trace, "free").wait_kind == "none");
  CHECK(slice_named(trace, "holder").waited_on == "nothing: ready at its push");
  const TraceFile::Slice& reader = slice_named(trace, "reader");
  CHECK(reader.waited_on == "v0 held by 'holder' (op " + std::to_string(holder_op) + "), released at its Completion");
  CHECK(reader.wait_kind == "variable");
  CHECK(reader.waited_for_op == holder_op);
  const TraceFile::Slice& fenced = slice_named(trace, "fenced");
  CHECK(fenced.waited_on == "fence value 1 raised by 'raiser' (op " + std::to_string(raiser_op) + ")");
  CHECK(fenced.wait_kind == "fence");
  CHECK(fenced.waited_for_op == raiser_op);
  CHECK(slice_named(trace, "outside").waited_on == "fence value 2, reached from outside the engine");
  CHECK(slice_named(trace, "raiser").waited_on == "nothing: ready at its push");
  std::remove(path.c_str());
}

TEST_CASE("a push held at max_in_flight says it waited for room under the bound", "[engine][trace][waits]") {
  Watchdog watchdog("wait at the bound");
  const std::string path = temporary_trace_path("bound");
  Engine engine(threadpool_factory(2).options(1));
  const Var v = engine.NewVariable(), w = engine.NewVariable();
  engine.StartTrace(path);
  HeldOp first(engine, {}, {v}, {.name = "first"});
  std::atomic<bool> released{false};
  std::thread releaser([&] {
    REQUIRE(first.release());
    released.store(true, std::memory_order_relaxed);  // relaxed: read after the join
  });
  engine.Push([] {}, {}, {w}, {.name = "second"});  // waits at the bound of 1 for 'first' to complete
  releaser.join();
  engine.WaitForAll();
  engine.StopTrace();
  CHECK(released.load(std::memory_order_relaxed));
  const TraceFile trace = read_trace(path);
  CHECK(slice_named(trace, "second").waited_on ==
        "room under EngineOptions::max_in_flight: its push waited at the bound");
  std::remove(path.c_str());
}

// A CPU op after a stream op is parked until the stream op's device work completes: it waited on the device. The
// stream's work waits for the test's word, so the CPU op cannot find it complete when its grant arrives (at the stream
// op's issue).
TEST_CASE("a CPU op after a stream op names the device work it waited for", "[engine][trace][waits][streams]") {
  Watchdog watchdog("device wait reason");
  const std::string path = temporary_trace_path("device");
  EngineOptions options;
  const auto pool = options.emplace<ThreadPoolExecutor>(ThreadPoolOptions{.workers = 1});
  const auto streams = options.add(std::make_unique<StreamExecutor>(
      std::make_unique<HostStreamBackend>(), StreamExecutorOptions{.compute_streams = 1, .copy_streams = 0}));
  Engine engine(std::move(options));
  const Var v = engine.NewVariable();
  std::promise<void> go;
  std::shared_future<void> ready = go.get_future().share();
  engine.StartTrace(path);
  engine.Push([ready](const RunContext& ctx) { launch_host(*ctx.stream, HostTask([ready] { ready.wait(); })); }, {},
              {v}, {.context = {.executor = streams}, .name = "kernel"});
  engine.Push([] {}, {v}, {}, {.context = {.executor = pool}, .name = "after"});
  go.set_value();
  engine.WaitForAll();
  engine.StopTrace();
  const TraceFile trace = read_trace(path);
  std::uint64_t kernel = 0;
  (void)slice_named(trace, "kernel", &kernel);
  const TraceFile::Slice& after = slice_named(trace, "after");
  CHECK(after.waited_on == "the device work of 'kernel' (op " + std::to_string(kernel) + ") on v0");
  CHECK(after.wait_kind == "device");
  CHECK(after.waited_for_op == kernel);
  std::remove(path.c_str());
}

// A replay's ops name their predecessors in the graph, the pushed op that held a variable before the replay, and
// nothing for those ready when the replay was published.
TEST_CASE("replayed ops name what they waited on", "[engine][trace][waits][graph]") {
  Watchdog watchdog("replay wait reasons");
  const std::string path = temporary_trace_path("replay");
  Engine engine(threadpool_factory(2).options());
  const Var w = engine.NewVariable(), x = engine.NewVariable(), y = engine.NewVariable();
  const Graph step = engine.Capture([&] {
    engine.Push([] {}, {w}, {x}, {.name = "first"});
    engine.Push([] {}, {x}, {y}, {.name = "second"});
    engine.Push([] {}, {}, {}, {.name = "alone"});
  });
  engine.StartTrace(path);
  HeldOp writer(engine, {}, {w}, {.name = "writer"});
  engine.Replay(step);
  REQUIRE(writer.release());
  engine.WaitForAll();
  engine.StopTrace();
  const TraceFile trace = read_trace(path);
  std::uint64_t writer_op = 0, first_op = 0;
  (void)slice_named(trace, "writer", &writer_op);
  (void)slice_named(trace, "first (replay 0)", &first_op);
  CHECK(slice_named(trace, "first (replay 0)").waited_on ==
        "v0 held by 'writer' (op " + std::to_string(writer_op) + "), released at its Completion");
  CHECK(slice_named(trace, "second (replay 0)").waited_on ==
        "v1 held by 'first (replay 0)' (op " + std::to_string(first_op) + ")");
  CHECK(slice_named(trace, "alone (replay 0)").waited_on == "nothing: ready at its push");
  std::remove(path.c_str());
}

// A chain of three ops that each spin kChain, each reading what the one before wrote, and beside it short branches that
// read a link of the chain and end long before the chain does. The branches never hold the chain back: they run on a
// stream of their own (its own thread), beside a chain on a pool or on another stream. (On threads they shared, a
// branch run before a link would hold it back, and be on the path, rightly; and on a loaded machine a pool's second
// worker may not run before the first has done everything.)
struct ChainEngine {
  std::string name;
  std::function<EngineOptions()> options;
  Context chain, sides;
};

std::vector<ChainEngine> chain_engines() {
  auto pool = [] {
    EngineOptions options;
    (void)options.emplace<ThreadPoolExecutor>(ThreadPoolOptions{.workers = 1});
    (void)options.emplace<StreamExecutor>(std::make_unique<HostStreamBackend>(),
                                          StreamExecutorOptions{.compute_streams = 1, .copy_streams = 0});
    return options;
  };
  auto streams = [] {
    EngineOptions options;
    (void)options.emplace<StreamExecutor>(std::make_unique<HostStreamBackend>(),
                                          StreamExecutorOptions{.compute_streams = 2, .copy_streams = 0});
    return options;
  };
  return {{"a pool and a host stream", pool, {.executor = 0}, {.executor = 1}},
          {"two host streams", streams, {.executor = 0, .stream = 0}, {.executor = 0, .stream = 1}}};
}

TEST_CASE("the critical path of a chain with short side branches is the chain", "[engine][trace][critical path]") {
  constexpr std::chrono::microseconds kChain{20'000}, kBranch{500};
  for (const ChainEngine& setup : chain_engines()) {
    DYNAMIC_SECTION(setup.name) {
      Watchdog watchdog("critical path on " + setup.name);
      const std::string path = temporary_trace_path("critical");
      Engine engine(setup.options());
      std::vector<Var> links, sides;
      for (int i = 0; i < 3; ++i) {
        links.push_back(engine.NewVariable());
        sides.push_back(engine.NewVariable());
      }
      // Waited for before any engine wait: a wait runs queued work on its thread, which would make this thread a lane
      // that the chain and the branches share.
      std::latch finished(3);
      // The last link's work ends after the branches' (they have lanes of their own, but on a loaded machine a lane
      // may wait long for a core): the window ends with the chain, as the test means it to.
      std::latch branches(2);
      engine.StartTrace(path);
      for (std::size_t i = 0; i < 3; ++i) {
        const std::vector<Var> after = i == 0 ? std::vector<Var>{} : std::vector<Var>{links[i - 1]};
        engine.Push(work(kChain, finished, i == 2 ? &branches : nullptr), after, {links[i]},
                    {.context = setup.chain, .name = "chain " + std::to_string(i)});
        if (i < 2) {
          engine.Push(work(kBranch, branches), {links[i]}, {sides[i]},
                      {.context = setup.sides, .name = "side " + std::to_string(i)});
        }
      }
      finished.wait();  // after the branches (the last link waited for them)
      engine.WaitForAll();
      const std::string text = engine.TraceCriticalPath();  // of the trace on, so far
      engine.StopTrace();
      CAPTURE(text);
      CHECK(engine.TraceCriticalPath() == text);  // of the trace stopped: the same
      const TraceFile trace = read_trace(path);
      CHECK(trace.critical_path_text == text);
      std::vector<std::string> ran;
      for (const TraceFile::PathStep& step : trace.critical_path) {
        if (step.name == "run") ran.push_back(trace.slices.at(step.op).name);
      }
      CHECK(ran == std::vector<std::string>{"chain 0", "chain 1", "chain 2"});
      CHECK_THAT(text, Catch::StartsWith("critical path: "));
      CHECK_THAT(text, Catch::Contains(": 3 of 5 ops ran "));
      CHECK_THAT(text, Catch::Contains("push of 'chain 0'"));
      CHECK_THAT(text, Catch::Contains("'chain 2' (op "));
      CHECK_THAT(text, !Catch::Contains("'side"));
      // The path's steps follow one another: each starts where the one before ended, or later.
      for (std::size_t i = 1; i < trace.critical_path.size(); ++i) {
        CHECK(trace.critical_path[i].ts >= trace.critical_path[i - 1].ts + trace.critical_path[i - 1].dur - 0.002);
      }
      // scripts/critical_path.py prints the same path from the file.
      const std::string script = std::string(DEPENGINE_SOURCE_DIR) + "/scripts/critical_path.py";
      const std::string out = path + ".txt";
      REQUIRE(std::system(("python3 " + script + " " + path + " > " + out).c_str()) == 0);
      std::ifstream printed(out);
      const std::string from_script((std::istreambuf_iterator<char>(printed)), std::istreambuf_iterator<char>());
      CHECK(from_script == text);
      std::remove(out.c_str());
      std::remove(path.c_str());
    }
  }
}

TEST_CASE("TraceCriticalPath without a trace is an Error", "[engine][trace][critical path][errors]") {
  Engine engine(inline_factory().options());
  CHECK_THROWS_WITH(engine.TraceCriticalPath(), Catch::Contains("no trace was recorded"));
}

}  // namespace
}  // namespace depengine::test
