// Communication as engine ops (distributed/communicator.h), on every rank of mpirun (test/mpi_main.cpp): results equal
// to a serial reference, the same collective order on every rank whatever order inputs become ready in, errors on one
// rank reaching every rank, local compute never held back by pending communication, shutdown with communication in
// flight, and misuse.
#include <mpi.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <depengine/buffers/buffer.h>
#include <depengine/distributed/communicator.h>
#include <depengine/distributed/remote_error.h>
#include <depengine/engine/engine.h>
#include <depengine/executors/mpi/mpi_executor.h>

#include "test/executors/mpi/mpi_test_support.h"
#include "test/test_support.h"

namespace depengine {
namespace {

using test::kComm;
using test::kCompute;

EngineOptions options() { return test::mpi_engine_options(); }

int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int world_size() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

// Element i of rank r's contribution: small integers, so that any summation order gives the exact sum.
template <class T>
T contribution(int rank, std::size_t i) {
  return static_cast<T>((rank + 1) * static_cast<int>(i % 13));
}

template <class T>
T serial_sum(int ranks, std::size_t i) {
  T sum{};
  for (int r = 0; r < ranks; ++r) sum += contribution<T>(r, i);
  return sum;
}

template <class T>
void check_all_reduce(Engine& engine, Communicator& world, std::size_t count) {
  std::vector<T> data(count);
  const Var var = engine.NewVariable();
  engine.Push(
      [&] {
        for (std::size_t i = 0; i < count; ++i) data[i] = contribution<T>(world.rank(), i);
      },
      {}, {var});
  world.AllReduceSum<T>({var, data.data(), count * sizeof(T)});
  engine.WaitForVar(var);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < count; ++i) wrong += data[i] == serial_sum<T>(world.size(), i) ? 0 : 1;
  CAPTURE(count);
  CHECK(wrong == 0);
}

TEST_CASE("all-reduce sums every rank's data, equal to a serial sum", "[distributed]") {
  Engine engine(options());
  Communicator world(engine, kComm);
  REQUIRE(world.size() == world_size());
  REQUIRE(world.rank() == world_rank());
  for (std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{1} << 17}) {
    check_all_reduce<double>(engine, world, count);
    check_all_reduce<float>(engine, world, count);
    check_all_reduce<std::int64_t>(engine, world, count);
    check_all_reduce<std::uint32_t>(engine, world, count);
  }
}

TEST_CASE("collectives start in push order on every rank, whatever order their inputs are ready in", "[distributed]") {
  for (std::uint64_t seed : test::test_seeds()) {
    MPI_Bcast(&seed, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);  // one workload on every rank, delays of its own
    CAPTURE(seed);
    std::mt19937_64 delays(seed ^ (0x9e3779b97f4a7c15ULL * static_cast<std::uint64_t>(world_rank() + 1)));
    const std::size_t ops = test::sized(48, 16, 24);
    Engine engine(options());
    Communicator world(engine, kComm);
    std::vector<std::vector<std::int64_t>> data(ops);
    std::vector<Var> vars(ops);
    for (std::size_t k = 0; k < ops; ++k) {
      vars[k] = engine.NewVariable();
      data[k].resize(k + 1);  // a different count each: a collective paired with another would not add up
      const auto delay = std::chrono::microseconds(delays() % 400);
      engine.Push(
          [&, k, delay] {
            std::this_thread::sleep_for(delay);  // the input's compute: random length on each rank
            for (std::size_t i = 0; i <= k; ++i) data[k][i] = contribution<std::int64_t>(world.rank(), i + k);
          },
          {}, {vars[k]});
      world.AllReduceSum<std::int64_t>({vars[k], data[k].data(), data[k].size() * sizeof(std::int64_t)});
    }
    engine.WaitForAll();
    std::size_t wrong = 0;
    for (std::size_t k = 0; k < ops; ++k) {
      for (std::size_t i = 0; i <= k; ++i) wrong += data[k][i] == serial_sum<std::int64_t>(world.size(), i + k) ? 0 : 1;
    }
    CHECK(wrong == 0);
  }
}

