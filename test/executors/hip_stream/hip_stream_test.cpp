// The HIP stream backend (executors/hip_stream/hip_stream_backend.h), when built: it constructs on any machine, and
// without a device (this machine, CI) reports 0 devices and refuses, with a clear "no HIP device" StreamError,
// everything that needs one. With a device it joins the conformance suite instead (test/executors/stream/).
#include <catch2/catch.hpp>
#include <string>

#include "test/executors/stream/stream_test_support.h"

namespace depengine::test {
namespace {

TEST_CASE("the HIP stream backend constructs anywhere and reports a missing device cleanly",
          "[stream][gpu][hip_stream]") {
  for (const StreamBackendFactory& factory : gpu_backend_factories()) {
    if (factory.name == "hip") check_gpu_backend_without_device(factory, "no HIP device");
  }
}

}  // namespace
}  // namespace depengine::test
