// Buffer and Buffers: a variable plus a block of one device's memory (the minimal NDArray the examples need), whose
// allocation and free are stream-ordered engine ops (IREE's queue alloca/dealloca).
//
//   depengine::Buffers buffers(engine, /*stream_executor=*/1);
//   depengine::Buffer x = buffers.allocate(bytes, /*device=*/0);     // an op on a stream of device 0
//   engine.Push([x](const RunContext& ctx) { fill<<<..., ctx.stream->native>>>(x.data()); }, {}, {x.var()}, on_gpu);
//   buffers.deallocate(x);                                           // after every op pushed on x.var()
//
// allocate() pushes the alloca op, which mutates the buffer's variable. When that op is issued, it takes a block from
// the device's MemoryPool with what its stream knows, so memory is committed just before its first use: a block whose
// last users the stream already follows is reused with no synchronisation, and one it does not is reused after device
// waits on exactly the missing entries (memory/memory_pool.h). deallocate() pushes the dealloca op, DeleteVariable on a
// stream of the device. When it is issued, after every earlier use, the block returns to the pool with the death
// frontier of its last users' signals (the deletion's wait frontier, RunContext::waits). That happens at issue, not
// when the device finishes, so a later allocation on a stream that already follows those users reuses the block at
// once: the stream of the last use, or one that has waited for it.
//
// Every op that uses the buffer names its variable, so data() is written (by the alloca op) before any of them runs
// or is issued. A failed allocation (the device is out of memory) is the alloca op's error, on the variable.
// Bounded pools (BuffersOptions::limit): an allocation that does not fit under the limit waits as a pending op, not a
// blocked thread, until frees make room. allocate() then pushes two ops on the variable: a reservation on a CPU
// executor (an async op that MemoryPool::reserve completes when a block is granted, possibly from a free issued
// later), then the alloca op on the stream, which settles the block on its stream (MemoryPool::settle: a free block of
// the class that the stream already follows replaces it, if there is one) and waits on the device for what is left of
// its death frontier.
// Reservations on one device are granted in push order (they share an order variable), as a serial run would grant
// them: an allocation waits only for frees of buffers allocated before it, so a program that runs serially within the
// limit runs here too, pipelined as far as the limit allows. One larger than the limit is an Error at once.
// A free block of another size class is trimmed for a request only once its users have completed (on the tracker).
//
// On a CPU executor (a oneTBB pool, inline) the same calls give host memory for CPU ops, and a freed block is reused
// by the next allocation of its size class with no wait, since the free ran after every user completed. Code written
// against Buffers so runs unchanged on CPU and on streams. There allocate() pushes nothing: the block is taken by the
// first call of data(), inside the buffer's first op to run, so memory is committed when the work reaches it, not when
// the pushing thread does (a pusher running many steps ahead would otherwise hold every step's memory at once). Its
// free is an op on that executor, after every op pushed on the variable. Bounded CPU pools keep their reservation op
// (below), granted in push order.
//
// Inside a capture (engine/graph.h) allocate() and deallocate() are captured like any push, and a buffer allocated
// and freed in the capture is planned once: its variable is the graph's, its block is taken by the first replay
// (its alloca op, or on a CPU executor its first data()) and kept by every later one, which does no pool work, and the
// free runs once, when the graph is destroyed, returning the block with the death frontier of the last replay's users.
// Every replay's ops see the same data(), ordered by the variable, so replays of one graph never share a block at
// once; a graph holds the blocks of all its buffers for its lifetime (no reuse among them inside a replay). A buffer
// allocated in a capture and freed after it is the user's, as any; one allocated before a capture cannot be freed in
// it (Error). A planned allocation on a stream takes no block that needs a device wait (a recording on CUDA or HIP
// cannot hold one): a fresh one instead, once. Bounded pools cannot allocate in a capture (Error: a graph frees its
// buffers only when destroyed, so a replay could wait for ever for room its own frees would have made). The ops of a
// graph hold the pool itself rather than counting as Buffers' ops, so ~Buffers does not wait for graphs that outlive
// it. A graph that outlives its engine never runs its frees (engine/graph.h), so its planned blocks are not given
// back: destroy graphs before their engine.
//
// Thread safety: Buffers may be used from any thread, concurrently; a Buffer is a value whose copies name one buffer.
// Lifetime: Buffers and its engine may be destroyed in either order, unwinding included. ~Buffers waits for the
// allocations and frees it pushed to finish (so a free pushed just before is not lost), then returns its pools' blocks;
// if the engine is destroyed first, it releases the pools once its ops have completed, before its executors stop
// (Engine::AtShutdown), and the Buffers left behind refuses further use with an Error. A buffer never freed keeps its
// block until then (on a CPU executor, its host pool lives on until the buffer's last copy is gone). A bounded
// allocation still waiting for memory that no pushed free will return makes ~Buffers wait for ever: free every buffer
// before destroying Buffers. Do not destroy Buffers from inside an op of its engine.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include <depengine/engine/engine.h>
#include <depengine/memory/memory_pool.h>

