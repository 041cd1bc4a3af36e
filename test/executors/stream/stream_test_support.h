// Helpers for the stream-backend tests: the list of backends the conformance suite runs on, device "slots" that
// stream work writes and copies (so that one suite, written only against StreamBackend, runs on host, CUDA and HIP
// alike), a gate that holds a host stream at a point, and a notification log.
//
// Work in the conformance suite is made of copies only: writing a value is a host-to-device copy of a constant,
// observing one is a device-to-device copy into another slot, and the test reads every slot back at the end. A slot
// is written once with a value unique to its writer, and starts at 0, so an observation made too early reads 0 (or
// an older value) and fails the check. On the host backend a stream's simulated device time (its launch delay, which
// also applies to copies) makes such races real.
#pragma once

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <depengine/executors/host_stream/host_stream_backend.h>
#include <depengine/executors/stream/stream_backend.h>

#include "test/test_support.h"

#if defined(DEPENGINE_HAVE_CUDA_STREAM)
#include <depengine/executors/cuda_stream/cuda_stream_backend.h>
#endif
#if defined(DEPENGINE_HAVE_HIP_STREAM)
#include <depengine/executors/hip_stream/hip_stream_backend.h>
#endif

namespace depengine::test {

struct StreamBackendFactory {
  std::string name;
  std::function<std::unique_ptr<StreamBackend>()> make;
  // Sets a stream's simulated device time; null where the backend has real device time (CUDA, HIP).
  std::function<void(StreamBackend&, StreamHandle, std::chrono::nanoseconds)> set_delay;
  // How far a stamp may read from the moment its stream reached it: 0 where the stream thread reads the host clock
  // itself; on CUDA and HIP, the anchor's bracket (StreamBackend::stamp) with a wide margin.
  std::chrono::nanoseconds stamp_slack{0};
};

inline constexpr int kHostDevices = 2;

inline StreamBackendFactory host_backend_factory() {
  return {"host", [] { return std::make_unique<HostStreamBackend>(HostStreamOptions{.devices = kHostDevices}); },
          [](StreamBackend& backend, StreamHandle stream, std::chrono::nanoseconds delay) {
            static_cast<HostStreamBackend&>(backend).set_launch_delay(stream, delay);
          }};
}

inline constexpr std::chrono::nanoseconds kGpuStampSlack = std::chrono::microseconds(20);

// The GPU backends that were built, whether or not a device exists.
inline std::vector<StreamBackendFactory> gpu_backend_factories() {
  std::vector<StreamBackendFactory> factories;
#if defined(DEPENGINE_HAVE_CUDA_STREAM)
  factories.push_back({"cuda", [] { return std::make_unique<CudaStreamBackend>(); }, nullptr, kGpuStampSlack});
#endif
#if defined(DEPENGINE_HAVE_HIP_STREAM)
  factories.push_back({"hip", [] { return std::make_unique<HipStreamBackend>(); }, nullptr, kGpuStampSlack});
#endif
  return factories;
}

// A GPU backend built without a device (this machine, CI): it constructs, reports 0 devices, and refuses, with a
// StreamError whose message starts its status() with `no_device` ("no CUDA device", "no HIP device"), everything that
// needs one. With a device the conformance suite runs it instead, and this checks only its name.
inline void check_gpu_backend_without_device(const StreamBackendFactory& factory, const std::string& no_device) {
  std::unique_ptr<StreamBackend> backend;
  REQUIRE_NOTHROW(backend = factory.make());
  const std::string status(backend->status());
  std::printf("gpu stream backend %s: device_count() = %d; status: %s\n", factory.name.c_str(), backend->device_count(),
              status.c_str());
  std::fflush(stdout);
  CHECK(std::string(backend->name()) == factory.name);
  if (backend->device_count() > 0) return;  // the conformance suite runs it

  CHECK(status.find(no_device) == 0);
  // Everything that needs a device says why there is none.
  for (int attempt = 0; attempt < 3; ++attempt) {
    CAPTURE(attempt);
    try {
      if (attempt == 0) (void)backend->create_stream(0, StreamKind::kCompute);
      if (attempt == 1) (void)backend->create_event(0);
      if (attempt == 2) (void)backend->allocate(0, 256);
      FAIL("a call that needs a device succeeded without one");
    } catch (const StreamError& error) {
      CHECK(std::string(error.backend()) == factory.name);
      CHECK(std::string(error.what()).find(no_device) != std::string::npos);
      CHECK(error.code() != 0);
    }
  }
  // Handles that name nothing are ignored, as the interface promises, and nothing was synchronised.
  backend->destroy_stream(StreamHandle{});
  backend->destroy_event(EventHandle{});
  backend->deallocate(0, nullptr);
  CHECK(backend->native_handle(StreamHandle{}) == nullptr);
  CHECK(backend->host_synchronizations() == 0);
  // A second instance is as good as the first (no process-wide state poisoned by the failed device query).
  std::unique_ptr<StreamBackend> again;
  REQUIRE_NOTHROW(again = factory.make());
  CHECK(again->device_count() == 0);
}

// Every backend of the conformance suite: host always; CUDA and HIP when built and a device exists. Those skipped
// are printed once, with the reason (their status()).
inline const std::vector<StreamBackendFactory>& stream_backend_factories() {
  static const std::vector<StreamBackendFactory> factories = [] {
    std::vector<StreamBackendFactory> result{host_backend_factory()};
    for (StreamBackendFactory& gpu : gpu_backend_factories()) {
      const std::unique_ptr<StreamBackend> probe = gpu.make();
      if (probe->device_count() > 0) {
        std::printf("stream conformance: running on %s (%s)\n", gpu.name.c_str(), std::string(probe->status()).c_str());
        result.push_back(std::move(gpu));
      } else {
        std::printf("stream conformance: skipping %s: %s\n", gpu.name.c_str(), std::string(probe->status()).c_str());
      }
    }
    std::fflush(stdout);
    return result;
  }();
  return factories;
}

// One array of 64-bit slots per device, in device memory, zeroed at construction.
class Slots {
 public:
  Slots(StreamBackend& backend, std::size_t count) : backend_(backend), count_(count) {
    const int devices = backend.device_count();
    const std::vector<std::uint64_t> zeros(count, 0);
    for (int device = 0; device < devices; ++device) {
      base_.push_back(static_cast<std::uint64_t*>(backend.allocate(device, count * sizeof(std::uint64_t))));
      const StreamHandle stream = backend.create_stream(device, StreamKind::kCopy);
      backend.copy(stream, base_.back(), zeros.data(), count * sizeof(std::uint64_t), CopyDirection::kHostToDevice);
      backend.synchronize(stream);
      backend.destroy_stream(stream);
    }
  }
  ~Slots() {
    for (std::size_t device = 0; device < base_.size(); ++device) {
      backend_.deallocate(static_cast<int>(device), base_[device]);
    }
  }
  Slots(const Slots&) = delete;
  Slots& operator=(const Slots&) = delete;

