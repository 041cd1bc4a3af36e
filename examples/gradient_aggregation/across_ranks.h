// Data-parallel training across processes: gradient_aggregation --mpi, one replica per MPI rank (distributed/).
#pragma once

namespace depengine::examples {

struct AcrossRanks {
  int epochs = 0;
  int batch = 0;   // the global batch, split evenly over the ranks
  int hidden = 0;  // the width of the hidden layers
  bool check = false;
};

// Initialises MPI (MPI_THREAD_SERIALIZED), trains, finalises MPI, and returns the process's exit status: see
// across_ranks.cpp. Throws for bad options (a batch that the ranks do not divide).
int train_across_ranks(int argc, char** argv, const AcrossRanks& options);

}  // namespace depengine::examples