namespace depengine {

class StreamExecutor;

class Buffer {
 public:
  Buffer() = default;  // a null buffer

  // The buffer's variable: name it in the reads or mutates of every op that uses the block.
  [[nodiscard]] Var var() const noexcept { return var_; }
  // The block: read it inside an op that uses var() (when it runs, or is issued), pushed after allocate() and before
  // deallocate(), and hand the pointer to the device work the op enqueues. Null if the allocation failed (the
  // variable carries the error) or for a null buffer. From an unbounded pool on a CPU executor, the first call takes
  // the block (concurrent first calls agree on one) and throws what the pool throws when memory is exhausted, which
  // then is the calling op's error.
  [[nodiscard]] void* data() const {
    if (state_ == nullptr) return nullptr;
    // acquire: pairs with the release in State::take_on_use() (another reader of the buffer took the block); the
    // other writers of `data` are ops ordered before every reader by the variable.
    void* data = state_->data.load(std::memory_order_acquire);
    return data != nullptr || state_->on_use == nullptr ? data : state_->take_on_use();
  }
  // The block's size in bytes (its size class) and the device it is on; 0 for a null buffer.
  [[nodiscard]] std::size_t bytes() const noexcept { return state_ != nullptr ? state_->bytes : 0; }
  [[nodiscard]] std::uint32_t device() const noexcept { return state_ != nullptr ? state_->device : 0; }

 private:
  friend class Buffers;
  struct State;
  // The pending reservation of a bounded allocation: completes the reservation op when the pool grants a block.
  struct Reservation final : ReserveWaiter {
    explicit Reservation(State* owner) noexcept : ReserveWaiter(&granted), state(owner) {}
    static void granted(ReserveWaiter& self, const PoolBlock& block, const DeathFrontier& death,
                        std::exception_ptr error) noexcept;
    State* state;
  };
  struct State {
    // Takes the block from on_use, the first call of data() to get here; returns it. A racing first call that lost
    // gives its own block back.
    void* take_on_use();

    std::size_t bytes = 0;
    std::uint32_t device = 0;
    // The block: its size class (known at allocate()) and its address, written once by the alloca (or reservation) op,
    // which the variable orders before every other user, or by take_on_use(). Null until then, and if it failed.
    std::size_t block_bytes = 0;
    std::atomic<void*> data{nullptr};
    // Unbounded CPU pools: where data() takes the block on first use (with `alignment`). Set by allocate() and cleared
    // by the free, which the variable orders after every user. Null otherwise: the alloca op takes the block. Shared:
    // an op may take the block of a buffer never freed after ~Buffers, which then leaves the host pool to its buffers.
    std::shared_ptr<MemoryPool> on_use;
    std::size_t alignment = 0;
    // Bounded pools only: the reservation op's completion, and the granted block's death frontier, which the alloca
    // op makes its stream wait for. Written before that completion is called, read by the alloca op after it.
    std::optional<Completion> reserved;
    DeathFrontier death;
    Reservation reservation{this};
  };
  Var var_;
  std::shared_ptr<State> state_;
};

struct BuffersOptions {
  std::size_t alignment = 256;          // of every block (at most the backend's 256)
  std::uint32_t max_fence_waits = 2;    // MemoryPoolOptions::max_fence_waits of each device's pool
  std::size_t limit = ~std::size_t{0};  // bytes each device's pool may hold (see Bounded pools above)
  ExecutorRef cpu_executor = 0;         // the CPU executor that runs reservations (bounded pools on streams only)
};

class Buffers {
 public:
  // Pools for every device of engine.executor(executor), a StreamExecutor; or, for a CPU executor, one pool of host
  // memory (device 0), whose allocations and frees are ops on that executor (the stream arguments are ignored).
  // `executor`: its ExecutorId (engine/executor_id.h) or index. Throws Error for an executor that issues ahead but is
  // not a StreamExecutor, and for an id that another engine's options issued.
  Buffers(Engine& engine, ExecutorRef executor, BuffersOptions options = {});
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;
  ~Buffers();