  [[nodiscard]] std::size_t size() const noexcept { return count_; }

  // Enqueues slot[device][slot] = *value. `value` must stay valid until the copy has completed.
  void write(StreamHandle stream, int device, std::size_t slot, const std::uint64_t* value) {
    backend_.copy(stream, at(device, slot), value, sizeof(std::uint64_t), CopyDirection::kHostToDevice);
  }

  // Enqueues slot[to_device][to] = slot[from_device][from].
  void observe(StreamHandle stream, int from_device, std::size_t from, int to_device, std::size_t to) {
    backend_.copy(stream, at(to_device, to), at(from_device, from), sizeof(std::uint64_t),
                  CopyDirection::kDeviceToDevice);
  }

  // Every slot of `device`, read through `stream` (synchronised: counts as one host synchronisation).
  [[nodiscard]] std::vector<std::uint64_t> read(StreamHandle stream, int device) {
    std::vector<std::uint64_t> values(count_, 0);
    backend_.copy(stream, values.data(), base_[static_cast<std::size_t>(device)], count_ * sizeof(std::uint64_t),
                  CopyDirection::kDeviceToHost);
    backend_.synchronize(stream);
    return values;
  }

 private:
  [[nodiscard]] std::uint64_t* at(int device, std::size_t slot) const {
    REQUIRE(slot < count_);
    return base_[static_cast<std::size_t>(device)] + slot;
  }

