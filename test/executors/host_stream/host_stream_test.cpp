// The host stream backend's own behaviour (executors/host_stream/host_stream_backend.h): launches, gates that hold a
// stream at a point (so that "not yet" is checked deterministically, not by timing), failure injection and sticky
// errors, misuse detection, and teardown. The StreamBackend contract itself is in the conformance suite.
#include <array>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <depengine/executors/host_stream/host_stream_backend.h>

#include "test/executors/stream/stream_test_support.h"

namespace depengine::test {
namespace {

using namespace std::chrono_literals;

// Whether `fn` throws a StreamError whose what() contains `text`.
template <class Fn>
bool throws_stream_error(Fn&& fn, const std::string& text) {
  try {
    fn();
  } catch (const StreamError& error) {
    return std::string(error.what()).find(text) != std::string::npos;
  }
  return false;
}

TEST_CASE("host launches run in FIFO order on the stream's own thread", "[host_stream]") {
  Watchdog watchdog("host launch order");
  HostStreamBackend backend;
  StreamSet set(backend);
  const StreamHandle stream = set.stream();
  const int n = static_cast<int>(sized(2000, 300, 300));
  std::vector<int> order;  // written by the stream thread only; read after synchronize()
  std::vector<std::thread::id> threads;
  for (int i = 0; i < n; ++i) {
    backend.launch(stream, [&order, &threads, i] {
      order.push_back(i);
      threads.push_back(std::this_thread::get_id());
    });
  }
  backend.synchronize(stream);
  REQUIRE(order.size() == static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) REQUIRE(order[static_cast<std::size_t>(i)] == i);
  for (const std::thread::id id : threads) REQUIRE(id == threads.front());
  CHECK(threads.front() != std::this_thread::get_id());
}

TEST_CASE("host launches from several threads keep each thread's order", "[host_stream]") {
  Watchdog watchdog("host concurrent enqueue");
  HostStreamBackend backend;
  StreamSet set(backend);
  const StreamHandle stream = set.stream();
  constexpr int kThreads = 3;
  const int per_thread = static_cast<int>(sized(2000, 300, 300));
  std::vector<std::pair<int, int>> order;  // the stream thread's only
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) backend.launch(stream, [&order, t, i] { order.emplace_back(t, i); });
    });
  }
  for (auto& thread : threads) thread.join();
  backend.synchronize(stream);
  std::array<int, kThreads> next{};
  REQUIRE(order.size() == static_cast<std::size_t>(kThreads * per_thread));
  for (const auto& [t, i] : order) REQUIRE(i == next[static_cast<std::size_t>(t)]++);
}

TEST_CASE("without a wait, a fast stream overtakes a held one (the race the conformance suite closes)",
          "[host_stream]") {
  Watchdog watchdog("host race control");
  HostStreamBackend backend;
  StreamSet set(backend);
  const StreamHandle a = set.stream();
  const StreamHandle b = set.stream();
  Slots slots(backend, 2);
  Gate gate;
  const std::uint64_t value = 42;
  backend.launch(a, gate.hold());
  slots.write(a, 0, 0, &value);
  slots.observe(b, 0, 0, 0, 1);  // no wait: runs at once
  backend.synchronize(b);        // b is done while a is still held at the gate
  CHECK_FALSE(gate.timed_out());
  gate.open();
  backend.synchronize(a);
  const std::vector<std::uint64_t> seen = slots.read(a, 0);
  CHECK(seen[0] == value);
  CHECK(seen[1] == 0);  // b observed before a wrote
}

TEST_CASE("an event completes with the work before it, not the work after it", "[host_stream]") {
  Watchdog watchdog("host event capture");
  HostStreamBackend backend;
  StreamSet set(backend);
  const StreamHandle stream = set.stream();
  const EventHandle before = set.event();
  const EventHandle after = set.event();
  Gate gate;
  std::atomic<bool> ran{false};
  backend.launch(stream, [&ran] { ran.store(true, std::memory_order_relaxed); });  // relaxed: read after the event
  backend.record(stream, before);  // partner: try_query(before) while the stream is held
  backend.launch(stream, gate.hold());
  backend.record(stream, after);  // partner: try_query(after), false until the gate opens
  REQUIRE(wait_until([&] { return gate.reached(); }));
  // The stream is held after `before` and before `after`: try_query returns (it never blocks) and tells them apart.
  REQUIRE(backend.try_query(before));
  CHECK(ran.load(std::memory_order_relaxed));  // the acquire in try_query made the launch's write visible
  for (int i = 0; i < 100; ++i) REQUIRE_FALSE(backend.try_query(after));
  gate.open();
  REQUIRE(wait_until([&] { return backend.try_query(after); }));
  CHECK_FALSE(gate.timed_out());
}

