// The frontier scenarios of the design note "Causal Dependency Tracking with Vector Clock Frontiers" (IREE's),
// each with the number of device waits it needs, stated and checked. Queues
// are simulated with frontiers alone (frontier/frontier.h). The timeline scenarios of that note (scheduling vs
// causality, the taint watermark) are tested with the timeline (timeline_test.cpp).
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

#include <depengine/frontier/axis.h>
#include <depengine/frontier/frontier.h>

namespace depengine {
namespace {

// ---- the seed's scenarios ----------------------------------------------------------------------------------------
// Queues simulated with frontiers alone. A queue's waits are counted as the seed counts them: an op's wait frontier
// names the points it depends on, and the queue issues one device wait per entry its knowledge does not dominate,
// size(undominated(queue knowledge, wait frontier)); dominated entries are elided.

constexpr std::size_t kCap = 16;

// What a signal carries to its waiters: the point it marks and the signaller's causal past at that point.
struct Signal {
  FrontierEntry point;
  KnowledgeFrontier<kCap> past;
};

class SimQueue {
 public:
  explicit SimQueue(Axis axis) : axis_(axis) {}

  // Runs one op after the ops that signalled `deps`: issues the waits its knowledge does not cover, imports each
  // dependency's past (the seed's "Wait": merge the semaphore's frontier), then advances its own axis.
  Signal run(std::span<const Signal> deps = {}) {
    RequirementFrontier<kCap> wait;
    for (const Signal& dep : deps) wait.insert_or_raise(dep.point.axis, dep.point.epoch);
    last_wait_ = wait;
    last_issued_ = undominated(known_, wait);
    waits_ += last_issued_.size();
    for (const Signal& dep : deps) known_.merge(dep.past);
    known_.insert_or_raise(axis_, ++epoch_);
    return {{axis_, epoch_}, known_};
  }
  Signal run(std::initializer_list<Signal> deps) { return run(std::span<const Signal>(deps.begin(), deps.size())); }

  // Takes part in a collective whose channel signalled `collective`: the participants synchronise inside the
  // collective itself, so the queue issues no wait; it learns the channel's point.
  void join(const Signal& collective) {
    known_.merge(collective.past);
    known_.insert_or_raise(axis_, ++epoch_);
  }

  [[nodiscard]] Axis axis() const { return axis_; }
  [[nodiscard]] const KnowledgeFrontier<kCap>& known() const { return known_; }
  [[nodiscard]] std::size_t waits() const { return waits_; }
  [[nodiscard]] const RequirementFrontier<kCap>& last_wait() const { return last_wait_; }
  [[nodiscard]] const RequirementFrontier<kCap>& last_issued() const { return last_issued_; }

