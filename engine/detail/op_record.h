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
#include <functional>
#include <memory>
#include <string_view>

#include <depengine/engine/cancel_scope.h>
#include <depengine/engine/detail/observed_op.h>
#include <depengine/engine/detail/op_function.h>
#include <depengine/engine/fence.h>
#include <depengine/engine/op_name.h>
#include <depengine/engine/var_queue/op_node.h>
#include <depengine/executors/executor.h>
#include <depengine/frontier/timeline.h>
#include <depengine/support/cache_line.h>

namespace depengine::detail {

class EngineCore;
struct GraphOp;
struct OpRecord;
class StreamGraph;

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

// Layout, by writer (oneTBB's arena_slot.h style; held by the static_asserts below). An op's record is written by one
// thread at a time in turn (the pusher, the granters, the runner, the recycler), so what matters is how many lines each
// hand-off moves between cores: a CPU op touches lines 0 to 3 (and 4-5 for more than two variables, 6 when async);
// line 7 for a named op; the cold lines are touched only by engines with stream executors and by ops with fences.
//   line 0, hand-off:  the bases (Task: links, placement, executor; OpNode: the wait counter, the ready link) and
//                      engine. The pusher writes placement and engine; granters count down the wait counter; the last
//                      granter, which needs the executor and priority next, writes the links. Never two writers at once
//                      but for the counter, whose last writer then owns the line.
//   line 1, function:  fn (64 bytes). Pusher writes, runner calls, recycler destroys.
//   line 2, op state:  uses, flags, trace id (pusher, before publication); error (runner); reset by recycler.
//   lines 3-5, uses:   inline_uses. Each VarUse's `next` is written by later pushers of the same variable, under its
//                      lock, while the op waits; apart from the op's own state so those appends do not disturb it.
//   line 6, async:     holds and ticket, written by the function's thread and the completing thread, concurrently;
//                      and `observed`, written by the steps of an op's life on engines with observers only.
//   line 7, name:      written by the pusher and read by the runner (and traces) only for ops that have a name.
//   cold:              wait frontier, parking and fence waiters, fences, a stream op's trace lane: stream and fence
//                      state, which a CPU-only engine's ops without fences never touch (prepare_cold()).
struct OpRecord final : Task, OpNode {
  static constexpr std::uint32_t kInlineVars = 6;
  // A heap array of uses for at most this many variables stays with the record when it is recycled, so ops that list
  // up to kKeptVars variables allocate only until the pooled records have grown to their size (MXNet's RandSumExpr
  // shape, 3 to 20 variables, then allocates nothing in steady state). A larger array is freed at recycling.
  static constexpr std::uint32_t kKeptVars = 64;

  // Called by the pusher on a record taken from the pool: lines 0 and 2.
  void prepare(EngineCore* pusher_engine, Executor* runs_on, std::int32_t urgency) noexcept {
    engine = pusher_engine;
    executor_ = runs_on;
    priority_ = urgency;
    device_ = 0;
    stream_ = -1;
    stream_kind_ = StreamKind::kCompute;
    next_ = nullptr;
    ready_next_ = nullptr;
    trace_op = 0;
    waits_fences = false;
    signals_fences = false;
    named = false;
    replay_completion = false;
  }

  // Called by the pusher when the op's cold state will be read: its engine has a stream executor, or it has fences.
  void prepare_cold() noexcept {
    requirement.clear();
    issued_at = FrontierEntry{};
    next_fence = 0;
    stream_graph = nullptr;
    waits_failed = false;
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
      heap_capacity = static_cast<std::uint32_t>(capacity);
    }
    uses = heap_uses.get();
  }

  // Sorts the uses by variable address and folds a variable listed twice into one use (the stronger wins: op_node.h):
  // the global order in which a push that must wait takes the locks (push.cpp), and one use per variable for a graph's
  // capture. Returns false if two uses of one variable name different lives of it (then one of the handles is dead).
  [[nodiscard]] bool sort_and_fold_uses() noexcept {
    std::sort(uses, uses + num_uses, [](const VarUse& a, const VarUse& b) { return std::less<>()(a.var, b.var); });
    std::uint32_t distinct = 0;
    for (std::uint32_t i = 0; i < num_uses; ++i) {
      if (distinct > 0 && uses[distinct - 1].var == uses[i].var) {
        if (uses[i].tag != uses[distinct - 1].tag) return false;
        uses[distinct - 1].access = std::max(uses[distinct - 1].access, uses[i].access);
      } else {
        uses[distinct++] = uses[i];
      }
    }
    num_uses = distinct;
    return true;
  }

  // Returns the record to the pool: destroys its function (and what it captured) and its error, frees a heap array
  // of uses larger than the records keep. Called by the thread that retires the op (or abandons its push).
  void recycle() noexcept;

  // Line 0 (after the bases).
  EngineCore* engine = nullptr;  // not owned; outlives the op

  // Line 1.
  alignas(support::kCacheLine) OpFunction fn;

  // Line 2.
  alignas(support::kCacheLine) std::exception_ptr error;  // the op's first error: a poisoned input's, or its own
  VarUse* uses = inline_uses;
  std::unique_ptr<VarUse[]> heap_uses;
  std::uint64_t trace_op = 0;       // tracing (trace_recorder.h): the op's id; 0: not traced
  std::uint32_t heap_capacity = 0;  // entries of heap_uses
  std::uint32_t num_uses = 0;
  bool async = false;
  bool no_skip = false;
  bool deletes_var = false;     // DeleteVariable's op: its single use's variable is recycled when it retires
  bool internal = false;        // pushed by the engine itself (waits, error clearing): exempt from the in-flight bound
  bool waits_fences = false;    // wait_fences holds the op's wait fences (else it is stale)
  bool signals_fences = false;  // signal_fences holds the op's signal fences (else it is stale)
  bool named = false;           // name holds the op's name (else it is stale)
  bool replay_completion = false;  // the record only carries the Completion of `replayed` (line 6)
  std::uint64_t owner = 0;         // the thread whose op this is (error_log.h): read only on the error path
  ScopeState* scope = nullptr;     // PushOptions::scope's state, referenced from publication to retirement; null: none

