// The option structs are built with designated initializers, naming only what differs from the defaults (README):
// `{.name = "add"}`. This file is compiled with -Wmissing-field-initializers (test/engine/CMakeLists.txt), which GCC
// raises for every member without a default member initializer that such an initializer leaves out: with the
// project's -Werror it fails to build if a public option struct grows such a member. At run time it checks that what
// is left out keeps its default. It includes the headers as the README does, through the project's name, which
// in the build tree resolves through the depengine_include link (cmake/depengine.cmake).
#include <depengine/engine/engine.h>
#include <depengine/engine/frontier/timeline.h>
#include <depengine/engine/frontier/tracker.h>
#include <depengine/executors/host_stream/host_stream_backend.h>
#include <depengine/executors/stream/stream_executor.h>
#include <depengine/executors/threadpool/threadpool_executor.h>

#include <catch2/catch.hpp>
#include <chrono>

namespace depengine::test {
namespace {

TEST_CASE("option structs take designated initializers that name one field, the rest keeping their defaults",
          "[engine][options]") {
  const PushOptions push{.name = "add"};
  CHECK(push.name.view() == "add");
  CHECK(push.context.executor == 0);
  CHECK(push.priority == 0);
  CHECK(push.wait_fences.empty());
  CHECK(push.signal_fences.empty());
  CHECK(push.scope == nullptr);
  CHECK_FALSE(push.no_skip);

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