TEST_CASE("a cross-stream wait blocks the waiting stream, never the caller", "[host_stream]") {
  Watchdog watchdog("host wait does not block the caller");
  HostStreamBackend backend(HostStreamOptions{.devices = 2});
  StreamSet set(backend);
  const StreamHandle a = set.stream(0);
  const StreamHandle b = set.stream(1);  // waits may cross devices
  const EventHandle event = set.event(0);
  Gate gate;
  std::atomic<int> b_ran{0};
  backend.launch(a, gate.hold());
  backend.record(a, event);  // partner: the wait on b below
  backend.wait(b, event);    // partner: the record on a above; returns at once although a is held
  backend.launch(b, [&b_ran] { b_ran.store(1, std::memory_order_release); });  // release: pairs with loads below
  REQUIRE(wait_until([&] { return gate.reached(); }));
  const EventHandle b_done = set.event(1);
  backend.record(b, b_done);  // partner: try_query(b_done), false while b waits
  CHECK_FALSE(backend.try_query(b_done));
  CHECK(b_ran.load(std::memory_order_acquire) == 0);
  gate.open();
  backend.synchronize(b);
  CHECK(b_ran.load(std::memory_order_acquire) == 1);
}

TEST_CASE("a re-recorded event: waits keep the record they saw, queries see the latest", "[host_stream]") {
  Watchdog watchdog("host re-record");
  HostStreamBackend backend;
  StreamSet set(backend);
  const StreamHandle a = set.stream();
  const StreamHandle b = set.stream();
  const StreamHandle c = set.stream();
  const EventHandle event = set.event();
  Gate first;
  Gate second;
  backend.launch(a, first.hold());
  backend.record(a, event);  // generation 1; partner: the wait on b below
  backend.wait(b, event);    // partner: generation 1 only, the record above
  backend.launch(a, second.hold());
  backend.record(a, event);  // generation 2 (same stream: allowed while 1 is pending); partner: try_query below
  std::atomic<bool> b_ran{false};
  backend.launch(b, [&b_ran] { b_ran.store(true, std::memory_order_release); });  // release: pairs with acquire below
  first.open();
  // b proceeds after generation 1 although a is now held at the second gate.
  REQUIRE(wait_until([&] { return b_ran.load(std::memory_order_acquire); }));
  REQUIRE(wait_until([&] { return second.reached(); }));
  CHECK_FALSE(backend.try_query(event));  // the latest record (generation 2) is pending
  // Moving a pending event to another stream would let its completions arrive out of order: refused.
  CHECK_THROWS_AS(backend.record(c, event), std::logic_error);
  second.open();
  backend.synchronize(event);
  backend.record(c, event);  // complete now: may move; partner: try_query after synchronize(c)
  backend.synchronize(c);
  CHECK(backend.try_query(event));
}

TEST_CASE("an event destroyed while its record and waits are pending still orders them", "[host_stream]") {
  Watchdog watchdog("host destroy pending event");
  HostStreamBackend backend;
  StreamSet set(backend);
  const StreamHandle a = set.stream();
  const StreamHandle b = set.stream();
  Slots slots(backend, 2);
  Gate gate;
  const std::uint64_t value = 9;
  const EventHandle event = backend.create_event(0);
  backend.launch(a, gate.hold());
  slots.write(a, 0, 0, &value);
  backend.record(a, event);  // partner: the wait on b below
  backend.wait(b, event);    // partner: the record on a above
  slots.observe(b, 0, 0, 0, 1);
  backend.destroy_event(event);  // the pending record and wait keep the object alive (ASAN checks)
  gate.open();
  backend.synchronize(b);
  CHECK(slots.read(b, 0)[1] == value);
}