TEST_CASE("random mixes of compute, all-reduces and broadcasts match a serial run of every rank", "[distributed]") {
  for (std::uint64_t seed : test::test_seeds()) {
    MPI_Bcast(&seed, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);  // one program on every rank, delays of its own
    CAPTURE(seed);
    std::mt19937_64 program(seed);
    std::mt19937_64 delays(seed ^ (0x9e3779b97f4a7c15ULL * static_cast<std::uint64_t>(world_rank() + 1)));
    const int ranks = world_size();
    const int me = world_rank();
    constexpr std::size_t kVars = 6;
    const std::size_t ops = test::sized(120, 40, 60);
    Engine engine(options());
    Communicator world(engine, kComm);
    // Each variable's data on this rank, and the serial model of every rank's.
    std::vector<Var> vars(kVars);
    std::vector<std::vector<std::uint64_t>> data(kVars);
    std::vector<std::vector<std::vector<std::uint64_t>>> model(static_cast<std::size_t>(ranks),
                                                               std::vector<std::vector<std::uint64_t>>(kVars));
    for (std::size_t v = 0; v < kVars; ++v) {
      vars[v] = engine.NewVariable();
      const std::size_t length = 1 + program() % (v % 2 == 0 ? 8 : 4000);  // packed and unpacked all-reduces
      data[v].assign(length, 1);
      for (auto& r : model) r[v].assign(length, 1);
    }
    for (std::size_t k = 0; k < ops; ++k) {
      const std::size_t v = program() % kVars;
      const std::uint64_t choice = program() % 4;
      if (choice <= 1) {  // compute on every rank, different on each (unsigned: wraps, as the model does)
        const std::uint64_t salt = k;
        const auto delay = std::chrono::microseconds(delays() % 200);
        engine.Push(
            [&data, v, salt, me, delay] {
              std::this_thread::sleep_for(delay);  // the compute's length, different on every rank
              for (auto& x : data[v]) x = x * 3 + static_cast<std::uint64_t>(me) + salt;
            },
            {}, {vars[v]});
        for (int r = 0; r < ranks; ++r) {
          for (auto& x : model[static_cast<std::size_t>(r)][v]) x = x * 3 + static_cast<std::uint64_t>(r) + salt;
        }
      } else if (choice == 2) {
        world.AllReduceSum<std::uint64_t>({vars[v], data[v].data(), data[v].size() * sizeof(std::uint64_t)});
        for (std::size_t i = 0; i < data[v].size(); ++i) {
          std::uint64_t sum = 0;
          for (const auto& r : model) sum += r[v][i];
          for (auto& r : model) r[v][i] = sum;
        }
      } else {
        const int root = static_cast<int>(program() % static_cast<std::uint64_t>(ranks));
        world.Broadcast({vars[v], data[v].data(), data[v].size() * sizeof(std::uint64_t)}, root);
        for (auto& r : model) r[v] = model[static_cast<std::size_t>(root)][v];
      }
    }
    engine.WaitForAll();
    std::size_t wrong = 0;
    for (std::size_t v = 0; v < kVars; ++v) wrong += data[v] == model[static_cast<std::size_t>(me)][v] ? 0 : 1;
    CHECK(wrong == 0);
  }
}

// What WaitForVar(var) rethrows on this rank: a rank whose own op failed keeps its own error (a variable keeps its
// first error); every other rank gets a RemoteError naming `failing`.
void check_poisoned(Engine& engine, Var var, int rank, int failing, const std::string& message) {
  CAPTURE(rank, failing);
  try {
    engine.WaitForVar(var);
    FAIL("WaitForVar did not rethrow");
  } catch (const RemoteError& e) {
    CHECK(e.rank() == failing);
    CHECK(e.message() == message);
    CHECK(std::string(e.what()) == "rank " + std::to_string(failing) + ": " + message);
  } catch (const std::runtime_error& e) {
    CHECK(rank == failing);
    CHECK(e.what() == message);
  }
}

