// OpRecord: everything the engine keeps about one pushed op, from Push() until it retires.
//
// One record is the op's wait counter (OpNode), its executor-visible part (Task), its function, and its uses of
// variables (the VarUse entries that sit in those variables' queues), so a push needs no allocation beyond taking a
// record from the pool: ops that list at most kInlineVars variables and have an OpFunction that fits inline allocate
// nothing; longer lists use a heap array that the record keeps across reuses (up to kKeptVars entries).
//
// Records are recycled through RecordPool and never returned to the system while the process runs, so a stale
// Completion may still read its record's ticket safely (see run_context.h).
//
// Ownership: the pushing thread fills a record; from publication on, the thread that holds it runs it (after the
// last grant), and the thread that retires it returns it to the pool. Fields are written before publication or by
// the running thread only, except the atomics below.
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string_view>

#include "engine/detail/op_function.h"
#include "engine/fence.h"
#include "engine/frontier/timeline.h"
#include "engine/var_queue/op_node.h"
#include "executors/executor.h"

namespace depengine::detail {

class EngineCore;
struct OpRecord;

// The tracker waiter that parks an op whose wait frontier has not completed (EngineCore::make_ready).
struct ParkWaiter final : TrackerWaiter {
  explicit ParkWaiter(OpRecord* owner) noexcept;
  OpRecord* op;  // the record this waiter is part of
};

// The timeline waiter that holds an op until its wait fences are reached or promised (EngineCore::arm_fence).
struct FenceWaiter final : TimelineWaiter {
  explicit FenceWaiter(OpRecord* owner) noexcept;
  OpRecord* op;  // the record this waiter is part of
};

struct OpRecord final : Task, OpNode {
  static constexpr std::uint32_t kInlineVars = 6;
  // A heap array of uses for at most this many variables stays with the record when it is recycled, so ops that list
  // up to kKeptVars variables allocate only until the pooled records have grown to their size (MXNet's RandSumExpr
  // shape, 3 to 20 variables, then allocates nothing in steady state). A larger array is freed at recycling.
  static constexpr std::uint32_t kKeptVars = 64;

  // Called by the pool before a record is handed out again.
  void prepare(EngineCore* owner, Executor* runs_on, std::int32_t urgency) noexcept {
    engine = owner;
    executor_ = runs_on;
    priority_ = urgency;
    device_ = 0;
    stream_ = -1;
    stream_kind_ = StreamKind::kCompute;
    next_ = nullptr;
    ready_next_ = nullptr;
    requirement.clear();
    wait_fences.clear();
    signal_fences.clear();
    next_fence = 0;
    issued_at = FrontierEntry{};
    trace_op = 0;
  }

  void place(std::uint32_t device, StreamKind kind, std::int32_t stream) noexcept {
    device_ = device;
    stream_kind_ = kind;
    stream_ = stream;
  }

  // Room for `count` uses: the inline array, else the record's heap array, grown (the documented allocation) when it
  // is too small. Kept sizes are powers of two from 16, so a record regrows at most three times.
  void reserve_uses(std::size_t count) {
    if (count <= kInlineVars) {
      uses = inline_uses;
      return;
    }
    if (count > heap_capacity) {
      const std::size_t capacity = count <= kKeptVars ? std::max<std::size_t>(std::bit_ceil(count), 16) : count;
      heap_uses = std::make_unique<VarUse[]>(capacity);
      heap_capacity = capacity;
    }
    uses = heap_uses.get();
  }

  // Returns the record to the pool: destroys its function (and what it captured) and its error, frees a heap array
  // of uses larger than the records keep. Called by the thread that retires the op (or abandons its push).
  void recycle() noexcept;

  EngineCore* engine = nullptr;  // not owned; outlives the op
  OpFunction fn;
  std::string_view name;
  std::exception_ptr error;  // the op's first error: a poisoned input it skipped on, or its own
  VarUse* uses = inline_uses;
  std::uint32_t num_uses = 0;
  bool async = false;
  bool no_skip = false;
  bool deletes_var = false;  // DeleteVariable's op: its single use's variable is recycled when it retires
  bool internal = false;     // pushed by the engine itself (waits, error clearing): exempt from the in-flight bound

  // Async ops are released by two parties, the function's return and the completion; the later one recycles the
  // record (the function may still be running when another thread completes the op, and its callable lives here).
  std::atomic<std::uint32_t> holds{0};
  // Moves on by one at every completion of an async op; a Completion carries the value it expects, so a second call
  // (or a call on a record since reused) fails its compare-exchange instead of completing someone else's op.
  std::atomic<std::uint64_t> ticket{0};

  // The op's wait frontier (engines with stream executors only): the requirements of the promises its wait fences
  // took, then, when its last grant arrives, the signals of the uses it was granted. Read by its stream executor at
  // issue, and by the tracker while the op is parked.
  WaitFrontier requirement;
  ParkWaiter waiter{this};

  // Fences (PushOptions). The wait fences are armed one after another, next_fence the one armed now; all of them
  // together hold one grant of the op's wait counter.
  FenceList wait_fences;
  FenceList signal_fences;
  std::uint8_t next_fence = 0;
  FrontierEntry issued_at{};  // a stream op's own signal, kept for the knowledge its signal fences carry
  FenceWaiter fence_waiter{this};

  // Tracing (trace_recorder.h): the op's id (0: not traced); for a stream op, its lane and issue time.
  std::uint64_t trace_op = 0;
  std::uint32_t trace_lane = 0;
  std::int64_t trace_start = 0;

  std::unique_ptr<VarUse[]> heap_uses;
  std::size_t heap_capacity = 0;  // entries of heap_uses
  VarUse inline_uses[kInlineVars];
  OpRecord* pool_next = nullptr;  // link while the record sits in the pool
};

// A process-wide pool of op records with per-thread magazines (Bonwick's magazine allocator, reduced).
//
// Each thread keeps up to 2 * kMagazine records of its own; a thread that frees more than that hands a magazine of
// kMagazine to the shared depot, and a thread that runs out takes one from it (or allocates kMagazine new records).
// Pushing on one thread and completing on another so costs one depot lock per kMagazine ops, not one per op.
//
// Thread safety: acquire()/release() from any thread. A thread's magazine goes back to the depot when it exits.
// Records are never freed: the depot is immortal, so a thread exiting during static destruction is still safe.
class RecordPool {
 public:
  static constexpr int kMagazine = 64;

  [[nodiscard]] static OpRecord* acquire();
  static void release(OpRecord* record) noexcept;
};

inline void OpRecord::recycle() noexcept {
  fn.reset();
  error = nullptr;
  if (heap_capacity > kKeptVars) {
    heap_uses.reset();
    heap_capacity = 0;
  }
  num_uses = 0;
  RecordPool::release(this);
}

}  // namespace depengine::detail