 private:
  Axis axis_;
  std::uint64_t epoch_ = 0;
  KnowledgeFrontier<kCap> known_;
  std::size_t waits_ = 0;
  RequirementFrontier<kCap> last_wait_;
  RequirementFrontier<kCap> last_issued_;
};

TEST_CASE("Scenario sequential single queue: every wait is elided (0 waits)", "[frontier][scenario]") {
  const AxisAllocator axes;
  SimQueue queue(axes.allocate(AxisDomain::kQueue));
  Signal previous = queue.run();
  for (int op = 0; op < 100; ++op) {
    previous = queue.run({previous});
    REQUIRE(queue.last_wait().size() == 1);  // each op does depend on the one before it...
  }
  REQUIRE(queue.waits() == 0);  // ...and the queue's own epoch already implies it
  REQUIRE(queue.known().size() == 1);
}

TEST_CASE("Scenario cross-queue on one device: the first dependency costs 1 wait, repeats of it none",
          "[frontier][scenario]") {
  const AxisAllocator axes;
  SimQueue producer(axes.allocate(AxisDomain::kQueue));
  SimQueue consumer(axes.allocate(AxisDomain::kQueue));
  const Signal produced = producer.run();
  const Signal first = consumer.run({produced});
  REQUIRE(consumer.waits() == 1);
  REQUIRE(consumer.last_issued() == RequirementFrontier<kCap>{produced.point});
  consumer.run({produced, first});  // the same input again, and the consumer's own previous op
  REQUIRE(consumer.waits() == 1);
}

TEST_CASE(
    "Scenario fork-join: the join waits only for the branches it does not know, and downstream needs 1 wait, "
    "not N",
    "[frontier][scenario]") {
  constexpr std::size_t kBranches = 8;
  const AxisAllocator axes;
  std::vector<SimQueue> queues;  // queues[0] forks, runs branch 0 itself, and joins
  for (std::size_t i = 0; i < kBranches; ++i) queues.emplace_back(axes.allocate(AxisDomain::kQueue));
  SimQueue downstream(axes.allocate(AxisDomain::kQueue));

  const Signal root = queues[0].run();
  std::vector<Signal> branches;
  for (SimQueue& queue : queues) branches.push_back(queue.run({root}));
  std::size_t fork_waits = 0;
  for (const SimQueue& queue : queues) fork_waits += queue.waits();
  REQUIRE(fork_waits == kBranches - 1);  // every branch but the one on the forking queue waits for the root

  const std::size_t before_join = queues[0].waits();
  const Signal join = queues[0].run(branches);
  REQUIRE(queues[0].last_wait().size() == kBranches);
  REQUIRE(queues[0].waits() - before_join == kBranches - 1);  // branch 0 ran on the joining queue: FIFO implies it
  REQUIRE(queues[0].last_issued().epoch(queues[0].axis()) == 0);

  // Downstream depends on the join alone and learns every branch through it.
  downstream.run({join});
  REQUIRE(downstream.waits() == 1);
  for (const Signal& branch : branches) {
    downstream.run({branch});  // reading a branch's output directly: already known
  }
  REQUIRE(downstream.waits() == 1);
}

TEST_CASE("Scenario transitivity across three queues: Q_C learns Q_A through Q_B and needs no wait on Q_A",
          "[frontier][scenario]") {
  const AxisAllocator axes;
  SimQueue qa(axes.allocate(AxisDomain::kQueue)), qb(axes.allocate(AxisDomain::kQueue)),
      qc(axes.allocate(AxisDomain::kQueue));
  Signal s1 = qa.run();
  for (int op = 0; op < 4; ++op) s1 = qa.run({s1});
  REQUIRE(s1.past == KnowledgeFrontier<kCap>{{qa.axis(), 5}});  // S_1 frontier: {A: 5}

  qb.run();
  qb.run();
  const Signal s2 = qb.run({s1});
  REQUIRE(qb.waits() == 1);
  REQUIRE(s2.past == KnowledgeFrontier<kCap>{{qa.axis(), 5}, {qb.axis(), 3}});  // S_2 frontier: {A: 5, B: 3}

  qc.run({s2});
  REQUIRE(qc.waits() == 1);  // the wait on B
  REQUIRE(qc.known().epoch(qa.axis()) == 5);
  qc.run({s1});  // an op on Q_C that uses Q_A's output directly
  REQUIRE(qc.last_issued().empty());
  REQUIRE(qc.waits() == 1);
}

TEST_CASE(
    "Scenario collective-channel compression: an 8-device all-reduce is one frontier entry, so its consumer "
    "waits once",
    "[frontier][scenario]") {
  constexpr std::size_t kDevices = 8;
  const AxisAllocator axes;
  const Axis channel = axes.allocate(AxisDomain::kCollective);
  std::vector<SimQueue> devices;
  for (std::size_t i = 0; i < kDevices; ++i) devices.emplace_back(axes.allocate(AxisDomain::kQueue));
  SimQueue consumer(axes.allocate(AxisDomain::kQueue));

  for (std::uint64_t sequence = 1; sequence <= 3; ++sequence) {
    std::vector<Signal> local;  // each device's own work before the collective
    for (SimQueue& device : devices) local.push_back(device.run());
    const Signal all_reduce{{channel, sequence}, KnowledgeFrontier<kCap>{{channel, sequence}}};
    for (SimQueue& device : devices) device.join(all_reduce);

    const std::size_t before = consumer.waits();
    consumer.run({all_reduce});
    REQUIRE(consumer.last_wait().size() == 1);  // one entry for eight devices
    REQUIRE(consumer.waits() - before == 1);
    // The consumer's knowledge stays its own axis plus the channel, whatever the device count and however many
    // collectives ran.
    REQUIRE(consumer.known().size() == 2);

    // Without the channel, the same dependency names every device's queue.
    RequirementFrontier<kCap> per_device;
    for (const Signal& signal : local) per_device.insert_or_raise(signal.point.axis, signal.point.epoch);
    REQUIRE(undominated(consumer.known(), per_device).size() == kDevices);
  }

  // A participant that consumes the result already knows the channel's point: no wait.
  devices[3].run({Signal{{channel, 3}, KnowledgeFrontier<kCap>{{channel, 3}}}});
  REQUIRE(devices[3].waits() == 0);
}

TEST_CASE("Scenario cross-machine wait: of local and remote dependencies, only the remote axis is undominated",
          "[frontier][scenario]") {
  const AxisAllocator here(0), there(1);
  SimQueue q1(here.allocate(AxisDomain::kQueue)), q2(here.allocate(AxisDomain::kQueue));
  SimQueue remote(there.allocate(AxisDomain::kQueue));

  const Signal local = q2.run();
  Signal mine = q1.run({local});  // the cross-queue wait, once
  REQUIRE(q1.waits() == 1);
  const Signal far = remote.run();

  mine = q1.run({mine, local, far});
  REQUIRE(q1.last_wait().size() == 3);
  REQUIRE(q1.last_issued().size() == 1);
  REQUIRE(q1.last_issued()[0].axis == remote.axis());
  REQUIRE(q1.last_issued()[0].axis.machine() == 1);
  REQUIRE(q1.waits() == 2);
}

}  // namespace
}  // namespace depengine
