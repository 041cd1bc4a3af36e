// The CUDA and HIP backends, when built: they construct on any machine, and without a device (this machine, CI)
// report 0 devices and refuse, with a clear "no CUDA device" / "no HIP device" StreamError, everything that needs
// one. With a device they join the conformance suite instead (stream_test_support.h).
#include <catch2/catch.hpp>
#include <cstdio>
#include <memory>
#include <string>

#include "test/executors/stream/stream_test_support.h"

namespace depengine::test {
namespace {

TEST_CASE("GPU stream backends construct anywhere and report missing devices cleanly", "[stream][gpu]") {
  const auto factories = gpu_backend_factories();
  if (factories.empty()) {
    std::printf("gpu stream backends: none built (DEPENGINE_WITH_CUDA and DEPENGINE_WITH_HIP are OFF)\n");
    return;
  }
  for (const auto& factory : factories) {
    DYNAMIC_SECTION(factory.name) {
      std::unique_ptr<StreamBackend> backend;
      REQUIRE_NOTHROW(backend = factory.make());
      const std::string status(backend->status());
      std::printf("gpu stream backend %s: device_count() = %d; status: %s\n", factory.name.c_str(),
                  backend->device_count(), status.c_str());
      std::fflush(stdout);
      CHECK(std::string(backend->name()) == factory.name);
      if (backend->device_count() > 0) continue;  // the conformance suite runs it

      const std::string no_device = factory.name == "cuda" ? "no CUDA device" : "no HIP device";
      CHECK(status.find(no_device) == 0);
      // Everything that needs a device says why there is none.
      for (int attempt = 0; attempt < 3; ++attempt) {
        CAPTURE(attempt);
        try {
          if (attempt == 0) (void)backend->create_stream(0, StreamKind::kCompute);
          if (attempt == 1) (void)backend->create_event(0);
          if (attempt == 2) (void)backend->allocate(0, 256);
          FAIL("a call that needs a device succeeded without one");
        } catch (const StreamError& error) {
          CHECK(std::string(error.backend()) == factory.name);
          CHECK(std::string(error.what()).find(no_device) != std::string::npos);
          CHECK(error.code() != 0);
        }
      }
      // Handles that name nothing are ignored, as the interface promises, and nothing was synchronised.
      backend->destroy_stream(StreamHandle{});
      backend->destroy_event(EventHandle{});
      backend->deallocate(0, nullptr);
      CHECK(backend->native_handle(StreamHandle{}) == nullptr);
      CHECK(backend->host_synchronizations() == 0);
      // A second instance is as good as the first (no process-wide state poisoned by the failed device query).
      std::unique_ptr<StreamBackend> again;
      REQUIRE_NOTHROW(again = factory.make());
      CHECK(again->device_count() == 0);
    }
  }
}

}  // namespace
}  // namespace depengine::test
