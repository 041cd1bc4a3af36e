// The MPI executor (executors/mpi/mpi_executor.h) under an engine, on every rank of mpirun (test/mpi_main.cpp): ops
// that start MPI calls complete when their requests do, collectives start in ticket order whatever order their ops
// run in, and misuse is a clear error.
#include <mpi.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <vector>

#include <depengine/engine/engine.h>
#include <depengine/executors/mpi/mpi_executor.h>

#include "test/executors/mpi/mpi_test_support.h"

namespace depengine {
namespace {

using test::kComm;
using test::kCompute;

EngineOptions options() { return test::mpi_engine_options(); }

TEST_CASE("an op on the MPI executor completes when its requests do", "[mpi]") {
  Engine engine(options());
  auto& mpi = MpiExecutor::of(&engine.executor(kComm));
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  CHECK(mpi.rank() == rank);
  std::vector<int> ranks(static_cast<std::size_t>(mpi.size()), -1);
  const Var var = engine.NewVariable();
  engine.PushAsync(
      [&](const RunContext& ctx, Completion done) {
        MpiExecutor& self = MpiExecutor::of(ctx.executor);
        MPI_Request request = MPI_REQUEST_NULL;
        ranks[static_cast<std::size_t>(self.rank())] = self.rank();
        MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, ranks.data(), 1, MPI_INT, self.comm(), &request);
        self.when_complete({&request, 1}, [done](int code) {
          if (code == MPI_SUCCESS) {
            done();
          } else {
            done(std::make_exception_ptr(std::runtime_error(MpiExecutor::error_string(code))));
          }
        });
      },
      {}, {var}, {.context = {.executor = kComm}});
  engine.WaitForVar(var);
  for (int r = 0; r < mpi.size(); ++r) CHECK(ranks[static_cast<std::size_t>(r)] == r);
}

TEST_CASE("collectives start in ticket order, whatever order their ops run in", "[mpi]") {
  Engine engine(options());
  auto& mpi = MpiExecutor::of(&engine.executor(kComm));
  constexpr int kOps = 16;
  std::vector<std::uint64_t> tickets;
  for (int k = 0; k < kOps; ++k) tickets.push_back(mpi.take_ticket());
  std::vector<int> started;  // the progress thread's only
  const Var var = engine.NewVariable();
  // Ticket 5's start comes from another thread (the test's), as an op that never ran takes part.
  mpi.post_in_order(tickets[5], [&started] { started.push_back(5); });
  for (int k = kOps - 1; k >= 0; --k) {  // pushed, so run, in reverse ticket order
    if (k == 5) continue;
    engine.Push(
        [&, k](const RunContext& ctx) {
          MpiExecutor::of(ctx.executor).start_in_order(tickets[static_cast<std::size_t>(k)], [&started, k] {
            started.push_back(k);
          });
        },
        {var}, {}, {.context = {.executor = kComm}});
  }
  engine.WaitForAll();
  std::vector<int> expected(kOps);
  std::iota(expected.begin(), expected.end(), 0);
  CHECK(started == expected);
}

TEST_CASE("NaiveEngine keeps the MPI executor, whose ops need its progress thread", "[mpi]") {
  setenv("DEPENGINE_ENGINE_TYPE", "NaiveEngine", 1);
  Engine engine(options());
  unsetenv("DEPENGINE_ENGINE_TYPE");
  CHECK(engine.executor(kCompute).name() == "inline");
  CHECK(engine.executor(kComm).name() == "mpi");
}

TEST_CASE("misuse of the MPI executor is a clear error", "[mpi]") {
  Engine engine(options());
  auto& mpi = MpiExecutor::of(&engine.executor(kComm));
  CHECK_THROWS_WITH(MpiExecutor::of(&engine.executor(kCompute)),
                    "an MPI op runs on the executor 'threadpool', not on an MpiExecutor: push it with the context of "
                    "an MpiExecutor");
  CHECK_THROWS_AS(MpiExecutor(MPI_COMM_NULL), std::invalid_argument);
  CHECK_THROWS_WITH(mpi.start_in_order(mpi.take_ticket(), [] {}),
                    Catch::StartsWith("MpiExecutor::start_in_order called outside the executor's progress thread"));
  MPI_Request none = MPI_REQUEST_NULL;
  CHECK_THROWS_WITH(mpi.when_complete({&none, 1}, [](int) {}),
                    Catch::StartsWith("MpiExecutor::when_complete called outside the executor's progress thread"));

  // An op meant for MPI pushed to the CPU executor fails with that message, rethrown by the wait.
  const Var var = engine.NewVariable();
  engine.Push([](const RunContext& ctx) { (void)MpiExecutor::of(ctx.executor).comm(); }, {}, {var});
  CHECK_THROWS_WITH(engine.WaitForVar(var), Catch::Contains("not on an MpiExecutor"));
}

}  // namespace
}  // namespace depengine
