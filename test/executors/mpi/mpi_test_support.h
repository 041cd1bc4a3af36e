// What the MPI tests share: an engine with a one-worker CPU pool (executor 0) and an MpiExecutor on MPI_COMM_WORLD
// (executor 1), as every rank of mpirun builds it (test/mpi_main.cpp).
#pragma once

#include <cstdint>
#include <memory>

#include <depengine/engine/engine.h>
#include <depengine/executors/mpi/mpi_executor.h>
#include <depengine/executors/threadpool/threadpool_executor.h>

namespace depengine::test {

inline constexpr std::uint32_t kCompute = 0;
inline constexpr std::uint32_t kComm = 1;

[[nodiscard]] inline EngineOptions mpi_engine_options() {
  EngineOptions options;
  options.executors.push_back(std::make_unique<ThreadPoolExecutor>(ThreadPoolOptions{.workers = 1}));
  options.executors.push_back(std::make_unique<MpiExecutor>());
  return options;
}

}  // namespace depengine::test