  // Pushes the allocation of `bytes` (> 0) on `device`, on stream `stream` of `kind` (-1: the executor chooses).
  // Throws Error for a bad device, a zero size, (bounded pools) a request larger than the limit, or for a bounded pool
  // inside a Capture (see Inside a capture above).
  [[nodiscard]] Buffer allocate(std::size_t bytes, std::uint32_t device, std::int32_t stream = -1,
                                StreamKind kind = StreamKind::kCompute);
  // Pushes the free of `buffer` after every op pushed on its variable, on stream `stream` of the buffer's device
  // (-1: the executor chooses; it keeps it behind the buffer's last user). `buffer`, and every copy of it, is dead
  // from this call on. Throws Error for a null or already freed buffer, or inside a Capture for a buffer allocated
  // before it.
  void deallocate(Buffer& buffer, std::int32_t stream = -1, StreamKind kind = StreamKind::kCompute);

  // Throws Error for a device that does not exist, or once the engine has been destroyed.
  [[nodiscard]] MemoryPool& pool(std::uint32_t device) const;

  // Reduction into `into` (StarPU's STARPU_REDUX; docs/accumulate.md, "Reduction"): pushes `fn`, which reads `reads`
  // and writes its contribution into a private copy of `into`, then the fold of that copy into `into`. The copy is a
  // buffer of into.bytes() on into's device, allocated for the call (a block that an earlier copy returned is reused,
  // death frontier permitting) and filled by `identity` before `fn` runs; the fold is an accumulation of `into`
  // (Engine::PushAccumulate) that calls `combine`, and the copy is freed after it. So the contributions of reductions
  // pushed one after another run at once (their copies share nothing), and their folds run one at a time, each as
  // soon as its contribution is done, all before the next use of `into` that is not an accumulation. Called as
  // identity(ctx, copy), fn(ctx, copy) and combine(ctx, into.data(), copy), copy a void*, each inside its op (on a
  // stream executor: enqueue the work on ctx.stream). `options` places the contribution and the fold, and names the
  // stream of the copy's allocation and free. Errors: what identity or fn throws is the copy's error, which skips the
  // fold and poisons `into`, as a failed accumulation does. Throws Error for a null `into`, and where allocate() or
  // Push would (pushing nothing it can take back: a copy already allocated is freed). Cost: an allocation and a free
  // of the copy (no op on a CPU executor for the allocation), and two ops.
  template <class Fn, class Identity, class Combine>
  void PushReduce(Fn&& fn, VarList reads, const Buffer& into, Identity&& identity, Combine&& combine,
                  const PushOptions& options = {}) {
    if (into.state_ == nullptr) throw Error("Buffers::PushReduce: `into` is a null buffer");
    Engine& on = engine();
    Buffer copy = allocate(into.bytes(), into.device(), options.context.stream, options.context.stream_kind);
    try {
      on.Push(
          [fn = std::forward<Fn>(fn), identity = std::forward<Identity>(identity),
           copy](const RunContext& ctx) mutable {
            identity(ctx, copy.data());
            fn(ctx, copy.data());
          },
          reads, {copy.var()}, options);
      on.PushAccumulate([combine = std::forward<Combine>(combine), into,
                         copy](const RunContext& ctx) mutable { combine(ctx, into.data(), copy.data()); },
                        {copy.var()}, {}, {into.var()}, options);
    } catch (...) {
      deallocate(copy, options.context.stream, options.context.stream_kind);
      throw;
    }
    deallocate(copy, options.context.stream, options.context.stream_kind);
  }

 private:
  // Held by every op Buffers pushes, in its function, for as long as the op's record holds the function (it is
  // destroyed after the op ran or was skipped): ~Buffers and the engine's shutdown wait until none is left before they
  // free the pools.
  class OpToken {
   public:
    explicit OpToken(Buffers* owner) noexcept;  // null: counts nothing (an op of a graph: see Inside a capture)
    OpToken(OpToken&& other) noexcept : owner_(std::exchange(other.owner_, nullptr)) {}
    OpToken& operator=(OpToken&&) = delete;
    ~OpToken();

   private:
    Buffers* owner_;
  };

  [[nodiscard]] Engine& engine() const;
  void wait_for_ops() noexcept;
  void release() noexcept;  // at the engine's shutdown: wait for the ops, free the pools, forget the engine

  Engine* engine_;  // null once the engine's shutdown has released the pools
  const ExecutorRef executor_index_;
  StreamExecutor* const executor_;  // null: a CPU executor (one host pool)
  const std::size_t alignment_;
  const bool bounded_;
  const ExecutorRef cpu_executor_;
  std::vector<std::shared_ptr<MemoryPool>> pools_;  // one per device; immutable after construction (see State::on_use)
  std::vector<Var> order_;  // bounded pools: one per device, mutated by every reservation (push order)

  std::mutex ops_mutex_;
  std::condition_variable ops_done_;
  std::size_t ops_ = 0;     // live OpTokens; guarded by ops_mutex_
  ReportHook report_hook_;  // the pools' queued reservations, in the engine's in-flight report
  ShutdownHook hook_;       // last: cancelled first by the destructor
};

}  // namespace depengine
