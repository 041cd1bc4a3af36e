// The cost of communication through the engine: a chain of all-reduces pushed with Communicator::AllReduceSum
// (distributed/communicator.h), each waiting for the one before on its variable, against the same chain of raw
// MPI_Iallreduce + MPI_Wait on the calling thread. Run under mpirun:
//
//   mpirun -np 2 bench_communicator [--runs N] [--json FILE] [--smoke]
//
// Rows (rank 0 reports; threads = ranks): workload "allreduce-8B" (one double) and "allreduce-1MiB" (131072 doubles),
// system "mpi-raw" and "depengine-mpi", ns per all-reduce, the median of --runs timed chains (2000 all-reduces of 8 B,
// 100 of 1 MiB; --smoke: 10 and 2, one run). The two systems alternate run by run, so their ratio compares one hour;
// the depengine row carries it as vs_raw. The engine's all-reduce also sums a count of failing ranks with the data
// (one more element at 8 B; a one-int all-reduce beside the 1 MiB one), and its chain runs on the executor's progress
// thread: each completion starts the next all-reduce there, with no thread hand-off. A last row, "empty-op-chain",
// times a chain of 2000 ops on the MPI executor that call no MPI and complete at once: the engine's own share.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include <depengine/distributed/communicator.h>
#include <depengine/engine/engine.h>
#include <depengine/executors/mpi/mpi_executor.h>
#include <depengine/executors/threadpool/threadpool_executor.h>

#include "bench/common/report.h"

namespace depengine::bench {
namespace {

struct Size {
  const char* workload;
  std::size_t doubles;
  int chain;        // all-reduces per timed run
  int smoke_chain;  // with --smoke
};

double now_ns() {
  return static_cast<double>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

double raw_chain(std::vector<double>& data, int chain) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = now_ns();
  for (int k = 0; k < chain; ++k) {
    MPI_Request request = MPI_REQUEST_NULL;
    MPI_Iallreduce(MPI_IN_PLACE, data.data(), static_cast<int>(data.size()), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD,
                   &request);
    MPI_Wait(&request, MPI_STATUS_IGNORE);
  }
  return (now_ns() - start) / chain;
}

// The engine's share: a chain of ops on the MPI executor that start no MPI call and complete at once.
double empty_chain(Engine& engine, Var var, int chain) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = now_ns();
  for (int k = 0; k < chain; ++k) {
    engine.PushAsync([](Completion done) { done(); }, {}, {var}, {.context = {.executor = 1}});
  }
  engine.WaitForVar(var);
  return (now_ns() - start) / chain;
}

double engine_chain(Engine& engine, Communicator& world, Var var, std::vector<double>& data, int chain) {
  MPI_Barrier(MPI_COMM_WORLD);  // the progress thread is idle here: MPI_THREAD_MULTIPLE allows the call
  const double start = now_ns();
  for (int k = 0; k < chain; ++k) world.AllReduceSum<double>({var, data.data(), data.size() * sizeof(double)});
  engine.WaitForVar(var);
  return (now_ns() - start) / chain;
}

int run(const Options& options) {
  int rank = 0;
  int ranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  EngineOptions engine_options;
  engine_options.executors.push_back(std::make_unique<ThreadPoolExecutor>(ThreadPoolOptions{.workers = 1}));
  engine_options.executors.push_back(std::make_unique<MpiExecutor>());
  Engine engine(std::move(engine_options));
  Communicator world(engine, 1);
  const Var var = engine.NewVariable();
  std::vector<Record> records;
  for (const Size& size : {Size{"allreduce-8B", 1, 2000, 10}, Size{"allreduce-1MiB", 131072, 100, 2}}) {
    std::vector<double> data(size.doubles, 1.0);
    const int chain = options.smoke ? size.smoke_chain : size.chain;
    raw_chain(data, chain);  // warm both paths up (connections, pools)
    engine_chain(engine, world, var, data, chain);
    std::vector<double> raw;
    std::vector<double> ours;
    std::vector<double> ratio;
    for (int r = 0; r < options.runs; ++r) {
      raw.push_back(raw_chain(data, chain));
      ours.push_back(engine_chain(engine, world, var, data, chain));
      ratio.push_back(ours.back() / raw.back());
    }
    records.push_back({size.workload, "mpi-raw", ranks, median(raw), options.runs, {}});
    records.push_back({size.workload, "depengine-mpi", ranks, median(ours), options.runs, {{"vs_raw", median(ratio)}}});
  }
  std::vector<double> empty;
  for (int r = 0; r < options.runs; ++r) empty.push_back(empty_chain(engine, var, options.smoke ? 10 : 2000));
  records.push_back({"empty-op-chain", "depengine-mpi", ranks, median(empty), options.runs, {}});
  if (rank == 0) report(options, records);
  return 0;
}

}  // namespace
}  // namespace depengine::bench

int main(int argc, char** argv) try {
  using namespace depengine::bench;
  Options options = parse_options(argc, argv);  // --help exits here, before MPI starts
  if (options.smoke) options.runs = 1;
  int provided = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  const int status = run(options);
  MPI_Finalize();
  return status;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_communicator: %s\n", e.what());
  return 1;
}
