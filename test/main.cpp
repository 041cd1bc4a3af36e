// The one Catch2 main shared by every test executable but the MPI ones (test/mpi_main.cpp).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include "test/tsan_suppressions.h"
