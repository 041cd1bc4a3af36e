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
// A new executor joins the suite by adding one line to the list below.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "executors/executor.h"
#include "executors/inline_executor.h"
#include "executors/threadpool/threadpool_executor.h"

namespace depengine::test {

struct ExecutorFactory {
  std::string name;
  std::function<std::unique_ptr<Executor>()> make;
  // Threads of the executor's own that run ops concurrently: 0 for inline (ops run on the threads that push or
  // complete), the worker count for a pool.
  int workers = 0;

  // Engine options with this executor alone.
  [[nodiscard]] EngineOptions options(std::size_t max_in_flight = EngineOptions{}.max_in_flight) const {
    EngineOptions result;
    result.executors.push_back(make());
    result.max_in_flight = max_in_flight;
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

// Every executor of the conformance suite. (Stream executors join here when they exist; GPU ones only when a device
// is present.)
inline const std::vector<ExecutorFactory>& executor_factories() {
  static const std::vector<ExecutorFactory> factories{inline_factory(), threadpool_factory(1), threadpool_factory(2)};
  return factories;
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

}  // namespace depengine::test
