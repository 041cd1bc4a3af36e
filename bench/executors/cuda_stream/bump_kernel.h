// The benchmark's device work: one tiny kernel, so that a chain of them measures dispatch and dependency overheads,
// not arithmetic. Compiled by nvcc (bump_kernel.cu); declared here without CUDA types so that C++ callers need no
// CUDA headers.
#pragma once

namespace depengine::bench {

// Enqueues on `stream` (a cudaStream_t) one single-thread kernel that adds 1 to *counter (device memory).
void launch_bump(void* stream, unsigned* counter);

}  // namespace depengine::bench