TEST_CASE("a launch delay holds each launch for at least that long", "[host_stream]") {
  Watchdog watchdog("host delay");
  HostStreamBackend backend(HostStreamOptions{.devices = 1, .launch_delay = 3ms});
  StreamSet set(backend);
  const StreamHandle stream = set.stream();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 3; ++i) backend.launch(stream, [] {});
  backend.synchronize(stream);
  CHECK(std::chrono::steady_clock::now() - start >= 9ms);
  backend.set_launch_delay(stream, 0ns);
  CHECK_THROWS_AS(backend.set_launch_delay(stream, -1ns), std::invalid_argument);
}

TEST_CASE("a throwing launch fails its stream: sticky error at query, synchronize and notifications",
          "[host_stream][errors]") {
  Watchdog watchdog("host failure injection");
  HostStreamBackend backend;
  StreamSet set(backend);
  const StreamHandle a = set.stream();
  const StreamHandle b = set.stream();
  const EventHandle before = set.event();
  const EventHandle after = set.event();
  NotificationLog log;
  std::atomic<bool> later_ran{false};

  backend.notify(a, &NotificationLog::on_notify, log.tag(0, 0));
  backend.record(a, before);  // partner: try_query(before), complete before the failure
  backend.launch(a, [] { throw OpFailure(7); });
  backend.launch(a, [&later_ran] { later_ran.store(true, std::memory_order_relaxed); });  // skipped: a has failed
  backend.record(a, after);  // partner: the wait on b, try_query and synchronize(after) below
  backend.notify(a, &NotificationLog::on_notify, log.tag(0, 1));
  backend.notify(a, &NotificationLog::on_notify, log.tag(0, 2));
  // b depends on the failed work: it adopts the error (its own work would read garbage).
  backend.wait(b, after);  // partner: the record of `after` on a
  backend.notify(b, &NotificationLog::on_notify, log.tag(1, 0));

  REQUIRE(wait_until([&] { return log.count() == 4; }));
  const auto entries = log.entries();
  int failed = 0;
  for (const auto& entry : entries) {
    CAPTURE(entry.stream, entry.index, entry.message);
    if (entry.stream == 0 && entry.index == 0) {
      CHECK_FALSE(entry.failed);  // before the failure
    } else {
      CHECK(entry.failed);
      CHECK(entry.message.find("op failure 7") != std::string::npos);
      ++failed;
    }
  }
  CHECK(failed == 3);

  CHECK(backend.try_query(before));  // completed before the failure
  CHECK(throws_stream_error([&] { (void)backend.try_query(after); }, "host launch: host function threw: op failure 7"));
  CHECK(throws_stream_error([&] { backend.synchronize(after); }, "op failure 7"));
  CHECK(throws_stream_error([&] { backend.synchronize(a); }, "op failure 7"));
  CHECK(throws_stream_error([&] { backend.synchronize(b); }, "op failure 7"));
  CHECK_FALSE(later_ran.load(std::memory_order_relaxed));
  try {
    backend.synchronize(a);
  } catch (const StreamError& error) {
    CHECK(error.code() == StreamError::kHostFunctionThrew);
    CHECK(std::string(error.call()) == "launch");
    CHECK(thrown_id([&] { std::rethrow_exception(error.cause()); }) == 7);  // the op's own exception
  }
}