  StreamBackend& backend_;
  const std::size_t count_;
  std::vector<std::uint64_t*> base_;  // per device; owned (allocate/deallocate)
};

// Streams created for a test and destroyed at its end (before the backend), even when a check fails.
class StreamSet {
 public:
  explicit StreamSet(StreamBackend& backend) : backend_(backend) {}
  ~StreamSet() {
    for (StreamHandle stream : streams_) backend_.destroy_stream(stream);
    for (EventHandle event : events_) backend_.destroy_event(event);
  }
  StreamSet(const StreamSet&) = delete;
  StreamSet& operator=(const StreamSet&) = delete;

  StreamHandle stream(int device = 0, StreamKind kind = StreamKind::kCompute) {
    streams_.push_back(backend_.create_stream(device, kind));
    return streams_.back();
  }
  EventHandle event(int device = 0) {
    events_.push_back(backend_.create_event(device));
    return events_.back();
  }

 private:
  StreamBackend& backend_;
  std::vector<StreamHandle> streams_;
  std::vector<EventHandle> events_;
};

// Notifications received, in arrival order, with the error each carried. A NotifyFn context.
class NotificationLog {
 public:
  struct Entry {
    int stream;
    int index;
    bool failed;
    std::string message;  // the StreamError's what(), when failed
  };

  // The context for one notification: which stream and which index it stands for.
  struct Tag {
    NotificationLog* log;
    int stream;
    int index;
  };

  static void on_notify(void* context, std::exception_ptr error) noexcept {
    const auto* tag = static_cast<const Tag*>(context);
    Entry entry{tag->stream, tag->index, error != nullptr, {}};
    if (error) {
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        entry.message = e.what();
      } catch (...) {
        entry.message = "?";
      }
    }
    std::lock_guard lock(tag->log->mutex_);
    tag->log->entries_.push_back(std::move(entry));
    // release: pairs with the acquire in count(): the entry (and whatever preceded the notification) is visible.
    tag->log->count_.store(tag->log->entries_.size(), std::memory_order_release);
  }

  [[nodiscard]] std::size_t count() const noexcept {
    // acquire: pairs with the release in on_notify().
    return count_.load(std::memory_order_acquire);
  }

  [[nodiscard]] std::vector<Entry> entries() const {
    std::lock_guard lock(mutex_);
    return entries_;
  }

  // Tags live in a deque-like list so that their addresses stay stable while notifications are pending.
  Tag* tag(int stream, int index) {
    tags_.push_back(std::make_unique<Tag>(Tag{this, stream, index}));
    return tags_.back().get();
  }

 private:
  mutable std::mutex mutex_;
  std::vector<Entry> entries_;  // guarded by mutex_
  std::atomic<std::size_t> count_{0};
  std::vector<std::unique_ptr<Tag>> tags_;  // touched by the test thread only
};

// Holds a host stream at a point: launch(stream, gate.hold()) blocks that stream's thread until open(). The stream
// thread waits for the test thread on a condition with a deadline (a failed test, never a reason to carry on).
class Gate {
 public:
  [[nodiscard]] auto hold() {
    return [this] {
      // release: pairs with the acquire in reached().
      reached_.store(true, std::memory_order_release);
      // acquire: pairs with the release in open(): what the test did before opening is visible after.
      if (!wait_until([this] { return open_.load(std::memory_order_acquire); })) {
        // relaxed: read by the test thread after it has synchronised with this stream.
        timed_out_.store(true, std::memory_order_relaxed);
      }
    };
  }
  void open() {
    // release: pairs with the acquire in hold()'s wait.
    open_.store(true, std::memory_order_release);
  }
  [[nodiscard]] bool reached() const {
    // acquire: pairs with the release in hold().
    return reached_.load(std::memory_order_acquire);
  }
  [[nodiscard]] bool timed_out() const {
    // relaxed: see hold().
    return timed_out_.load(std::memory_order_relaxed);
  }

 private:
  std::atomic<bool> open_{false};
  std::atomic<bool> reached_{false};
  std::atomic<bool> timed_out_{false};
};

}  // namespace depengine::test
