// OpRecord: everything the engine keeps about one pushed op, from Push() until it retires.
//
// One record is the op's wait counter (OpNode), its executor-visible part (Task), its function, and its uses of
// variables (the VarUse entries that sit in those variables' queues), so a push needs no allocation beyond taking a
// record from the pool: ops with at most kInlineVars distinct variables and an OpFunction that fits inline allocate
// nothing; a larger variable set allocates one array.
//
// Records are recycled through RecordPool and never returned to the system while the process runs, so a stale
// Completion may still read its record's ticket safely (see run_context.h).
//
// Ownership: the pushing thread fills a record; from publication on, the thread that holds it runs it (after the
// last grant), and the thread that retires it returns it to the pool. Fields are written before publication or by
// the running thread only, except the atomics below.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <string_view>

#include "engine/detail/op_function.h"
#include "engine/var_queue/op_node.h"
#include "executors/executor.h"

namespace depengine::detail {

class EngineCore;

struct OpRecord final : Task, OpNode {
  static constexpr std::uint32_t kInlineVars = 6;

  // Called by the pool before a record is handed out again.
  void prepare(EngineCore* owner, Executor* runs_on, std::int32_t urgency) noexcept {
    engine = owner;
    executor_ = runs_on;
    priority_ = urgency;
    next_ = nullptr;
    ready_next_ = nullptr;
  }

  // Room for `count` uses: the inline array, or one heap array (the documented allocation for large sets).
  void reserve_uses(std::size_t count) {
    if (count <= kInlineVars) {
      uses = inline_uses;
    } else {
      heap_uses = std::make_unique<VarUse[]>(count);
      uses = heap_uses.get();
    }
  }

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

  std::unique_ptr<VarUse[]> heap_uses;
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

}  // namespace depengine::detail