TEST_CASE("an input error on one rank poisons the collective's output on every rank, naming that rank",
          "[distributed]") {
  Engine engine(options());
  Communicator world(engine, kComm);
  const int last = world.size() - 1;
  // A small all-reduce counts the failing ranks in its own buffer; a large one beside it.
  const std::size_t count = GENERATE(std::size_t{64}, std::size_t{1} << 12);
  CAPTURE(count);
  std::vector<double> grad(count, 1.0);
  const Var var = engine.NewVariable();
  const std::span<double> all(grad);

  SECTION("one failing rank") {
    if (world.rank() == last) engine.Push([] { throw std::runtime_error("loss is NaN"); }, {}, {var});
    world.AllReduceSum<double>({var, all.data(), all.size_bytes()});
    check_poisoned(engine, var, world.rank(), last, "loss is NaN");

    // The communicator goes on: the next collective on the same variable is clean everywhere.
    std::fill(grad.begin(), grad.end(), 1.0);
    world.AllReduceSum<double>({var, all.data(), all.size_bytes()});
    engine.WaitForVar(var);
    CHECK(grad[0] == static_cast<double>(world.size()));
  }
  SECTION("several failing ranks: every other rank names the lowest") {
    if (world.rank() == 0 || world.rank() == last) {
      engine.Push([rank = world.rank()] { throw std::runtime_error("bad batch on " + std::to_string(rank)); }, {},
                  {var});
    }
    world.AllReduceSum<double>({var, all.data(), all.size_bytes()});
    if (world.rank() == last && last != 0) {
      CHECK_THROWS_WITH(engine.WaitForVar(var), "bad batch on " + std::to_string(last));
    } else {
      check_poisoned(engine, var, world.rank(), 0, "bad batch on 0");
    }
  }
  SECTION("a remote error flowing on keeps naming the rank it came from") {
    if (world.rank() == 0) engine.Push([] { throw std::runtime_error("loss is NaN"); }, {}, {var});
    world.AllReduceSum<double>({var, all.data(), all.size_bytes()});  // rank 1's var: RemoteError from rank 0
    const Var received = engine.NewVariable();
    std::vector<double> in(grad.size());
    if (world.rank() == 1) world.Send({var, all.data(), all.size_bytes()}, 0, /*tag=*/3);
    // A broadcast from rank 1 carries it on too, to every rank.
    const Var copied = engine.NewVariable();
    std::vector<double> copy(grad.size());
    world.Broadcast({world.rank() == 1 ? var : copied, world.rank() == 1 ? all.data() : copy.data(), all.size_bytes()},
                    1);
    if (world.rank() == 0) {
      world.Recv({received, in.data(), in.size() * sizeof(double)}, 1, /*tag=*/3);
      check_poisoned(engine, received, /*rank=*/1, /*failing=*/0, "loss is NaN");  // not "rank 1: rank 0: ..."
    }
    check_poisoned(engine, var, world.rank(), 0, "loss is NaN");
    if (world.rank() != 1) check_poisoned(engine, copied, /*rank=*/1, /*failing=*/0, "loss is NaN");
  }
}

TEST_CASE("a collective whose push failed on one rank still takes part there, flagged as failed", "[distributed]") {
  Engine engine(options());
  Communicator world(engine, kComm);
  std::vector<double> grad(8, 1.0);
  const Var var = engine.NewVariable();
  const int refusing = world.size() - 1;
  if (world.rank() == refusing) {
    CHECK_THROWS_AS(world.AllReduceSum<double>({Var{}, grad.data(), grad.size() * sizeof(double)}), Error);
  } else {
    world.AllReduceSum<double>({var, grad.data(), grad.size() * sizeof(double)});
    check_poisoned(engine, var, world.rank(), refusing,
                   "its communication op did not run (cancelled, or its push failed)");
  }
  // The next collective pairs with the next on every rank.
  std::fill(grad.begin(), grad.end(), 1.0);
  world.AllReduceSum<double>({var, grad.data(), grad.size() * sizeof(double)});
  engine.WaitForVar(var);
  CHECK(grad[0] == static_cast<double>(world.size()));
}

