// Random multi-stream DAGs on every conformance backend, checked against their dependencies.
//
// Each op runs on a random stream (devices x {compute, copy}), depends on up to three earlier ops, observes each
// dependency's value (a device-to-device copy into a slot of its own) and then writes its own unique value. A
// dependency on another stream is ordered by a wait on the event recorded right after that op's write; one on the
// same stream by FIFO alone, with no wait (what the executor will do). Each op's event is destroyed as soon as its
// last wait is enqueued, usually while the record and the waits are still pending. Some ops also post a
// notification. At the end every observation must equal the dependency's value: a wait or a FIFO order that did not
// hold reads 0. On the host backend the streams get random simulated device times, so a missing order is a real race.
//
// Seeds: DEPENGINE_TEST_SEED reruns one; DEPENGINE_TEST_REPEAT sets how many fresh ones (test_support.h).
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <random>
#include <vector>

#include "test/executors/stream/stream_test_support.h"

namespace depengine::test {
namespace {

using namespace std::chrono_literals;

struct Op {
  int stream = 0;
  std::vector<int> deps;  // earlier ops, distinct
  bool notify = false;
};

std::vector<Op> random_dag(std::mt19937_64& rng, int ops, int streams) {
  std::vector<Op> dag(static_cast<std::size_t>(ops));
  for (int j = 0; j < ops; ++j) {
    Op& op = dag[static_cast<std::size_t>(j)];
    op.stream = std::uniform_int_distribution<int>(0, streams - 1)(rng);
    const int window = std::min(j, 24);  // recent ops, so that dependencies are often still running
    const int count = window == 0 ? 0 : std::uniform_int_distribution<int>(0, 3)(rng);
    for (int k = 0; k < count; ++k) {
      const int dep = j - 1 - std::uniform_int_distribution<int>(0, window - 1)(rng);
      if (std::find(op.deps.begin(), op.deps.end(), dep) == op.deps.end()) op.deps.push_back(dep);
    }
    op.notify = std::uniform_int_distribution<int>(0, 7)(rng) == 0;
  }
  return dag;
}

void run_dag(const StreamBackendFactory& factory, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto backend = factory.make();
  const int devices = backend->device_count();
  const int ops = static_cast<int>(sized(300, 120, 120));
  constexpr int kMaxDeps = 3;

  StreamSet set(*backend);
  std::vector<StreamHandle> streams;
  std::vector<int> device_of;
  for (int device = 0; device < devices && device < 2; ++device) {
    for (StreamKind kind : {StreamKind::kCompute, StreamKind::kCopy}) {
      streams.push_back(set.stream(device, kind));
      device_of.push_back(device);
      if (factory.set_delay) {
        static constexpr std::chrono::nanoseconds kDelays[] = {0ns, 0ns, 2us, 30us};
        factory.set_delay(*backend, streams.back(), kDelays[std::uniform_int_distribution<int>(0, 3)(rng)]);
      }
    }
  }
  const int stream_count = static_cast<int>(streams.size());
  const std::vector<Op> dag = random_dag(rng, ops, stream_count);

  // Slots per device: [0, ops) values, [ops + kMaxDeps * j + k) the k-th observation of op j.
  Slots slots(*backend, static_cast<std::size_t>(ops * (1 + kMaxDeps)));
  std::vector<std::uint64_t> values(static_cast<std::size_t>(ops));
  for (int j = 0; j < ops; ++j) values[static_cast<std::size_t>(j)] = mix(seed, static_cast<std::uint64_t>(j)) | 1U;

  // The last op that waits on each op's event, so the event can be destroyed right after that wait is enqueued.
  std::vector<int> last_wait(static_cast<std::size_t>(ops), -1);
  for (int j = 0; j < ops; ++j) {
    for (int dep : dag[static_cast<std::size_t>(j)].deps) {
      if (dag[static_cast<std::size_t>(dep)].stream != dag[static_cast<std::size_t>(j)].stream) {
        last_wait[static_cast<std::size_t>(dep)] = j;
      }
    }
  }

  NotificationLog log;
  std::size_t notifications = 0;
  std::vector<EventHandle> events(static_cast<std::size_t>(ops));
  for (int j = 0; j < ops; ++j) {
    const Op& op = dag[static_cast<std::size_t>(j)];
    const StreamHandle stream = streams[static_cast<std::size_t>(op.stream)];
    const int device = device_of[static_cast<std::size_t>(op.stream)];
    for (int dep : op.deps) {
      if (dag[static_cast<std::size_t>(dep)].stream != op.stream) {
        backend->wait(stream, events[static_cast<std::size_t>(dep)]);  // partner: the record of op `dep` below
      }
    }
    for (std::size_t k = 0; k < op.deps.size(); ++k) {
      const int dep = op.deps[k];
      slots.observe(stream, device_of[static_cast<std::size_t>(dag[static_cast<std::size_t>(dep)].stream)],
                    static_cast<std::size_t>(dep), device, static_cast<std::size_t>(ops + kMaxDeps * j) + k);
    }
    slots.write(stream, device, static_cast<std::size_t>(j), &values[static_cast<std::size_t>(j)]);
    if (last_wait[static_cast<std::size_t>(j)] >= 0) {
      events[static_cast<std::size_t>(j)] = backend->create_event(device);
      backend->record(stream, events[static_cast<std::size_t>(j)]);  // partner: the waits of later ops above
    }
    if (op.notify) {
      backend->notify(stream, &NotificationLog::on_notify, log.tag(op.stream, j));
      ++notifications;
    }
    // Events whose last wait has just been enqueued go now, most with their record or wait still pending.
    for (int dep : op.deps) {
      if (last_wait[static_cast<std::size_t>(dep)] == j) {
        backend->destroy_event(events[static_cast<std::size_t>(dep)]);
        events[static_cast<std::size_t>(dep)] = EventHandle{};
      }
    }
  }

  for (StreamHandle stream : streams) backend->synchronize(stream);
  REQUIRE(backend->host_synchronizations() == static_cast<std::uint64_t>(devices + stream_count));  // Slots: 1/device
  REQUIRE(wait_until([&] { return log.count() == notifications; }));

  std::vector<std::vector<std::uint64_t>> seen;
  for (int device = 0; device < devices; ++device) seen.push_back(slots.read(streams[0], device));
  for (int j = 0; j < ops; ++j) {
    const Op& op = dag[static_cast<std::size_t>(j)];
    const auto& mine = seen[static_cast<std::size_t>(device_of[static_cast<std::size_t>(op.stream)])];
    REQUIRE(mine[static_cast<std::size_t>(j)] == values[static_cast<std::size_t>(j)]);
    for (std::size_t k = 0; k < op.deps.size(); ++k) {
      CAPTURE(j, op.stream, k, op.deps[k], dag[static_cast<std::size_t>(op.deps[k])].stream);
      REQUIRE(mine[static_cast<std::size_t>(ops + kMaxDeps * j) + k] == values[static_cast<std::size_t>(op.deps[k])]);
    }
  }
  std::vector<int> last(static_cast<std::size_t>(stream_count), -1);
  for (const NotificationLog::Entry& entry : log.entries()) {
    CAPTURE(entry.stream, entry.index);
    REQUIRE_FALSE(entry.failed);
    REQUIRE(entry.index > last[static_cast<std::size_t>(entry.stream)]);  // in enqueue order per stream
    last[static_cast<std::size_t>(entry.stream)] = entry.index;
  }
}

TEST_CASE("random multi-stream DAGs respect every dependency", "[stream][conformance][random]") {
  Watchdog watchdog("stream random DAGs");
  for (const auto& factory : stream_backend_factories()) {
    DYNAMIC_SECTION(factory.name) {
      const std::uint64_t dags = sized(12, 4, 4);  // DAGs per seed, each from mix(seed, i)
      for (std::uint64_t seed : test_seeds()) {
        for (std::uint64_t i = 0; i < dags; ++i) {
          CAPTURE(seed, i);
          watchdog.note("seed " + std::to_string(seed) + ", DAG " + std::to_string(i));
          run_dag(factory, mix(seed, i));
        }
      }
    }
  }
}

}  // namespace
}  // namespace depengine::test
