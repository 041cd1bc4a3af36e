#include <cuda_runtime_api.h>

#include "bench/executors/cuda_stream/bump_kernel.h"

namespace depengine::bench {
namespace {

__global__ void bump(unsigned* counter) { *counter += 1; }

}  // namespace

void launch_bump(void* stream, unsigned* counter) { bump<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(counter); }

}  // namespace depengine::bench
