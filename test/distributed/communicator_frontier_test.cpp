// Frontiers across ranks (distributed/communicator.h, "Frontiers across ranks"), on every rank of mpirun: each rank's
// stream axes carry its rank as their machine index; a message carries what its sender knew, which the receiver's
// stream ops then find complete, with no device wait (only the remote entry is not dominated by the stream itself);
// a collective's completion is one entry on the communicator's collective axis, the same on every rank.
#include <mpi.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <vector>

#include <depengine/distributed/communicator.h>
#include <depengine/engine/engine.h>
#include <depengine/executors/host_stream/host_stream_backend.h>
#include <depengine/executors/mpi/mpi_executor.h>
#include <depengine/executors/stream/stream_executor.h>
#include <depengine/executors/threadpool/threadpool_executor.h>

namespace depengine {
namespace {

constexpr std::uint32_t kComm = 1;
constexpr std::uint32_t kStreams = 2;

int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

// A CPU pool, the MpiExecutor, and host streams whose axes carry `machine` (by default this rank) as their machine
// index; the stream executor's id in *streams when given.
EngineOptions options(int machine = world_rank(), ExecutorId<StreamExecutor>* streams = nullptr) {
  EngineOptions options;
  options.emplace<ThreadPoolExecutor>(ThreadPoolOptions{.workers = 1});
  options.emplace<MpiExecutor>();
  const ExecutorId<StreamExecutor> id = options.emplace<StreamExecutor>(
      std::make_unique<HostStreamBackend>(HostStreamOptions{.devices = 1}),
      StreamExecutorOptions{.compute_streams = 2, .copy_streams = 0, .machine = static_cast<std::uint8_t>(machine)});
  if (streams != nullptr) *streams = id;
  return options;
}

PushOptions on_stream(std::int32_t stream) {
  return PushOptions{.context = {.executor = kStreams, .device = 0, .stream = stream}};
}

// Enqueues `fn` as host work on the op's stream.
template <class F>
void launch(const RunContext& ctx, F&& fn) {
  launch_host(*ctx.stream, HostTask(std::forward<F>(fn)));
}

TEST_CASE("a message carries what its sender knew: the receiver's stream op finds it complete, with no device wait",
          "[distributed][frontier]") {
  ExecutorId<StreamExecutor> stream_id;
  Engine engine(options(world_rank(), &stream_id));
  Communicator world(engine, kComm);
  if (world.rank() > 1) return;  // ranks 0 and 1 exchange; the others have nothing to do
  std::vector<int> data(64, 0);
  const Var var = engine.NewVariable();
  std::uint64_t sent[2] = {0, 0};  // rank 0: the (axis bits, epoch) its data was written at, sent afterwards
  const Var sent_var = engine.NewVariable();
  if (world.rank() == 0) {
    engine.Push(
        [&](const RunContext& ctx) {
          sent[0] = ctx.stream->axis.bits();
          sent[1] = ctx.stream->epoch;
          int* out = data.data();
          launch(ctx, [out] { std::fill(out, out + 64, 7); });
        },
        {}, {var, sent_var}, on_stream(1));
    world.Send({var, data.data(), data.size() * sizeof(int)}, 1, /*tag=*/3);
    world.Send({sent_var, sent, sizeof(sent)}, 1, /*tag=*/4);
    engine.WaitForAll();
    return;
  }
  // Rank 1: a local write on stream 0, the message, then a stream op on stream 0 that reads both.
  const StreamStats before = engine.executor(stream_id).stats(0, StreamKind::kCompute, 0);
  const Var local = engine.NewVariable();
  Axis own_axis{};
  engine.Push([&](const RunContext& ctx) { own_axis = ctx.stream->axis; }, {}, {local}, on_stream(0));
  world.Recv({var, data.data(), data.size() * sizeof(int)}, 0, /*tag=*/3);
  std::vector<FrontierEntry> waits;
  int first = -1;
  engine.Push(
      [&](const RunContext& ctx) {
        waits.assign(ctx.waits->begin(), ctx.waits->end());
        first = data.front();  // the host backend runs host work in order; the receive completed before this issue
      },
      {local, var}, {}, on_stream(0));
  world.Recv({sent_var, sent, sizeof(sent)}, 0, /*tag=*/4);
  engine.WaitForAll();
  const StreamStats after = engine.executor(stream_id).stats(0, StreamKind::kCompute, 0);
  CHECK(first == 7);
  CHECK(own_axis.machine() == 1);
  CHECK(own_axis.domain() == AxisDomain::kQueue);
  // The stream op waited for its stream's own earlier op (dominated: elided) and rank 0's write (complete: learned from
  // the message), and for nothing on the device.
  REQUIRE(waits.size() == 2);
  const auto remote =
      std::find_if(waits.begin(), waits.end(), [](const FrontierEntry& e) { return e.axis.machine() == 0; });
  REQUIRE(remote != waits.end());
  CHECK(remote->axis.bits() == sent[0]);
  CHECK(remote->epoch == sent[1]);
  CHECK(remote->axis.domain() == AxisDomain::kQueue);
  CHECK(after.waits_issued - before.waits_issued == 0);
  CHECK(after.waits_elided - before.waits_elided == 1);
  CHECK(after.waits_complete - before.waits_complete == 1);
  CHECK(engine.InFlight() == 0);
}

TEST_CASE("a collective's completion is one entry on the communicator's collective axis, the same on every rank",
          "[distributed][frontier]") {
  std::uint64_t axis_bits = 0;
  {
    Engine engine(options());
    Communicator world(engine, kComm);
    const Axis axis = world.executor().collective_axis();
    axis_bits = axis.bits();
    CHECK(axis.domain() == AxisDomain::kCollective);
    CHECK(axis.machine() == MpiExecutor::kClusterMachine);
    std::vector<double> data(8, 1.0);
    const Var var = engine.NewVariable();
    std::vector<FrontierEntry> waits[2];
    for (int k = 0; k < 2; ++k) {
      world.AllReduceSum<double>({var, data.data(), data.size() * sizeof(double)});
      engine.Push([&waits, k](const RunContext& ctx) { waits[k].assign(ctx.waits->begin(), ctx.waits->end()); }, {var},
                  {}, on_stream(0));
    }
    engine.WaitForAll();
    for (int k = 0; k < 2; ++k) {
      CAPTURE(k);
      REQUIRE(waits[k].size() == 1);  // one entry, however many ranks took part
      CHECK(waits[k][0].axis == axis);
      CHECK(waits[k][0].epoch == static_cast<std::uint64_t>(k + 1));
    }
    CHECK(data[0] == static_cast<double>(world.size() * world.size()));  // each all-reduce multiplies by the count
  }
  // The engine and its executor are gone: the test thread may call MPI itself.
  std::uint64_t lowest = 0, highest = 0;
  MPI_Allreduce(&axis_bits, &lowest, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&axis_bits, &highest, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  CHECK(lowest == highest);
}

TEST_CASE("each MpiExecutor made in a process names a collective axis of its own", "[distributed][frontier]") {
  std::uint64_t first = 0, second = 0;
  {
    Engine engine(options());
    first = Communicator(engine, kComm).executor().collective_axis().bits();
  }
  {
    Engine engine(options());
    second = Communicator(engine, kComm).executor().collective_axis().bits();
  }
  CHECK(first != second);
}

TEST_CASE("ranks whose stream axes alias (machine index left at 0) never mark each other's work complete",
          "[distributed][frontier]") {
  ExecutorId<StreamExecutor> stream_id;
  Engine engine(options(/*machine=*/0, &stream_id));  // every rank's stream 0 has the same axis bits
  Communicator world(engine, kComm);
  if (world.rank() > 1) return;
  const StreamExecutor& executor = engine.executor(stream_id);
  const Axis stream0 = executor.axis(0, StreamKind::kCompute, 0);
  std::vector<int> data(16, 0);
  const Var var = engine.NewVariable();
  if (world.rank() == 0) {
    for (int k = 0; k < 50; ++k) engine.Push([](const RunContext&) {}, {}, {var}, on_stream(0));  // epoch 50
    world.Send({var, data.data(), data.size() * sizeof(int)}, 1, /*tag=*/5);
    engine.WaitForAll();
    CHECK(executor.tracker().completed(stream0) == 50);
    return;
  }
  // Rank 1 has issued one op on its stream 0; the message brings (its stream 0's bits, 50) from rank 0's.
  engine.Push([](const RunContext&) {}, {}, {var}, on_stream(0));
  world.Recv({var, data.data(), data.size() * sizeof(int)}, 0, /*tag=*/5);
  std::vector<FrontierEntry> waits;
  bool shown = false;
  engine.Push(
      [&](const RunContext& ctx) {
        shown = ctx.waits != nullptr;
        if (shown) waits.assign(ctx.waits->begin(), ctx.waits->end());
      },
      {var}, {});
  engine.WaitForAll();
  CHECK(executor.tracker().completed(stream0) == 1);  // its own one op, not rank 0's fifty
  CHECK(shown);
  CHECK(waits.empty());  // the aliasing entry was dropped, not passed on
}

}  // namespace
}  // namespace depengine
