// Pushes two dependent ops through an installed depengine and checks their order, and that the version macros agree
// with the version of the package it was found as (DEPENGINE_EXPECTED_VERSION: CMake's depengine_VERSION, or
// pkg-config's --modversion).
// Headers are included through the project's name, the one include root the package exports. The consumer's own
// engine/errors.h and support/spinlock.h (collide/) come first on its include path and must not be reached.
#include <cstdio>
#include <memory>
#include <string_view>

#include <depengine/engine/engine.h>
#include <depengine/engine/version.h>
#include <depengine/executors/threadpool/threadpool_executor.h>

#ifndef DEPENGINE_EXPECTED_VERSION
#error "build with -DDEPENGINE_EXPECTED_VERSION=\"x.y.z\", the version of the package found"
#endif
static_assert(DEPENGINE_VERSION ==
              DEPENGINE_VERSION_MAJOR * 10000 + DEPENGINE_VERSION_MINOR * 100 + DEPENGINE_VERSION_PATCH);

int main() {
  if (std::string_view(DEPENGINE_VERSION_STRING) != DEPENGINE_EXPECTED_VERSION) {
    std::printf("consumer: engine/version.h says %s, the package %s\n", DEPENGINE_VERSION_STRING,
                DEPENGINE_EXPECTED_VERSION);
    return 2;
  }
  depengine::EngineOptions options;
  options.executors.push_back(
      std::make_unique<depengine::ThreadPoolExecutor>(depengine::ThreadPoolOptions{.workers = 2}));
  depengine::Engine engine(std::move(options));
  const depengine::Var a = engine.NewVariable(), b = engine.NewVariable();
  int x = 0, y = 0;
  engine.Push([&] { x = 20; }, {}, {a});
  engine.Push([&] { y = x + 22; }, {a}, {b});
  engine.WaitForVar(b);
  std::printf("consumer %s: y = %d\n", DEPENGINE_VERSION_STRING, y);
  return y == 42 ? 0 : 1;
}
