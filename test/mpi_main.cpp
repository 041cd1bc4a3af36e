// The Catch2 main of the tests that run under mpirun (depengine_test with MPI, cmake/depengine.cmake): every rank runs
// the same test cases in the same order, between MPI_Init_thread and MPI_Finalize. MPI_THREAD_MULTIPLE, so that a test
// may call MPI itself (a barrier, a broadcast of its seed) while an MpiExecutor's progress thread runs.
#define CATCH_CONFIG_RUNNER
#include <mpi.h>

#include <catch2/catch.hpp>
#include <cstdio>

#include "test/tsan_suppressions.h"

int main(int argc, char** argv) {
  int provided = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  if (provided < MPI_THREAD_MULTIPLE) {
    std::fprintf(stderr, "mpi_main: this MPI provides thread level %d, below MPI_THREAD_MULTIPLE\n", provided);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const int failed = Catch::Session().run(argc, argv);
  int any_failed = 0;  // every rank exits with the same status, so mpirun reports a failure on any rank
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any_failed;
}
