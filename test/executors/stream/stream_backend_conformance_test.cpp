// The StreamBackend contract (executors/stream/stream_backend.h), checked on every backend of
// stream_backend_factories(): host always; CUDA and HIP when built and a device exists (skipped with the reason
// otherwise). Written against the interface only: work is copies (see stream_test_support.h).
#include <array>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "test/executors/stream/stream_test_support.h"

namespace depengine::test {
namespace {

using namespace std::chrono_literals;

// A distinct nonzero value per (round, index), so that a slot read too early (0) or from another round differs.
std::uint64_t value_of(std::uint64_t round, std::uint64_t index) { return mix(round + 1, index + 1) | 1U; }

TEST_CASE("FIFO: work on one stream runs in enqueue order", "[stream][conformance]") {
  Watchdog watchdog("stream FIFO");
  for (const auto& factory : stream_backend_factories()) {
    DYNAMIC_SECTION(factory.name) {
      auto backend = factory.make();
      for (StreamKind kind : {StreamKind::kCompute, StreamKind::kCopy}) {
        CAPTURE(to_string(kind));
        StreamSet set(*backend);
        const StreamHandle stream = set.stream(0, kind);
        if (factory.set_delay) factory.set_delay(*backend, stream, 1us);
        // slot 0 is rewritten before each observation: slot k must see the k-th value, not a later or earlier one.
        const std::size_t n = sized(200, 60, 60);
        Slots slots(*backend, n + 1);
        std::vector<std::uint64_t> values(n + 1);
        for (std::size_t k = 1; k <= n; ++k) {
          values[k] = value_of(static_cast<std::uint64_t>(kind), k);
          slots.write(stream, 0, 0, &values[k]);
          slots.observe(stream, 0, 0, 0, k);
        }
        const std::vector<std::uint64_t> seen = slots.read(stream, 0);
        for (std::size_t k = 1; k <= n; ++k) {
          CAPTURE(k);
          REQUIRE(seen[k] == values[k]);
        }
      }
    }
  }
}

TEST_CASE("an event captures the work enqueued before its record", "[stream][conformance]") {
  Watchdog watchdog("stream event capture");
  for (const auto& factory : stream_backend_factories()) {
    DYNAMIC_SECTION(factory.name) {
      auto backend = factory.make();
      StreamSet set(*backend);
      const StreamHandle a = set.stream();
      const EventHandle event = set.event();
      if (factory.set_delay) factory.set_delay(*backend, a, 2ms);  // the captured work takes a while
      Slots slots(*backend, 1);
      const std::uint64_t value = 0x5eed;
      slots.write(a, 0, 0, &value);
      backend->record(a, event);  // partner: synchronize(event) and try_query below
      // Once the event says complete, the write it captured is visible — read through another stream with no
      // wait: only the host-side synchronisation orders it.
      backend->synchronize(event);
      REQUIRE(backend->try_query(event));
      const StreamHandle reader = set.stream();
      REQUIRE(slots.read(reader, 0)[0] == value);
    }
  }
}

TEST_CASE("a cross-stream wait orders later work after the awaited work", "[stream][conformance]") {
  Watchdog watchdog("stream cross-stream wait");
  for (const auto& factory : stream_backend_factories()) {
    DYNAMIC_SECTION(factory.name) {
      auto backend = factory.make();
      const int devices = backend->device_count();
      StreamSet set(*backend);
      // A is slow (simulated device time on the host backend), B fast: without the wait, B's observation would
      // run long before A's write (test/executors/host_stream/host_stream_test.cpp shows it does).
      const StreamHandle a = set.stream(0, StreamKind::kCompute);
      const StreamHandle b = set.stream(devices - 1, StreamKind::kCopy);  // another device when there is one
      if (factory.set_delay) factory.set_delay(*backend, a, 500us);
      const std::size_t rounds = sized(40, 15, 15);
      Slots slots(*backend, 2 * rounds);
      std::vector<std::uint64_t> values(rounds);
      std::vector<EventHandle> events;
      for (std::size_t r = 0; r < rounds; ++r) {
        values[r] = value_of(7, r);
        events.push_back(set.event(0));
        slots.write(a, 0, r, &values[r]);
        backend->record(a, events[r]);  // partner: the wait on b below
        backend->wait(b, events[r]);    // partner: the record on a above
        slots.observe(b, 0, r, devices - 1, rounds + r);
      }
      const std::vector<std::uint64_t> seen = slots.read(b, devices - 1);
      for (std::size_t r = 0; r < rounds; ++r) {
        CAPTURE(r);
        REQUIRE(seen[rounds + r] == values[r]);
      }
    }
  }
}

TEST_CASE("a wait on an event never recorded is a no-op, and such an event is complete", "[stream][conformance]") {
  Watchdog watchdog("stream unrecorded event");
  for (const auto& factory : stream_backend_factories()) {
    DYNAMIC_SECTION(factory.name) {
      auto backend = factory.make();
      StreamSet set(*backend);
      const StreamHandle stream = set.stream();
      const EventHandle event = set.event();
      REQUIRE(backend->try_query(event));
      backend->wait(stream, event);  // no record to wait for
      backend->synchronize(event);
      backend->synchronize(stream);
    }
  }
}

TEST_CASE("notifications follow the work before them, in order per stream", "[stream][conformance]") {
  Watchdog watchdog("stream notifications");
  for (const auto& factory : stream_backend_factories()) {
    DYNAMIC_SECTION(factory.name) {
      auto backend = factory.make();
      constexpr int kStreams = 3;
      const int per_stream = static_cast<int>(sized(100, 30, 30));
      StreamSet set(*backend);
      NotificationLog log;
      std::vector<StreamHandle> streams;
      std::vector<std::vector<EventHandle>> events(kStreams);
      Slots slots(*backend, kStreams);
      const std::uint64_t value = 1;
      for (int s = 0; s < kStreams; ++s) {
        streams.push_back(set.stream(s % backend->device_count()));
        if (factory.set_delay) factory.set_delay(*backend, streams[s], std::chrono::microseconds(s * 20));
      }
      // Interleave the streams' enqueues; each notification follows a copy and an event record on its stream.
      for (int i = 0; i < per_stream; ++i) {
        for (int s = 0; s < kStreams; ++s) {
          const int device = s % backend->device_count();
          slots.write(streams[s], device, static_cast<std::size_t>(s), &value);  // the stream's own slot
          events[s].push_back(set.event(device));
          backend->record(streams[s], events[s].back());  // partner: try_query below, after the notification
          backend->notify(streams[s], &NotificationLog::on_notify, log.tag(s, i));
        }
      }
      const std::size_t total = static_cast<std::size_t>(kStreams * per_stream);
      REQUIRE(wait_until([&] { return log.count() == total; }));
      std::array<int, kStreams> next{};
      for (const NotificationLog::Entry& entry : log.entries()) {
        CAPTURE(entry.stream, entry.index);
        REQUIRE_FALSE(entry.failed);
        REQUIRE(entry.index == next[static_cast<std::size_t>(entry.stream)]++);  // in order per stream
        // Delivered only after everything before it completed, so the event recorded just before is complete.
        REQUIRE(
            backend->try_query(events[static_cast<std::size_t>(entry.stream)][static_cast<std::size_t>(entry.index)]));
      }
    }
  }
}

TEST_CASE("try_query becomes true without blocking, and synchronize calls are counted", "[stream][conformance]") {
  Watchdog watchdog("stream query and synchronize");
  for (const auto& factory : stream_backend_factories()) {
    DYNAMIC_SECTION(factory.name) {
      auto backend = factory.make();
      StreamSet set(*backend);
      const StreamHandle stream = set.stream();
      const EventHandle event = set.event();
      if (factory.set_delay) factory.set_delay(*backend, stream, 5ms);
      Slots slots(*backend, 1);
      const std::uint64_t before = backend->host_synchronizations();
      const std::uint64_t value = 3;
      slots.write(stream, 0, 0, &value);
      backend->record(stream, event);  // partner: the try_query polls and synchronize(event) below
      int polls = 0;
      REQUIRE(wait_until([&] {
        ++polls;
        return backend->try_query(event);
      }));
      CHECK(polls >= 1);
      CHECK(backend->host_synchronizations() == before);  // polling is not a host synchronisation
      backend->synchronize(event);
      backend->synchronize(stream);
      backend->synchronize(event);
      CHECK(backend->host_synchronizations() == before + 3);
    }
  }
}

// What traces draw stream slices from: a stamp is the moment its stream reached it, on the steady clock, so the work
// between two stamps shows where it ran, not where it was enqueued.
TEST_CASE("a stamp reads the moment its stream reached it, on the steady clock", "[stream][conformance]") {
  Watchdog watchdog("stream stamps");
  const auto steady_ns = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  for (const auto& factory : stream_backend_factories()) {
    DYNAMIC_SECTION(factory.name) {
      auto backend = factory.make();
      StreamSet set(*backend);
      const StreamHandle stream = set.stream();
      const EventHandle event = set.event();
      if (factory.set_delay) factory.set_delay(*backend, stream, 2ms);  // the copy between the stamps takes 2 ms
      Slots slots(*backend, 1);
      const std::int64_t before = steady_ns();
      const TimeStamp first = backend->stamp(stream);
      const std::uint64_t value = 5;
      slots.write(stream, 0, 0, &value);
      const TimeStamp second = backend->stamp(stream);
      backend->record(stream, event);  // partner: the synchronize below; the stamps are read once it has returned
      backend->synchronize(event);
      const std::int64_t after = steady_ns();
      const std::int64_t reached_first = backend->read_stamp(first);
      const std::int64_t reached_second = backend->read_stamp(second);
      const std::int64_t slack = factory.stamp_slack.count();
      CHECK(before - slack <= reached_first);
      CHECK(reached_first <= reached_second);
      CHECK(reached_second <= after + slack);
      if (factory.set_delay) CHECK(reached_second - reached_first >= 2'000'000);
    }
  }
}

TEST_CASE("device memory round trip through streams", "[stream][conformance]") {
  Watchdog watchdog("stream memory");
  for (const auto& factory : stream_backend_factories()) {
    DYNAMIC_SECTION(factory.name) {
      auto backend = factory.make();
      const int devices = backend->device_count();
      StreamSet set(*backend);
      const std::size_t n = 4096;
      std::vector<std::uint32_t> source(n);
      std::iota(source.begin(), source.end(), 17U);
      std::vector<std::uint32_t> result(n, 0);
      auto* first = static_cast<std::uint32_t*>(backend->allocate(0, n * sizeof(std::uint32_t)));
      auto* second = static_cast<std::uint32_t*>(backend->allocate(devices - 1, n * sizeof(std::uint32_t)));
      REQUIRE(first != nullptr);
      REQUIRE(second != nullptr);
      REQUIRE(reinterpret_cast<std::uintptr_t>(first) % 256 == 0);
      CHECK(backend->allocate(0, 0) == nullptr);
      backend->deallocate(0, nullptr);  // ignored

      // Host -> device on a copy stream, device -> device on a compute stream of the other device after an event,
      // device -> host back on the copy stream after another.
      const StreamHandle copy = set.stream(0, StreamKind::kCopy);
      const StreamHandle compute = set.stream(devices - 1, StreamKind::kCompute);
      const EventHandle uploaded = set.event(0);
      const EventHandle moved = set.event(devices - 1);
      backend->copy(copy, first, source.data(), n * sizeof(std::uint32_t), CopyDirection::kHostToDevice);
      backend->record(copy, uploaded);   // partner: the wait on compute
      backend->wait(compute, uploaded);  // partner: the record on copy above
      backend->copy(compute, second, first, n * sizeof(std::uint32_t), CopyDirection::kDeviceToDevice);
      backend->record(compute, moved);  // partner: the wait on copy
      backend->wait(copy, moved);       // partner: the record on compute above
      backend->copy(copy, result.data(), second, n * sizeof(std::uint32_t), CopyDirection::kDeviceToHost);
      backend->synchronize(copy);
      CHECK(result == source);
      backend->deallocate(0, first);
      backend->deallocate(devices - 1, second);
    }
  }
}

TEST_CASE("calls that name a bad device throw StreamError", "[stream][conformance]") {
  for (const auto& factory : stream_backend_factories()) {
    DYNAMIC_SECTION(factory.name) {
      auto backend = factory.make();
      const int devices = backend->device_count();
      REQUIRE(devices > 0);
      REQUIRE_THROWS_AS((void)backend->create_stream(devices, StreamKind::kCompute), StreamError);
      REQUIRE_THROWS_AS((void)backend->create_event(-1), StreamError);
      REQUIRE_THROWS_AS((void)backend->allocate(devices, 64), StreamError);
      try {
        (void)backend->create_stream(devices, StreamKind::kCompute);
      } catch (const StreamError& error) {
        CHECK(std::string(error.backend()) == factory.name);
        CHECK(std::string(error.what()).find(factory.name) == 0);
        CHECK(error.code() != 0);
      }
      if (devices >= 2) {
        // An event is recorded on a stream of its own device.
        StreamSet set(*backend);
        const StreamHandle stream = set.stream(0);
        const EventHandle other = set.event(1);
        REQUIRE_THROWS_AS(backend->record(stream, other), StreamError);
      }
    }
  }
}

TEST_CASE("an allocation that cannot be satisfied throws StreamError", "[stream][conformance]") {
  // Sanitizer allocators abort on such a request instead of failing it, so this runs unsanitized only.
  if (!kSanitizer.empty()) return;
  for (const auto& factory : stream_backend_factories()) {
    DYNAMIC_SECTION(factory.name) {
      auto backend = factory.make();
      try {
        void* pointer = backend->allocate(0, std::size_t{1} << 62);
        backend->deallocate(0, pointer);
        FAIL("a 4 EiB allocation succeeded");
      } catch (const StreamError& error) {
        const std::string what = error.what();
        const bool names_the_call =
            what.find("allocate") != std::string::npos || what.find("Malloc") != std::string::npos;
        CHECK(names_the_call);
      }
    }
  }
}

TEST_CASE("StreamError carries backend, call, code and cause", "[stream]") {
  const auto cause = std::make_exception_ptr(std::runtime_error("inner"));
  const StreamError error("cuda", "cudaEventQuery", 700, "an illegal memory access was encountered", cause);
  CHECK(std::string(error.what()) == "cuda cudaEventQuery: an illegal memory access was encountered");
  CHECK(std::string(error.backend()) == "cuda");
  CHECK(std::string(error.call()) == "cudaEventQuery");
  CHECK(error.code() == 700);
  CHECK(error.cause() == cause);
  const StreamError copy = error;  // copying never throws: what() is shared
  CHECK(std::string(copy.what()) == error.what());
}

}  // namespace
}  // namespace depengine::test