TEST_CASE("a recording keeps launches and copies, refuses waits, and is launched again and again",
          "[host_stream][recording]") {
  Watchdog watchdog("host recording");
  SECTION("without records_work, recording is refused") {
    HostStreamBackend backend;
    StreamSet set(backend);
    CHECK_FALSE(backend.records_work());
    CHECK_THROWS_AS(backend.begin_recording(set.stream()), std::logic_error);
  }
  SECTION("with records_work") {
    HostStreamBackend backend(HostStreamOptions{.records_work = true});
    REQUIRE(backend.records_work());
    StreamSet set(backend);
    const StreamHandle first = set.stream();
    const StreamHandle second = set.stream();
    const EventHandle event = set.event();
    int runs = 0;  // touched by launches only, which run one at a time (below)
    std::uint64_t source = 0;
    std::uint64_t copied = 0;
    backend.record(first, event);
    backend.synchronize(event);
    backend.begin_recording(first);
    backend.launch(first, [&runs, &source] { source = static_cast<std::uint64_t>(++runs) * 10; });
    backend.copy(first, &copied, &source, sizeof source, CopyDirection::kDeviceToDevice);
    // A wait, even on an event that has completed, and a record would tie the recording to work outside it.
    CHECK_THROWS_AS(backend.wait(first, event), std::logic_error);
    CHECK_THROWS_AS(backend.record(first, event), std::logic_error);
    std::optional<RecordedWork> work(backend.end_recording(first));
    backend.synchronize(first);
    CHECK(runs == 0);  // recorded, not run
    for (int k = 0; k < 3; ++k) backend.launch(*work, k % 2 == 0 ? first : second);
    work.reset();  // released while its launches are queued: they hold it
    backend.synchronize(first);
    backend.synchronize(second);
    CHECK(runs == 3);
    CHECK(copied == 30);  // the copy made again after each run: the last one's value
    CHECK_THROWS_AS(backend.end_recording(first), std::logic_error);  // not recording any more
  }
}

TEST_CASE("calling the backend from a stream thread is refused", "[host_stream][errors]") {
  Watchdog watchdog("host misuse from stream thread");
  HostStreamBackend backend;
  StreamSet set(backend);
  const StreamHandle stream = set.stream();
  const EventHandle event = set.event();
  backend.record(stream, event);  // partner: the try_query the launched function attempts
  // From a launched function (as from a notification): the logic_error becomes the stream's error.
  backend.launch(stream, [&backend, event] { (void)backend.try_query(event); });
  CHECK(throws_stream_error([&] { backend.synchronize(stream); }, "must not be called there"));
}

TEST_CASE("HostTask stores small callables inline and large ones on the heap", "[host_stream]") {
  Watchdog watchdog("host task storage");
  struct Big {
    std::array<std::uint64_t, 32> data{};
  };
  auto small = [x = 1] { (void)x; };
  Big big;
  big.data[31] = 5;
  std::uint64_t seen = 0;
  auto large = [big, &seen] { seen = big.data[31]; };
  STATIC_REQUIRE(HostTask::stored_inline<decltype(small)>());
  STATIC_REQUIRE_FALSE(HostTask::stored_inline<decltype(large)>());
  HostStreamBackend backend;
  StreamSet set(backend);
  const StreamHandle stream = set.stream();
  backend.launch(stream, small);
  backend.launch(stream, large);
  backend.synchronize(stream);
  CHECK(seen == 5);
}

TEST_CASE("the host backend drains streams left at its destruction", "[host_stream]") {
  Watchdog watchdog("host teardown");
  std::atomic<int> ran{0};
  {
    HostStreamBackend backend(HostStreamOptions{.devices = 1, .launch_delay = 1ms});
    const StreamHandle stream = backend.create_stream(0, StreamKind::kCompute);
    for (int i = 0; i < 5; ++i) backend.launch(stream, [&ran] { ran.fetch_add(1, std::memory_order_relaxed); });
  }  // relaxed above: the destructor joins the stream thread, which orders its writes before the check
  CHECK(ran.load(std::memory_order_relaxed) == 5);
}

TEST_CASE("a host backend with no device reports it and refuses streams", "[host_stream]") {
  HostStreamBackend backend(HostStreamOptions{.devices = 0});
  CHECK(backend.device_count() == 0);
  CHECK(std::string(backend.status()).find("no host device") == 0);
  try {
    (void)backend.create_stream(0, StreamKind::kCompute);
    FAIL("create_stream succeeded without a device");
  } catch (const StreamError& error) {
    CHECK(error.code() == StreamError::kNoDevice);
    CHECK(std::string(error.what()).find("no host device") != std::string::npos);
  }
  CHECK_THROWS_AS(HostStreamBackend(HostStreamOptions{.devices = -1}), std::invalid_argument);
}

}  // namespace
}  // namespace depengine::test