TEST_CASE("a message longer than its receiver's region fails the receive with MPI's error", "[distributed]") {
  Engine engine(options());
  Communicator world(engine, kComm);
  std::vector<double> out(4, 1.0);
  std::vector<double> in(2, 0.0);
  const Var sent = engine.NewVariable();
  const Var received = engine.NewVariable();
  if (world.rank() == 0) world.Send({sent, out.data(), out.size() * sizeof(double)}, 1, /*tag=*/5);
  if (world.rank() == 1) {
    world.Recv({received, in.data(), in.size() * sizeof(double)}, 0, /*tag=*/5);
    CHECK_THROWS_WITH(engine.WaitForVar(received), Catch::StartsWith("MPI_Irecv failed: ") &&
                                                       Catch::Contains("truncated", Catch::CaseSensitive::No));
  }
  engine.WaitForAll();
}

TEST_CASE("broadcast copies the root's data to every rank", "[distributed]") {
  Engine engine(options());
  Communicator world(engine, kComm);
  for (int root = 0; root < world.size(); ++root) {
    std::vector<std::int32_t> data(1000, -1);
    const Var var = engine.NewVariable();
    if (world.rank() == root) {
      engine.Push([&] { std::iota(data.begin(), data.end(), root * 1000); }, {}, {var});
    }
    world.Broadcast({var, data.data(), data.size() * sizeof(std::int32_t)}, root);
    engine.WaitForVar(var);
    CAPTURE(root);
    CHECK(data.front() == root * 1000);
    CHECK(data.back() == root * 1000 + 999);
  }
}

TEST_CASE("messages around a ring arrive, and a sender's input error reaches the receiver", "[distributed]") {
  Engine engine(options());
  Communicator world(engine, kComm);
  const int next = (world.rank() + 1) % world.size();
  const int previous = (world.rank() + world.size() - 1) % world.size();
  std::vector<double> out(4096, world.rank());
  std::vector<double> in(4096, -1.0);
  const Var sent = engine.NewVariable();
  const Var received = engine.NewVariable();
  world.Send({sent, out.data(), out.size() * sizeof(double)}, next, /*tag=*/7);
  world.Recv({received, in.data(), in.size() * sizeof(double)}, previous, /*tag=*/7);
  engine.WaitForVar(received);
  CHECK(in.front() == previous);
  CHECK(in.back() == previous);

  // Rank 0's data fails before it is sent: rank 1 receives the error, rank 0 keeps its own.
  if (world.rank() == 0) engine.Push([] { throw std::runtime_error("no data"); }, {}, {sent});
  world.Send({sent, out.data(), out.size() * sizeof(double)}, next, /*tag=*/8);
  world.Recv({received, in.data(), in.size() * sizeof(double)}, previous, /*tag=*/8);
  if (world.rank() == 1 % world.size()) {
    try {
      engine.WaitForVar(received);
      FAIL("WaitForVar did not rethrow");
    } catch (const RemoteError& e) {
      CHECK(e.rank() == 0);
      CHECK(e.message() == "no data");
    }
  } else {
    engine.WaitForVar(received);
  }
  if (world.rank() == 0) CHECK_THROWS_WITH(engine.WaitForVar(sent), "no data");
  engine.WaitForAll();
}

TEST_CASE("a collective waiting for other ranks holds back no local compute", "[distributed]") {
  Engine engine(options());
  Communicator world(engine, kComm);
  std::vector<double> grad(16, 1.0);
  std::int32_t token = 0;
  const Var grad_var = engine.NewVariable();
  const Var other = engine.NewVariable();
  if (world.rank() == 0) {
    // Rank 1 joins the all-reduce only after our token, sent once our compute is done.
    world.AllReduceSum<double>({grad_var, grad.data(), grad.size() * sizeof(double)});
    int computed = 0;
    engine.Push([&] { computed = 1; }, {}, {other});
    engine.WaitForVar(other);  // would hang if the pending all-reduce held the compute back
    CHECK(computed == 1);
    CHECK(engine.Version(grad_var) == 0);  // rank 1 cannot have joined yet
    world.Send({other, &token, sizeof(token)}, 1, /*tag=*/1);
  } else if (world.rank() == 1) {
    world.Recv({grad_var, &token, sizeof(token)}, 0, /*tag=*/1);  // the all-reduce below waits for it
    world.AllReduceSum<double>({grad_var, grad.data(), grad.size() * sizeof(double)});
  } else {
    world.AllReduceSum<double>({grad_var, grad.data(), grad.size() * sizeof(double)});
  }
  engine.WaitForVar(grad_var);
  CHECK(grad[0] == static_cast<double>(world.size()));
}

