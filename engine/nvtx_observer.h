// NvtxObserver: an Observer (observer.h) that gives every op an NVTX range named after it, so that Nsight Systems shows
// the engine's ops by name beside the CUDA work they enqueue: a CPU op's range runs from its start to its end, a stream
// op's from its issue until its device work completed (on the CUDA backend, executors/cuda_stream, the span its kernels
// run in). Ranges are NVTX process ranges (nvtxRangeStartA / nvtxRangeEnd), which may end on another thread than the
// one they started on, as a stream op's do.
//
//   depengine::NvtxObserver nvtx;          // outlives the engine
//   options.observers.push_back(&nvtx);
//   nsys profile ./my_program               // the ops appear as NVTX ranges
//
// Built with DEPENGINE_WITH_CUDA (target depengine::nvtx): NVTX is the header-only nvtx3 API of the CUDA toolkit, which
// costs a branch per call when no tool is attached. The header declares no NVTX types.
// Thread safety: as every observer, called from any threads at once; open ranges are kept under a lock of its own.
// Cost per op: a copy of its name into a buffer of the calling thread (allocation only for a longer name than seen
// before), the lock twice, and a map entry while its range is open. It asks for no times (Timed() is false).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>

#include <depengine/engine/observer.h>

namespace depengine {

class NvtxObserver final : public Observer {
 public:
  NvtxObserver() = default;

  // Its Observer members: a range starts at OnStart and ends at OnEnd; the other events are ignored, and no times read.
  void OnReady(const OpEvent& /*op*/) noexcept override {}
  void OnStart(const OpEvent& op) noexcept override;
  void OnEnd(const OpEvent& op) noexcept override;
  void OnThreadStart(const ThreadEvent& /*thread*/) noexcept override {}
  void OnThreadStop(const ThreadEvent& /*thread*/) noexcept override {}
  [[nodiscard]] bool Timed() const noexcept override { return false; }

  // Ranges started and not ended yet: the ops running now (0 once the engine is idle).
  [[nodiscard]] std::size_t OpenRanges() const;
  // Ranges started so far.
  [[nodiscard]] std::uint64_t RangesStarted() const;

 private:
  mutable std::mutex mutex_;
  std::unordered_map<std::uint64_t, std::uint64_t> open_;  // op id -> NVTX range id; guarded by mutex_
  std::uint64_t started_ = 0;                              // guarded by mutex_
};

}  // namespace depengine
