// Typed executor ids (engine/executor_id.h) and the stream facet (executors/executor.h): an id from EngineOptions::add
// reaches its executor as its own type and places ops on it; an id of one type does not convert to another; an engine
// refuses an id that other options issued; only stream executors have a StreamFacet.
#include <catch2/catch.hpp>
#include <concepts>
#include <memory>
#include <stdexcept>
#include <utility>

#include <depengine/buffers/buffer.h>
#include <depengine/engine/engine.h>
#include <depengine/engine/executor_id.h>
#include <depengine/executors/host_stream/host_stream_backend.h>
#include <depengine/executors/inline_executor.h>
#include <depengine/executors/stream/stream_executor.h>
#include <depengine/executors/threadpool/threadpool_executor.h>

#include "test/test_support.h"

namespace depengine::test {
namespace {

// What a user could write with an id, as requires-expressions (in templates, so that a wrong use is a false
// constraint, not an error): pass `id` where an id of `To` is wanted, assign it to one, reach the executor as a `To&`.
template <class Id, class To>
concept PassesAs = requires(Id id, void (*wants)(ExecutorId<To>)) {
  wants(id);
};
template <class Id, class To>
concept AssignsTo = requires(Id id, ExecutorId<To>& out) {
  out = id;
};
template <class Id, class To>
concept ReachesAs = requires(const Engine& engine, Id id) {
  { engine.executor(id) } -> std::convertible_to<To&>;
};

// An id converts as a reference does: derived to base, never across or down.
static_assert(PassesAs<ExecutorId<StreamExecutor>, Executor> && AssignsTo<ExecutorId<StreamExecutor>, Executor>);
static_assert(!PassesAs<ExecutorId<ThreadPoolExecutor>, StreamExecutor>);
static_assert(!AssignsTo<ExecutorId<ThreadPoolExecutor>, StreamExecutor>);
static_assert(!PassesAs<ExecutorId<Executor>, StreamExecutor>);
static_assert(!std::constructible_from<ExecutorId<StreamExecutor>, ExecutorId<ThreadPoolExecutor>>);
// Engine::executor(id) returns the id's type; a pool's id does not reach a stream executor.
static_assert(requires(const Engine& engine, ExecutorId<StreamExecutor> id) {
  { engine.executor(id) } -> std::same_as<StreamExecutor&>;
});
static_assert(ReachesAs<ExecutorId<ThreadPoolExecutor>, ThreadPoolExecutor>);
static_assert(!ReachesAs<ExecutorId<ThreadPoolExecutor>, StreamExecutor>);
static_assert(!ReachesAs<ExecutorId<Executor>, StreamExecutor>);
// An id goes where an index went: a context, Buffers (whose use is tested in test/buffers/buffer_test.cpp).
static_assert(std::convertible_to<ExecutorId<StreamExecutor>, ExecutorRef>);
static_assert(std::constructible_from<Buffers, Engine&, ExecutorId<StreamExecutor>>);

std::unique_ptr<StreamExecutor> host_streams(std::uint32_t compute_streams = 2) {
  return std::make_unique<StreamExecutor>(std::make_unique<HostStreamBackend>(),
                                          StreamExecutorOptions{.compute_streams = compute_streams, .copy_streams = 0});
}

TEST_CASE("an ExecutorId reaches the executor it was added as, with its type, and places ops on it",
          "[engine][executor_id]") {
  Watchdog watchdog("typed executor ids");
  EngineOptions options;
  const ExecutorId<ThreadPoolExecutor> pool = options.emplace<ThreadPoolExecutor>(ThreadPoolOptions{.workers = 1});
  auto made = host_streams();
  StreamExecutor* const made_streams = made.get();
  const ExecutorId<StreamExecutor> streams = options.add(std::move(made));
  const ExecutorId<InlineExecutor> here = options.emplace<InlineExecutor>();
  CHECK(pool.index() == 0);
  CHECK(streams.index() == 1);
  CHECK(here.index() == 2);
  CHECK(options.executors.size() == 3);
  Engine engine(std::move(options));

  StreamExecutor& s = engine.executor(streams);
  CHECK(&s == made_streams);
  CHECK(engine.executor(pool).workers() == 1);
  CHECK(&engine.executor(pool) == &engine.executor(0));  // the index API names the same executors
  CHECK(&engine.executor(ExecutorId<Executor>(here)) == &engine.executor(2));

  Var x = engine.NewVariable();
  const Executor* ran_on[3] = {nullptr, nullptr, nullptr};
  bool had_stream[3] = {true, false, true};
  engine.Push(
      [&](const RunContext& ctx) {
        ran_on[0] = ctx.executor;
        had_stream[0] = ctx.stream != nullptr;
      },
      {}, {x}, {.context = {.executor = pool}});
  engine.Push(
      [&](const RunContext& ctx) {
        ran_on[1] = ctx.executor;
        had_stream[1] = ctx.stream != nullptr;
        launch_host(*ctx.stream, HostTask([] {}));  // through the placement the op received: no backend cast
      },
      {}, {x}, {.context = {.executor = streams, .device = 0, .stream = 1}});
  engine.Push(
      [&](const RunContext& ctx) {
        ran_on[2] = ctx.executor;
        had_stream[2] = ctx.stream != nullptr;
      },
      {x}, {}, {.context = {.executor = here}});
  engine.WaitForAll();
  CHECK(ran_on[0] == &engine.executor(pool));
  CHECK(ran_on[1] == &engine.executor(streams));
  CHECK(ran_on[2] == &engine.executor(here));
  CHECK_FALSE(had_stream[0]);
  CHECK(had_stream[1]);
  CHECK_FALSE(had_stream[2]);
  CHECK(s.stats(0, StreamKind::kCompute, 1).ops_issued == 1);  // the id's placement fields were honoured
}

TEST_CASE("an engine refuses an ExecutorId that other options issued, and an id that names nothing",
          "[engine][executor_id][errors]") {
  EngineOptions first_options, second_options;
  const ExecutorId<ThreadPoolExecutor> first =
      first_options.emplace<ThreadPoolExecutor>(ThreadPoolOptions{.workers = 1});
  const ExecutorId<ThreadPoolExecutor> second =
      second_options.emplace<ThreadPoolExecutor>(ThreadPoolOptions{.workers = 1});
  CHECK(first.index() == second.index());  // same index: only the provenance tells them apart
  CHECK(first != second);
  Engine engine(std::move(first_options));
  Engine other(std::move(second_options));

  CHECK_THROWS_WITH(engine.executor(second), Catch::Contains("issued by the EngineOptions of another engine"));
  CHECK_THROWS_AS(other.executor(first), Error);
  Var x = engine.NewVariable();
  int runs = 0;
  CHECK_THROWS_WITH(engine.Push([&] { ++runs; }, {}, {x}, {.context = {.executor = second}}),
                    Catch::Contains("Push: the ExecutorId"));
  CHECK_THROWS_WITH(engine.PushAsync([&](Completion done) { done(); }, {}, {x}, {.context = {.executor = second}}),
                    Catch::Contains("PushAsync: the ExecutorId"));
  CHECK_THROWS_WITH(engine.DeleteVariable(x, [] {}, {.context = {.executor = second}}),
                    Catch::Contains("DeleteVariable: the ExecutorId"));
  engine.Push([&] { ++runs; }, {}, {x}, {.context = {.executor = first}});
  engine.WaitForAll();
  CHECK(runs == 1);  // the refused pushes pushed nothing

  CHECK_THROWS_AS(engine.executor(ExecutorId<ThreadPoolExecutor>{}), Error);  // default: names no executor
  CHECK_THROWS_AS(engine.Push([] {}, {}, {x}, {.context = {.executor = ExecutorId<ThreadPoolExecutor>{}}}), Error);
  CHECK_THROWS_AS(engine.executor(7), Error);  // and an index out of range, as before
}

TEST_CASE("EngineOptions::add refuses a null executor; moved options keep their ids, the moved-from get new ones",
          "[engine][executor_id][errors]") {
  EngineOptions options;
  CHECK_THROWS_WITH(options.add(std::unique_ptr<ThreadPoolExecutor>()), Catch::Contains("null"));
  CHECK(options.executors.empty());

  const ExecutorId<InlineExecutor> moved_id = options.emplace<InlineExecutor>();
  EngineOptions moved = std::move(options);
  options = EngineOptions{};
  const ExecutorId<InlineExecutor> fresh_id = options.emplace<InlineExecutor>();
  CHECK(fresh_id.index() == moved_id.index());
  CHECK(fresh_id != moved_id);
  Engine engine(std::move(moved));
  Engine fresh(std::move(options));
  CHECK(&engine.executor(moved_id) == &engine.executor(0));
  CHECK_THROWS_AS(engine.executor(fresh_id), Error);
  CHECK(&fresh.executor(fresh_id) == &fresh.executor(0));
  CHECK_THROWS_AS(fresh.executor(moved_id), Error);
}

TEST_CASE("an id whose executor NaiveEngine replaced is refused, not reinterpreted", "[engine][executor_id][errors]") {
  const ScopedEnv env("DEPENGINE_ENGINE_TYPE", "NaiveEngine");
  EngineOptions options;
  const ExecutorId<ThreadPoolExecutor> pool = options.emplace<ThreadPoolExecutor>(ThreadPoolOptions{.workers = 1});
  const ExecutorId<StreamExecutor> streams = options.add(host_streams());
  Engine engine(std::move(options));
  CHECK_THROWS_WITH(engine.executor(pool), Catch::Contains("is now 'inline'"));
  CHECK(engine.executor(ExecutorId<Executor>(pool)).name() == "inline");  // as an Executor it is still there
  CHECK(engine.executor(streams).devices() == 1);                         // stream executors stay
  Var x = engine.NewVariable();
  int runs = 0;
  engine.Push([&] { ++runs; }, {}, {x}, {.context = {.executor = pool}});  // placing on it still works
  engine.WaitForAll();
  CHECK(runs == 1);
}

TEST_CASE("only stream executors have the stream facet; it answers for their streams", "[executor][facet]") {
  InlineExecutor inline_executor;
  ThreadPoolExecutor pool(ThreadPoolOptions{.workers = 1});
  CHECK(inline_executor.stream_facet() == nullptr);
  CHECK_FALSE(inline_executor.issues_ahead());
  CHECK(pool.stream_facet() == nullptr);
  CHECK_FALSE(pool.issues_ahead());

  const std::unique_ptr<StreamExecutor> streams = host_streams(3);
  StreamFacet* facet = streams->stream_facet();
  REQUIRE(facet != nullptr);
  CHECK(facet == static_cast<StreamFacet*>(streams.get()));
  CHECK(streams->issues_ahead());
  CHECK(facet->axis_count() == 3);
  const Axis first = streams->axis(0, StreamKind::kCompute, 0);
  CHECK(facet->owns_axis(first));
  CHECK_FALSE(facet->owns_axis(host_streams(1)->axis(0, StreamKind::kCompute, 0)));  // another executor's stream
  CHECK(facet->axis_name(first) == "d0 compute 0");
  CHECK(facet->placement_error(0, StreamKind::kCompute, 2).empty());
  CHECK_FALSE(facet->placement_error(0, StreamKind::kCompute, 3).empty());
  CHECK_FALSE(facet->placement_error(1, StreamKind::kCompute, -1).empty());
  CHECK_FALSE(facet->records_work());
  CHECK(facet->device_waits().issued == 0);
}

TEST_CASE("launch_host launches only on a host backend's stream", "[executor][facet][errors]") {
  const StreamPlacement nowhere{};
  CHECK(HostStreamBackend::of(nowhere) == nullptr);
  CHECK_THROWS_AS(launch_host(nowhere, HostTask([] {})), std::logic_error);
}

}  // namespace
}  // namespace depengine::test