TEST_CASE("Buffers' host blocks are regions", "[distributed]") {
  Engine engine(options());
  Communicator world(engine, kComm);
  Buffers buffers(engine, kCompute);
  constexpr std::size_t kCount = 512;
  Buffer x = buffers.allocate(kCount * sizeof(float), 0);
  engine.Push(
      [x, rank = world.rank()] {
        auto* p = static_cast<float*>(x.data());
        for (std::size_t i = 0; i < kCount; ++i) p[i] = contribution<float>(rank, i);
      },
      {}, {x.var()});
  world.AllReduceSum<float>(x);
  std::size_t wrong = kCount;
  engine.Push(
      [&, x] {
        const auto* p = static_cast<const float*>(x.data());
        wrong = 0;
        for (std::size_t i = 0; i < kCount; ++i) wrong += p[i] == serial_sum<float>(world.size(), i) ? 0 : 1;
      },
      {x.var()}, {});
  buffers.deallocate(x);
  engine.WaitForAll();
  CHECK(wrong == 0);
}

TEST_CASE("destroying the engine waits for the communication in flight", "[distributed]") {
  const std::size_t ops = 32;
  std::vector<std::vector<double>> data(ops, std::vector<double>(256));
  {
    Engine engine(options());
    Communicator world(engine, kComm);
    for (std::size_t k = 0; k < ops; ++k) {
      const Var var = engine.NewVariable();
      engine.Push([&, k, rank = world.rank()] { std::fill(data[k].begin(), data[k].end(), rank + 1.0); }, {}, {var});
      world.AllReduceSum<double>({var, data[k].data(), data[k].size() * sizeof(double)});
    }
  }
  const int n = world_size();
  std::size_t wrong = 0;
  for (const auto& d : data) wrong += d.front() == n * (n + 1) / 2.0 && d.back() == n * (n + 1) / 2.0 ? 0 : 1;
  CHECK(wrong == 0);
}

TEST_CASE("misuse of the communicator is a clear error", "[distributed]") {
  Engine engine(options());
  const Var var = engine.NewVariable();
  double x = 0;
  CHECK_THROWS_WITH(Communicator(engine, kCompute),
                    "Communicator: executor 0 of the engine is 'threadpool', not an MpiExecutor");
  Communicator world(engine, kComm);
  CHECK_THROWS_WITH(world.Broadcast({var, &x, sizeof(x)}, world.size()),
                    "Communicator: Broadcast: root " + std::to_string(world.size()) +
                        " is not a rank of a communicator of " + std::to_string(world.size()));
  CHECK_THROWS_WITH(world.Send({var, &x, sizeof(x)}, -1, 0), Catch::Contains("destination -1 is not a rank"));
  CHECK_THROWS_WITH(
      world.Recv({var, &x, sizeof(x)}, 0, -2),
      "Communicator::Recv: tag -2 is outside [0, " + std::to_string(world.executor().tag_limit()) + "] (MPI_TAG_UB)");
  CHECK_THROWS_WITH(world.AllReduceSum<double>({var, &x, 7}),
                    "Communicator::AllReduceSum: 7 bytes are not a whole number of 8-byte elements");
  CHECK_THROWS_WITH(engine.Capture([&] {
    world.AllReduceSum<double>({var, &x, sizeof(x)});
  }),
                    Catch::Contains("communication cannot be captured"));
  CHECK_THROWS_AS(world.AllReduceSum<double>({Var{}, &x, sizeof(x)}), Error);  // a null variable: nothing pushed

  // A refused collective gave its place in the order back: the next one still runs on every rank.
  x = 1.0;
  world.AllReduceSum<double>({var, &x, sizeof(x)});
  engine.WaitForVar(var);
  CHECK(x == static_cast<double>(world.size()));
}

}  // namespace
}  // namespace depengine