  // Lines 3 to 5.
  alignas(support::kCacheLine) VarUse inline_uses[kInlineVars];

  // The op's name, read only when `named`: ops without a name never touch this line.
  [[nodiscard]] std::string_view name_view() const noexcept { return named ? name.view() : std::string_view{}; }

  // Line 6. Async ops are released by two parties, the function's return and the completion; the later one recycles
  // the record (the function may still be running when another thread completes the op, and its callable lives here).
  alignas(support::kCacheLine) std::atomic<std::uint32_t> holds{0};
  // Moves on by one at every completion of an async op; a Completion carries the value it expects, so a second call
  // (or a call on a record since reused) fails its compare-exchange instead of completing someone else's op.
  std::atomic<std::uint64_t> ticket{0};
  // With replay_completion: the async op of a replay whose Completion this record carries (graph_runner.cpp), so that a
  // stale call still finds pooled memory. Written before the Completion exists.
  GraphOp* replayed = nullptr;
  // On an engine with observers (observer.h): the op's id and the times of its steps so far, written by the thread that
  // passes it through each (push, last grant, start) before the next hand-off; untouched (stale) on other engines.
  ObservedOp observed;

  // Line 7: the name (PushOptions::name), copied only when there is one.
  alignas(support::kCacheLine) OpName name;

  // Cold. The op's wait frontier (engines with stream executors only): the requirements of the promises its wait fences
  // took, then, when its last grant arrives, the signals of the uses it was granted. Read by its stream executor at
  // issue, and by the tracker while the op is parked.
  alignas(support::kCacheLine) WaitFrontier requirement;
  ParkWaiter waiter{this};
  FrontierEntry issued_at{};  // a stream op's own signal, kept for the knowledge its signal fences carry
  // Fences (PushOptions). The wait fences are armed one after another, next_fence the one armed now; all of them
  // together hold one grant of the op's wait counter.
  FenceList wait_fences;
  FenceList signal_fences;
  FenceWaiter fence_waiter{this};
  std::uint8_t next_fence = 0;
  // Tracing a stream op: its lane and issue time, and when its device work ran (steady-clock ns; -1: not known),
  // written by its executor before its completion (ExecutorHost::ran_on_device).
  std::uint32_t trace_lane = 0;
  std::int64_t trace_start = 0;
  std::int64_t ran_start = -1, ran_end = -1;
  // The graph a replay of stream ops runs (stream_graph.h), or null: its steps' mutations are counted, and an input
  // whose stream failed skips it whole, even where its function does not run.
  StreamGraph* stream_graph = nullptr;
  // A stream the op waited for failed (take_input_error): its wait frontier names work that never completed, so its
  // function is not shown it (RunContext::waits).
  bool waits_failed = false;
};

// The layout above. offsetof on a class with bases is conditionally supported; GCC and Clang support it for non-virtual
// bases, as here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winvalid-offsetof"
static_assert(offsetof(OpRecord, engine) + sizeof(EngineCore*) <= 64, "line 0: the bases and engine");
static_assert(offsetof(OpRecord, fn) == 64 && sizeof(OpFunction) == 64, "line 1: the function alone");
static_assert(offsetof(OpRecord, error) == 128 && offsetof(OpRecord, scope) + sizeof(ScopeState*) <= 192,
              "line 2: the op's state");
static_assert(offsetof(OpRecord, inline_uses) == 192 && sizeof(OpRecord::inline_uses) == 192, "lines 3-5: uses");
static_assert(offsetof(OpRecord, holds) == 384 && offsetof(OpRecord, observed) + sizeof(ObservedOp) <= 448,
              "line 6: the async holders and the observed times");
static_assert(offsetof(OpRecord, name) == 448 && sizeof(OpName) <= 64, "line 7: the name alone");
static_assert(offsetof(OpRecord, requirement) == 512, "cold lines after the hot ones");
#pragma GCC diagnostic pop
// The whole record: the 8 hot lines above and 14 cold ones (the wait frontier's inline entries alone are 520 bytes),
// 1,408 bytes in the release, tsan and asan builds alike (x86-64, GCC and Clang). Records are carved from slabs and
// never freed (RecordPool), so every line is paid by each record in flight and each one pooled, for the life of the
// process; a CPU op touches only the hot lines, so growth of the cold part costs memory, not hand-offs. A field that
// makes the record grow past this bound says why in the same change, and moves the bound with it.
static_assert(sizeof(OpRecord) <= 22 * support::kCacheLine, "an op record takes at most 22 cache lines");

// A process-wide pool of op records with per-thread magazines (Bonwick's magazine allocator, reduced).
//
// Each thread keeps up to 2 * kMagazine records of its own; a thread that frees more than that hands a magazine of
// kMagazine to the shared depot, and a thread that runs out takes one from it (or allocates kMagazine new records).
// Pushing on one thread and completing on another so costs one depot lock per kMagazine ops, not one per op.
//
// Pooled records are linked through Task::next_ (a record in the pool is in no queue).
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
