// The option structs are built with designated initializers, naming only what differs from the defaults (README):
// `{.name = "add"}`. This file is compiled with -Wmissing-field-initializers (test/engine/CMakeLists.txt), which GCC
// raises for every member without a default member initializer that such an initializer leaves out: with the
// project's -Werror it fails to build if a public option struct grows such a member. At run time it checks that what
// is left out keeps its default. It includes the headers as the README does, through the project's name, which
// in the build tree resolves through the depengine_include link (cmake/depengine.cmake).
#include <catch2/catch.hpp>
#include <chrono>

#include <depengine/engine/engine.h>
#include <depengine/executors/host_stream/host_stream_backend.h>
#include <depengine/executors/stream/stream_executor.h>
#include <depengine/executors/threadpool/threadpool_executor.h>
#include <depengine/frontier/timeline.h>
#include <depengine/frontier/tracker.h>
#include <depengine/memory/memory_pool.h>

namespace depengine::test {
namespace {

TEST_CASE("option structs take designated initializers that name one field, the rest keeping their defaults",
          "[engine][options]") {
  const PushOptions push{.name = "add"};
  CHECK(push.name.view() == "add");
  CHECK(push.name.size() == 3);
  CHECK(push.context.executor == 0);
  CHECK(push.priority == 0);
  CHECK(push.wait_fences.empty());
  CHECK(push.signal_fences.empty());
  CHECK(push.scope == nullptr);
  CHECK_FALSE(push.no_skip);

  // Every other form the README and the headers show (issue 48, item 7: these warned while `name` had no default
  // member initializer).
  CancelScope scope;
  Timeline fence;
  const PushOptions scoped{.scope = &scope};
  CHECK(scoped.scope == &scope);
  CHECK(scoped.name.empty());
  const PushOptions urgent{.priority = 5};
  CHECK(urgent.priority == 5);
  const PushOptions no_skip{.no_skip = true};
  CHECK(no_skip.no_skip);
  const PushOptions placed{.context = {.executor = 1, .device = 0, .stream_kind = StreamKind::kCompute}};
  CHECK(placed.context.executor == 1);
  CHECK(placed.context.stream == -1);
  const PushOptions on_executor{.context = {.executor = 1}};
  CHECK(on_executor.context.stream_kind == StreamKind::kCompute);
  const PushOptions waits{.wait_fences = {{&fence, 1}}};
  CHECK(waits.wait_fences.size() == 1);
  const PushOptions signals{.signal_fences = {{&fence, 1}}};
  CHECK(signals.signal_fences.size() == 1);
  const PushOptions named_no_skip{.name = "x", .no_skip = true};
  CHECK(named_no_skip.no_skip);
  const Context device{.device = 1};
  CHECK(device.executor == 0);
  const TimelineOptions named_timeline{.name = "pipeline"};
  CHECK(named_timeline.name == "pipeline");
  const TimelineOptions unnamed_timeline{.history = 4};
  CHECK(unnamed_timeline.name.empty());
  const MemoryPoolOptions limited{.limit = std::size_t{1} << 30};
  CHECK(limited.name.empty());
  CHECK(limited.tracker == nullptr);
  const StreamExecutorOptions two_kinds{.compute_streams = 2, .copy_streams = 1};
  CHECK(two_kinds.compute_streams == 2);
  const EngineOptions cancelling{.cancel_on_destruction = true};
  CHECK(cancelling.max_in_flight > 0);

  const EngineOptions engine{.max_in_flight = 4};
  CHECK(engine.executors.empty());
  CHECK(engine.error_sink == nullptr);
  CHECK(engine.stall_report_after == std::chrono::seconds(60));  // stall reports are on by default
  CHECK_FALSE(engine.cancel_on_destruction);

  const ThreadPoolOptions pool{.workers = 2};
  CHECK(pool.spin > std::chrono::nanoseconds(0));
  const StreamExecutorOptions streams{.compute_streams = 4};
  CHECK(streams.copy_streams == 1);
  const HostStreamOptions host{.devices = 2};
  CHECK(host.launch_delay.count() == 0);
  const TrackerOptions tracker{.max_axes = 8};
  CHECK(tracker.max_axes == 8);
  const TimelineOptions timeline{};
  (void)timeline;
}

}  // namespace
}  // namespace depengine::test
