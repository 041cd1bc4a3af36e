#include <cstdio>
#include <string>
#include <utility>

#include <depengine/buffers/buffer.h>
#include <depengine/executors/stream/stream_executor.h>

namespace depengine {
namespace {

// The stream executor at `index`, or null for a CPU executor. The one downcast of Buffers, once, at construction: to
// find the devices and the backend whose pools to make. Ops reach their stream through StreamPlacement.
StreamExecutor* stream_executor_at(Engine& engine, ExecutorRef index) {
  Executor& executor = engine.executor(index);
  if (!executor.issues_ahead()) return nullptr;
  auto* streams = dynamic_cast<StreamExecutor*>(&executor);
  if (streams == nullptr) {
    throw Error("Buffers: engine executor " + std::to_string(index) + " (" + std::string(executor.name()) +
                ") issues ahead but is not a StreamExecutor");
  }
  return streams;
}

}  // namespace

// A bounded allocation's block was granted (or the source failed): complete the reservation op.
void Buffer::Reservation::granted(ReserveWaiter& self, const PoolBlock& block, const DeathFrontier& death,
                                  std::exception_ptr error) noexcept {
  State* state = static_cast<Reservation&>(self).state;
  if (error == nullptr) {
    // relaxed: the completion below orders it before the variable's next op, as it does `death`.
    state->data.store(block.data, std::memory_order_relaxed);
    state->death = death;
  }
  const Completion done = *state->reserved;  // a copy: the op may be recycled once it is called
  done(std::move(error));                    // throws only when called twice, which a pool never does
}

void* Buffer::State::take_on_use() {
  void* mine = on_use->acquire(bytes, alignment, AcquireView{}).value().data;  // unbounded: always one
  void* expected = nullptr;
  // acq_rel: the release publishes the block's address to the acquire in data(); the acquire, on failure, reads the
  // winner's block, published the same way.
  if (data.compare_exchange_strong(expected, mine, std::memory_order_acq_rel)) return mine;
  on_use->release(PoolBlock{mine, block_bytes}, DeathFrontier{});  // never touched: nothing to wait for
  return expected;
}

Buffers::Buffers(Engine& engine, ExecutorRef executor, BuffersOptions options)
    : engine_(&engine),
      executor_index_(executor),
      executor_(stream_executor_at(engine, executor)),
      alignment_(options.alignment),
      bounded_(options.limit != ~std::size_t{0}),
      cpu_executor_(executor_ != nullptr ? options.cpu_executor : executor) {
  if (bounded_ && engine.executor(cpu_executor_).issues_ahead()) {
    throw Error("Buffers: BuffersOptions::cpu_executor " + std::to_string(cpu_executor_) +
                " is a stream executor; bounded pools run their reservations on a CPU executor");
  }
  if (executor_ == nullptr) {  // host memory, used by CPU ops only: every free happens after its users completed
    if (bounded_) order_.push_back(engine.NewVariable());
    pools_.push_back(std::make_shared<MemoryPool>(std::make_unique<HostBlockSource>(),
                                                  MemoryPoolOptions{.name = "host", .limit = options.limit}));
  } else {
    for (std::uint32_t device = 0; device < executor_->devices(); ++device) {
      if (bounded_) order_.push_back(engine.NewVariable());
      pools_.push_back(std::make_shared<MemoryPool>(
          std::make_unique<DeviceBlockSource>(executor_->backend(), static_cast<int>(device)),
          MemoryPoolOptions{.name = "device " + std::to_string(device),
                            .limit = options.limit,
                            .max_fence_waits = options.max_fence_waits,
                            .tracker = &executor_->tracker()}));
    }
  }
  report_hook_ = engine.AtReport([this] {
    std::string text;
    for (const auto& pool : pools_) text += pool->describe_queue();
    return text;
  });
  hook_ = engine.AtShutdown([this] {
    report_hook_.cancel();
    release();
  });  // last: nothing after it can throw
}

Buffers::~Buffers() {
  report_hook_.cancel();  // no report reads the pools from now on
  // True: the engine has not begun calling release() (and now never will), so it is alive.
  if (!hook_.cancel()) return;  // the engine released the pools at its shutdown
  for (const Var& order : order_) {
    try {
      engine_->DeleteVariable(order);
    } catch (const std::exception& e) {  // not reachable: the order variables are ours and alive; a leak, not a crash
      std::fprintf(stderr, "depengine: ~Buffers: %s\n", e.what());
    }
  }
  wait_for_ops();
}

Buffers::OpToken::OpToken(Buffers* owner) noexcept : owner_(owner) {
  if (owner_ == nullptr) return;
  std::lock_guard lock(owner_->ops_mutex_);
  ++owner_->ops_;
}

Buffers::OpToken::~OpToken() {
  if (owner_ == nullptr) return;  // moved from
  // Under the mutex to the end: the waiter frees the Buffers as soon as it sees the count at zero, which it can only
  // read once this thread has unlocked, its last access.
  std::lock_guard lock(owner_->ops_mutex_);
  if (--owner_->ops_ == 0) owner_->ops_done_.notify_all();
}

void Buffers::wait_for_ops() noexcept {
  std::unique_lock lock(ops_mutex_);
  ops_done_.wait(lock, [this] { return ops_ == 0; });
}

// The engine is being destroyed: every op has completed, and the executors (and the device memory they own) are still
// there. An op's function, and so its token, is destroyed just after the op retires, so the wait here is short.
void Buffers::release() noexcept {
  wait_for_ops();
  pools_.clear();
  engine_ = nullptr;
}

Engine& Buffers::engine() const {
  if (engine_ == nullptr) throw Error("Buffers: its engine has been destroyed");
  return *engine_;
}

MemoryPool& Buffers::pool(std::uint32_t device) const {
  (void)engine();  // throws once the engine, and the pools with it, are gone
  if (device >= pools_.size()) {
    throw Error("Buffers: device " + std::to_string(device) + " does not exist; the stream executor has " +
                std::to_string(pools_.size()) + " device(s)");
  }
  return *pools_[device];
}

Buffer Buffers::allocate(std::size_t bytes, std::uint32_t device, std::int32_t stream, StreamKind kind) {
  if (bytes == 0) throw Error("Buffers::allocate: 0 bytes");
  // Inside a capture the buffer is planned (see Inside a capture in buffer.h): its ops hold the pool, not a token.
  const bool planned = engine().Capturing();
  if (planned && bounded_) {
    throw Error(
        "Buffers::allocate inside Capture: the pool is bounded (BuffersOptions::limit), and a graph keeps every buffer "
        "it allocates until it is destroyed, so a replay could wait for ever for room its own frees would have made; "
        "allocate the step's buffers before the capture, or use an unbounded pool");
  }
  MemoryPool& from = pool(device);
  std::shared_ptr<MemoryPool> shared = pools_[device];
  Buffer buffer;
  buffer.state_ = std::make_shared<Buffer::State>();
  buffer.state_->bytes = bytes;
  buffer.state_->device = device;
  try {
    buffer.state_->block_bytes = from.block_bytes(bytes, alignment_);
  } catch (const std::exception& e) {
    throw Error(std::string("Buffers::allocate: ") + e.what());
  }
  Engine& engine = this->engine();
  buffer.var_ = engine.NewVariable();
  if (executor_ == nullptr && !bounded_) {  // host memory, taken by the first data() (see On a CPU executor)
    buffer.state_->on_use = pools_[device];
    buffer.state_->alignment = alignment_;
    return buffer;
  }
  PushOptions options;
  options.context = Context{.executor = executor_index_, .device = device, .stream_kind = kind, .stream = stream};
  options.name = "alloca";
  StreamExecutor* executor = executor_;
  const std::size_t alignment = alignment_;
  if (bounded_) {
    // The reservation: completed by the pool when it grants a block (now, or at a later free); the stream op then
    // waits on the device for that block's last users, as far as its stream does not already follow them. It also
    // mutates the device's order variable, so reservations are granted in push order, as a serial run would make
    // them: a later allocation never takes the memory an earlier one waits for (which could deadlock a program whose
    // frees depend on the earlier one).
    engine.PushAsync(
        [state = buffer.state_, from = shared, alignment, token = OpToken(this)](Completion done) {
          state->reserved.emplace(done);
          from->reserve(state->bytes, alignment, state->reservation);
        },
        {}, {buffer.var_, order_[device]},
        PushOptions{.context = {.executor = cpu_executor_}, .name = "pool reservation"});
    if (executor == nullptr) return buffer;  // host memory: the reservation's grant is the allocation
    // The alloca op: its stream is known now, so the pool may swap the reserved block for one this stream already
    // follows (MemoryPool::settle); the stream waits for what is left of the block's death frontier.
    engine.Push(
        [state = buffer.state_, from = shared, tracker = &executor->tracker(),
         token = OpToken(this)](const RunContext& ctx) {
          const StreamPlacement& where = *ctx.stream;
          // relaxed, both: the reservation op, which the variable orders before this one, wrote data.
          const PoolBlock reserved{state->data.load(std::memory_order_relaxed), state->block_bytes};
          const PoolBlock block = from->settle(reserved, state->death, AcquireView{where.knowledge, tracker});
          state->data.store(block.data, std::memory_order_relaxed);
          where.wait_for(state->death);
        },
        {}, {buffer.var_}, options);
    return buffer;
  }
  engine.Push(
      [state = buffer.state_, from = shared, tracker = &executor->tracker(), alignment, planned,
       token = OpToken(planned ? nullptr : this)](const RunContext& ctx) {
        // relaxed: written by an earlier replay of this op, which the variable orders before this one.
        if (state->data.load(std::memory_order_relaxed) != nullptr) return;  // planned: the block is kept
        const StreamPlacement& where = *ctx.stream;
        // Planned: no device wait, which a recording (CUDA and HIP graphs) cannot hold; a block that would need one is
        // not reused, a fresh one is taken instead, once.
        const AcquireView view{where.knowledge, tracker, planned ? nullptr : where.wait, where.wait_context};
        // relaxed: the variable orders this op before every other user of the block.
        state->data.store(from->acquire(state->bytes, alignment, view).value().data,  // unbounded: always one
                          std::memory_order_relaxed);
      },
      {}, {buffer.var_}, options);
  return buffer;
}

void Buffers::deallocate(Buffer& buffer, std::int32_t stream, StreamKind kind) {
  if (buffer.state_ == nullptr) throw Error("Buffers::deallocate: null buffer");
  (void)pool(buffer.state_->device);  // throws once the engine is gone, or for another Buffers' device
  const bool planned = engine().Capturing();
  std::shared_ptr<MemoryPool> to = pools_[buffer.state_->device];
  PushOptions options;
  options.context =
      Context{.executor = executor_index_, .device = buffer.state_->device, .stream_kind = kind, .stream = stream};
  options.name = "dealloca";
  // Inside a capture the engine runs the deleter once, when the graph is destroyed (engine/graph.h).
  auto release_block = [state = buffer.state_, to = std::move(to),
                        token = OpToken(planned ? nullptr : this)](const RunContext& ctx) {
    state->on_use = nullptr;  // a data() after the free takes nothing (misuse: the buffer is dead)
    // relaxed: the variable orders this op after every other user of the block.
    void* const data = state->data.load(std::memory_order_relaxed);
    if (data == nullptr) return;  // never used, or the allocation failed: nothing to give back
    // A deletion mutates the variable, so its wait frontier holds the signals of every use since the last write and
    // of that write, whose own completion implies the uses before it: once these have completed, every user has.
    // Any stream that knows them, the one this deletion is issued on included, reuses the block at once.
    // On a CPU executor the deletion runs after its users completed: nothing to wait for (an empty frontier).
    to->release(PoolBlock{data, state->block_bytes}, ctx.stream != nullptr ? *ctx.waits : DeathFrontier{});
  };
  try {
    engine().DeleteVariable(buffer.var_, std::move(release_block), options);
  } catch (const Error& e) {
    if (!planned) throw;
    throw Error(std::string("Buffers::deallocate: ") + e.what());  // a buffer allocated before the capture
  }
  buffer = Buffer{};
}

}  // namespace depengine
