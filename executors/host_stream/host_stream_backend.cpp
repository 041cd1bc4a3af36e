#include <algorithm>
#include <atomic>
#include <cassert>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include <depengine/executors/host_stream/host_stream_backend.h>
#include <depengine/executors/stream/stream_executor.h>  // StreamPlacement: its fields only, no link to the executor
#include <depengine/support/cache_line.h>
#include <depengine/support/spinlock.h>

// The event protocol (timeline in README.md). An event holds two numbers:
//   recorded_  — the generation of its latest record() call. Written by record() (one recorder at a time, by
//                contract), read by wait()/try_query()/synchronize() to learn which generation they refer to.
//   completed_ — (generation << 1) | failed: the latest generation whose record entry the recording stream's thread
//                has run, and whether that stream had failed by then. Written only by that thread.
// A record entry for generation g is queued on the stream before recorded_ becomes g, so every generation a caller
// can see will be completed by some stream thread. completed_ never decreases: re-records happen on the same stream
// (FIFO) or, on another stream, only after the previous record completed (record() enforces this).
// Generations never repeat (64 bits), so there is no ABA: a wait for g can never be satisfied by an older record.

namespace depengine {
namespace {

constexpr std::size_t kDeviceAlignment = 256;  // what cudaMalloc guarantees

// Whether the calling thread is a host stream's thread (running a launch, a copy or a notification). Such a thread
// must not call the stream API: the cudaLaunchHostFunc rule, enforced here so that an executor that breaks it fails
// in CI rather than deadlocking on a GPU.
thread_local bool t_on_stream_thread = false;

void check_caller(const char* call) {
  if (t_on_stream_thread) {
    throw std::logic_error(std::string("HostStreamBackend::") + call +
                           " called from a host stream thread (a notification or a launched function); the stream "
                           "API must not be called there, as with cudaLaunchHostFunc");
  }
}

// For functions that cannot throw: misuse aborts with a message.
void check_caller_noexcept(const char* call) noexcept {
  if (t_on_stream_thread) {
    std::fprintf(stderr, "depengine: HostStreamBackend::%s called from a host stream thread; aborting\n", call);
    std::abort();
  }
}

std::string describe_exception(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return std::string("host function threw: ") + e.what();
  } catch (...) {
    return "host function threw an exception not derived from std::exception";
  }
}

}  // namespace

namespace detail {

class HostEvent {
 public:
  explicit HostEvent(int device) : device_(device) {}

  [[nodiscard]] int device() const noexcept { return device_; }

  void retain() noexcept {
    // relaxed: the caller already holds a reference, so the object cannot die meanwhile; a count needs no ordering.
    refs_.fetch_add(1, std::memory_order_relaxed);
  }
  void release() noexcept {
    // acq_rel: release publishes this holder's uses of the event; the acquire in the last holder makes every other
    // holder's uses happen before the delete.
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  // The generation a wait/query issued now refers to (0: never recorded, so complete).
  [[nodiscard]] std::uint64_t recorded() const noexcept {
    // relaxed: a number, not a publication. A caller that must see a given record() already has a happens-before
    // edge from that call (or made it), and coherence then gives it that generation or a later one. The record
    // entry itself reaches its stream thread through that stream's queue mutex.
    return recorded_.load(std::memory_order_relaxed);
  }

  [[nodiscard]] std::uint64_t completed_state() const noexcept {
    // acquire: pairs with the release store in complete(): the work before the record (and error_) is visible.
    return completed_.load(std::memory_order_acquire);
  }

  // Blocks the calling thread until generation `target` has completed; returns the completed state it saw.
  std::uint64_t await(std::uint64_t target) const noexcept {
    std::uint64_t state = completed_state();
    while ((state >> 1) < target) {
      // acquire: as completed_state(); wakes on the notify_all in complete().
      completed_.wait(state, std::memory_order_acquire);
      state = completed_state();
    }
    return state;
  }

  // The error of the latest failed completion (null if none).
  [[nodiscard]] std::exception_ptr error() const {
    std::lock_guard lock(error_lock_);
    return error_;
  }

  // record(): called under the recording stream's queue mutex, before the entry is visible to the stream's thread.
  // Returns the new generation. Throws std::logic_error if the event is being moved to another stream while its
  // previous record is still pending (completions could then arrive out of order).
  std::uint64_t next_generation(const void* stream) {
    const std::uint64_t previous = recorded();
    if (recorded_on_ != nullptr && recorded_on_ != stream && (completed_state() >> 1) < previous) {
      throw std::logic_error(
          "HostStreamBackend::record: event re-recorded on another stream before its previous record completed "
          "(completions would arrive out of order); record it on the same stream or wait for it first");
    }
    recorded_on_ = stream;
    // relaxed: see recorded(). Records are ordered by the caller, so this is the only writer now.
    recorded_.store(previous + 1, std::memory_order_relaxed);
    return previous + 1;
  }

  // The recording stream's thread ran the record entry of `generation`; `error` is that stream's sticky error.
  void complete(std::uint64_t generation, const std::exception_ptr& error) noexcept {
    if (error) {
      std::lock_guard lock(error_lock_);
      error_ = error;
    }
    assert((completed_.load(std::memory_order_relaxed) >> 1) < generation && "event completions out of order");
    // release: pairs with the acquire loads in completed_state()/await(): whoever sees this generation complete
    // sees everything the stream did before the record entry (the user's work, its writes) and error_.
    completed_.store((generation << 1) | (error ? 1U : 0U), std::memory_order_release);
    completed_.notify_all();
  }

 private:
  const int device_;
  std::atomic<int> refs_{1};  // the owner's (until destroy_event) + one per queued record/wait entry
  std::atomic<std::uint64_t> recorded_{0};
  const void* recorded_on_ = nullptr;  // the stream of the latest record; written by record() only (serialised)
  // Written by recording stream threads; waited on by waiting stream threads and synchronize().
  alignas(support::kCacheLine) mutable std::atomic<std::uint64_t> completed_{0};
  mutable support::Spinlock error_lock_;
  std::exception_ptr error_;  // guarded by error_lock_
};

// One queue entry.
struct Entry {
  enum class Kind : std::uint8_t { kLaunch, kRecord, kWait, kNotify, kCopy };

  Kind kind = Kind::kLaunch;
  std::uint64_t generation = 0;  // kRecord: the generation it completes; kWait: the generation it awaits
  HostEvent* event = nullptr;    // kRecord, kWait: one reference, released once the entry has run
  NotifyFn notify = nullptr;     // kNotify
  void* pointer = nullptr;       // kNotify: the context; kCopy: the destination
  const void* source = nullptr;  // kCopy
  std::size_t bytes = 0;         // kCopy
  HostTask task;                 // kLaunch
};

class HostStream {
 public:
  HostStream(int device, StreamKind kind, std::chrono::nanoseconds delay)
      : device_(device), kind_(kind), delay_ns_(delay.count()), thread_([this] { run(); }) {}

  // Drains the queue, then joins the thread.
  ~HostStream() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }

  HostStream(const HostStream&) = delete;
  HostStream& operator=(const HostStream&) = delete;

  [[nodiscard]] int device() const noexcept { return device_; }
  [[nodiscard]] StreamKind kind() const noexcept { return kind_; }

  void set_delay(std::chrono::nanoseconds delay) noexcept {
    // relaxed: a setting read by this stream's thread before each launch; no data depends on it.
    delay_ns_.store(delay.count(), std::memory_order_relaxed);
  }

  // Appends `entry`. With `record`, assigns the event's next generation in the same critical section, so the entry
  // is queued before any caller can see that generation. Returns the number of entries queued so far.
  std::uint64_t enqueue(Entry&& entry, HostEvent* record = nullptr) {
    bool wake = false;
    std::uint64_t position = 0;
    {
      std::lock_guard lock(mutex_);
      if (recording_ != nullptr) {  // recorded, not run (HostStreamBackend::begin_recording)
        if (entry.kind != Entry::Kind::kLaunch && entry.kind != Entry::Kind::kCopy) {
          throw std::logic_error(
              "HostStreamBackend: an event record, event wait or notification on a stream that records work (a "
              "recording holds launches and copies only)");
        }
        recording_->push_back(std::move(entry));
        return enqueued_;
      }
      // Grow first (allocates only until the queue's high-water mark), so that nothing can throw once a generation
      // is taken: a generation without its entry would leave its waiters waiting for ever.
      if (incoming_.size() == incoming_.capacity()) incoming_.reserve(std::max<std::size_t>(16, 2 * incoming_.size()));
      if (record != nullptr) entry.generation = record->next_generation(this);
      incoming_.push_back(std::move(entry));  // cannot throw: capacity is there and Entry moves without throwing
      position = ++enqueued_;
      wake = sleeping_;
    }
    // Outside the lock: the thread re-checks incoming_ under the lock before sleeping, so no wake is lost.
    if (wake) cv_.notify_one();
    return position;
  }

  // Blocks until every entry queued so far has run; throws the stream's sticky error, if any.
  void synchronize() {
    std::uint64_t target = 0;
    {
      std::lock_guard lock(mutex_);
      target = enqueued_;
    }
    // acquire: pairs with the release store in run(): the entries' effects are visible once they count as retired.
    for (std::uint64_t done = retired_.load(std::memory_order_acquire); done < target;
         done = retired_.load(std::memory_order_acquire)) {
      retired_.wait(done, std::memory_order_acquire);
    }
    if (std::exception_ptr error = sticky_error()) std::rethrow_exception(error);
  }

  // Recording: from begin_recording() to end_recording(), entries enqueued on the stream are kept, not queued.
  void begin_recording() {
    auto recording = std::make_unique<std::vector<Entry>>();
    std::lock_guard lock(mutex_);
    if (recording_ != nullptr) throw std::logic_error("HostStreamBackend::begin_recording: the stream records already");
    recording_ = std::move(recording);
  }
  // Throws std::logic_error while the stream records: `call` would make the recording wait for work outside it.
  void refuse_while_recording(const char* call) {
    std::lock_guard lock(mutex_);
    if (recording_ != nullptr) {
      throw std::logic_error(std::string("HostStreamBackend::") + call +
                             ": the stream records work; a recording cannot wait for an event recorded outside it");
    }
  }
  [[nodiscard]] std::unique_ptr<std::vector<Entry>> end_recording(const char* call) {
    std::lock_guard lock(mutex_);
    if (recording_ == nullptr) {
      throw std::logic_error(std::string("HostStreamBackend::") + call + ": the stream does not record");
    }
    return std::move(recording_);
  }

  // Runs recorded entries, as a launch (one launch delay): their launches (each HostTask called again, not consumed)
  // and copies, in order. What a launch throws propagates, failing the stream as a launch's would.
  static void run_recorded(std::vector<Entry>& recorded) {
    for (Entry& entry : recorded) {
      if (entry.kind == Entry::Kind::kLaunch) {
        entry.task();
      } else if (entry.bytes > 0) {
        std::memcpy(entry.pointer, entry.source, entry.bytes);
      }
    }
  }

  // The sticky error, or null. Any thread.
  [[nodiscard]] std::exception_ptr sticky_error() const noexcept {
    // acquire: pairs with the release store in fail(); error_ is written once, before failed_, and never again.
    return failed_.load(std::memory_order_acquire) ? error_ : nullptr;
  }

 private:
  void run() {
    t_on_stream_thread = true;
    std::unique_lock lock(mutex_);
    for (;;) {
      if (incoming_.empty()) {
        if (stopping_) return;
        sleeping_ = true;
        cv_.wait(lock, [this] { return !incoming_.empty() || stopping_; });
        sleeping_ = false;
        continue;
      }
      incoming_.swap(draining_);  // both keep their capacity: no allocation in steady state
      lock.unlock();
      for (Entry& entry : draining_) {
        execute(entry);
        // Only this thread writes retired_. release: pairs with the acquire loads in synchronize().
        retired_.store(retired_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
        retired_.notify_all();
      }
      draining_.clear();
      lock.lock();
    }
  }

  void execute(Entry& entry) noexcept {
    switch (entry.kind) {
      case Entry::Kind::kLaunch:
        if (!failed_here()) launch(entry.task);
        entry.task.reset();  // the captures die on this thread, right after running
        break;
      case Entry::Kind::kRecord:
        entry.event->complete(entry.generation, failed_here() ? error_ : nullptr);
        entry.event->release();
        break;
      case Entry::Kind::kWait: {
        // Blocks this stream's thread (the device), never a caller. Cannot deadlock: the awaited record entry was
        // queued before this wait was, so it never waits (transitively) on anything queued after this entry.
        const std::uint64_t state = entry.event->await(entry.generation);
        if ((state & 1U) != 0 && !failed_here()) fail(entry.event->error());
        entry.event->release();
        break;
      }
      case Entry::Kind::kNotify:
        entry.notify(entry.pointer, failed_here() ? error_ : nullptr);
        break;
      case Entry::Kind::kCopy:
        if (!failed_here() && entry.bytes > 0) {
          simulate_device_time();
          std::memcpy(entry.pointer, entry.source, entry.bytes);
        }
        break;
    }
  }

  // Sleeps the stream's launch delay: simulated device time, not a wait for another thread.
  void simulate_device_time() const noexcept {
    // relaxed: see set_delay().
    if (const auto delay = std::chrono::nanoseconds(delay_ns_.load(std::memory_order_relaxed)); delay.count() > 0) {
      std::this_thread::sleep_for(delay);
    }
  }

  void launch(HostTask& task) noexcept {
    simulate_device_time();
    try {
      task();
    } catch (...) {
      std::exception_ptr cause = std::current_exception();
      std::string message = describe_exception(cause);
      try {
        fail(std::make_exception_ptr(
            StreamError("host", "launch", StreamError::kHostFunctionThrew, message, std::move(cause))));
      } catch (...) {
        fail(std::current_exception());  // out of memory while building the error: keep that one
      }
    }
  }

  // Whether this stream has failed. Stream thread only (the only writer of failed_), hence relaxed.
  [[nodiscard]] bool failed_here() const noexcept { return failed_.load(std::memory_order_relaxed); }

  // Stream thread only. The first error sticks.
  void fail(std::exception_ptr error) noexcept {
    if (failed_here()) return;
    error_ = std::move(error);
    // release: pairs with the acquire in sticky_error(), publishing error_.
    failed_.store(true, std::memory_order_release);
  }

  const int device_;
  const StreamKind kind_;
  std::atomic<std::int64_t> delay_ns_;

  // Shared by enqueuers and the stream thread, under mutex_.
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<Entry> incoming_;
  std::uint64_t enqueued_ = 0;                     // entries ever queued
  bool sleeping_ = false;                          // the thread waits on cv_ (so an enqueue must wake it)
  bool stopping_ = false;                          // destroy: run what is queued, then exit
  std::unique_ptr<std::vector<Entry>> recording_;  // while the stream records work: what was enqueued meanwhile

  // The stream thread's own.
  std::vector<Entry> draining_;  // the batch being run

  // Written by the stream thread, read by synchronize() and notifications' readers.
  alignas(support::kCacheLine) std::atomic<std::uint64_t> retired_{0};  // entries run
  std::atomic<bool> failed_{false};
  std::exception_ptr error_;  // written once by the stream thread, before failed_; then immutable

  std::thread thread_;  // last: starts once everything above exists
};

// Work a stream recorded (HostStreamBackend::end_recording): owned by the RecordedWork and by the launches of it still
// queued, and run by one stream at a time, as a CUDA graph's launches are.
struct HostRecording {
  std::mutex mutex;
  std::vector<Entry> entries;  // launches and copies; guarded by mutex while they run
};

}  // namespace detail

namespace {

detail::HostEvent& event_of(EventHandle event) {
  if (!event) throw std::invalid_argument("HostStreamBackend: null EventHandle");
  return *static_cast<detail::HostEvent*>(event.impl);
}

std::string describe_devices(int devices) {
  if (devices == 0) return "no host device: HostStreamOptions::devices is 0";
  return "host: " + std::to_string(devices) + " simulated device" + (devices == 1 ? "" : "s") +
         " (one CPU thread per stream)";
}

}  // namespace

HostStreamBackend::HostStreamBackend(HostStreamOptions options)
    : devices_(options.devices),
      launch_delay_(options.launch_delay),
      records_work_(options.records_work),
      status_(describe_devices(options.devices)) {
  if (options.devices < 0) throw std::invalid_argument("HostStreamOptions::devices is negative");
  if (options.launch_delay.count() < 0) throw std::invalid_argument("HostStreamOptions::launch_delay is negative");
}

HostStreamBackend::~HostStreamBackend() {
  std::vector<detail::HostStream*> left;
  {
    std::lock_guard lock(streams_mutex_);
    left.swap(streams_);
  }
  for (detail::HostStream* stream : left) delete stream;
}

void HostStreamBackend::check_device(int device, const char* call) const {
  if (device >= 0 && device < devices_) return;
  if (devices_ == 0) throw StreamError("host", call, StreamError::kNoDevice, status_);
  throw StreamError("host", call, StreamError::kBadDevice,
                    "device " + std::to_string(device) + " out of range (" + std::to_string(devices_) + " devices)");
}

detail::HostStream& HostStreamBackend::stream_of(StreamHandle stream, const char* call) const {
  if (!stream) throw std::invalid_argument(std::string("HostStreamBackend::") + call + ": null StreamHandle");
  return *static_cast<detail::HostStream*>(stream.impl);
}

StreamHandle HostStreamBackend::create_stream(int device, StreamKind kind) {
  check_caller("create_stream");
  check_device(device, "create_stream");
  std::lock_guard lock(streams_mutex_);
  streams_.reserve(streams_.size() + 1);  // so that push_back below cannot throw after the thread has started
  auto* stream = new detail::HostStream(device, kind, launch_delay_);
  streams_.push_back(stream);
  return StreamHandle{stream};
}

void HostStreamBackend::destroy_stream(StreamHandle stream) noexcept {
  check_caller_noexcept("destroy_stream");
  if (!stream) return;
  auto* host_stream = static_cast<detail::HostStream*>(stream.impl);
  {
    std::lock_guard lock(streams_mutex_);
    auto it = std::find(streams_.begin(), streams_.end(), host_stream);
    assert(it != streams_.end() && "destroy_stream: not a live stream of this backend");
    if (it == streams_.end()) return;
    streams_.erase(it);
  }
  delete host_stream;  // drains and joins, outside the lock: other streams may be created meanwhile
}

EventHandle HostStreamBackend::create_event(int device) {
  check_caller("create_event");
  check_device(device, "create_event");
  return EventHandle{new detail::HostEvent(device)};
}

void HostStreamBackend::destroy_event(EventHandle event) noexcept {
  check_caller_noexcept("destroy_event");
  if (event) static_cast<detail::HostEvent*>(event.impl)->release();
}

void HostStreamBackend::record(StreamHandle stream, EventHandle event) {
  check_caller("record");
  detail::HostStream& s = stream_of(stream, "record");
  detail::HostEvent& e = event_of(event);
  if (e.device() != s.device()) {
    throw StreamError("host", "record", StreamError::kBadDevice,
                      "event of device " + std::to_string(e.device()) + " recorded on a stream of device " +
                          std::to_string(s.device()) + " (an event is recorded on its own device)");
  }
  detail::Entry entry;
  entry.kind = detail::Entry::Kind::kRecord;
  entry.event = &e;
  e.retain();
  try {
    s.enqueue(std::move(entry), &e);  // assigns the generation
  } catch (...) {
    e.release();
    throw;
  }
}

void HostStreamBackend::wait(StreamHandle stream, EventHandle event) {
  check_caller("wait");
  detail::HostStream& s = stream_of(stream, "wait");
  detail::HostEvent& e = event_of(event);
  s.refuse_while_recording("wait");  // even for a completed event: the outcome must not depend on timing
  const std::uint64_t target = e.recorded();
  const std::uint64_t state = e.completed_state();
  // Already complete without error: nothing to wait for. The acquire in completed_state() makes the recorded work
  // happen before this call, and this call before the work enqueued after it (through the queue mutex).
  if ((state >> 1) >= target && (state & 1U) == 0) return;
  detail::Entry entry;
  entry.kind = detail::Entry::Kind::kWait;
  entry.event = &e;
  entry.generation = target;
  e.retain();
  try {
    s.enqueue(std::move(entry));
  } catch (...) {
    e.release();
    throw;
  }
}

void HostStreamBackend::notify(StreamHandle stream, NotifyFn fn, void* context) {
  check_caller("notify");
  detail::HostStream& s = stream_of(stream, "notify");
  if (fn == nullptr) throw std::invalid_argument("HostStreamBackend::notify: null function");
  detail::Entry entry;
  entry.kind = detail::Entry::Kind::kNotify;
  entry.notify = fn;
  entry.pointer = context;
  s.enqueue(std::move(entry));
}

namespace {

// A stamp of the host backend: the time its stream's thread reached it, or -1.
struct HostStamp {
  std::atomic<std::int64_t> at{-1};

  static void reached(void* self, std::exception_ptr error) noexcept {
    const std::int64_t now =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count();
    // relaxed: read by read_stamp() after later work on the stream has completed, which the stream orders after
    // this entry and reports through an event or a notification (its happens-before, StreamBackend's contract).
    static_cast<HostStamp*>(self)->at.store(error == nullptr ? now : -1, std::memory_order_relaxed);
  }
};

}  // namespace

// A notification entry that reads the clock: it runs in stream order, after the work before it.
TimeStamp HostStreamBackend::stamp(StreamHandle stream) {
  auto owned = std::make_unique<HostStamp>();
  notify(stream, &HostStamp::reached, owned.get());
  return TimeStamp{owned.release()};
}

std::int64_t HostStreamBackend::read_stamp(TimeStamp stamp) noexcept {
  const std::unique_ptr<HostStamp> owned(static_cast<HostStamp*>(stamp.impl));
  return owned->at.load(std::memory_order_relaxed);  // relaxed: see HostStamp::reached
}

bool HostStreamBackend::try_query(EventHandle event) {
  check_caller("try_query");
  detail::HostEvent& e = event_of(event);
  const std::uint64_t target = e.recorded();
  const std::uint64_t state = e.completed_state();
  if ((state >> 1) < target) return false;
  if ((state & 1U) != 0) std::rethrow_exception(e.error());
  return true;
}

void HostStreamBackend::synchronize_event(EventHandle event) {
  check_caller("synchronize");
  detail::HostEvent& e = event_of(event);
  const std::uint64_t state = e.await(e.recorded());
  if ((state & 1U) != 0) std::rethrow_exception(e.error());
}

void HostStreamBackend::synchronize_stream(StreamHandle stream) {
  check_caller("synchronize");
  stream_of(stream, "synchronize").synchronize();
}

void* HostStreamBackend::allocate(int device, std::size_t bytes) {
  check_caller("allocate");
  check_device(device, "allocate");
  if (bytes == 0) return nullptr;
  try {
    return ::operator new (bytes, std::align_val_t{kDeviceAlignment});
  } catch (const std::bad_alloc&) {
    throw StreamError("host", "allocate", StreamError::kOutOfMemory,
                      "out of memory allocating " + std::to_string(bytes) + " bytes");
  }
}

void HostStreamBackend::deallocate(int /*device*/, void* pointer) noexcept {
  check_caller_noexcept("deallocate");
  if (pointer != nullptr) ::operator delete (pointer, std::align_val_t{kDeviceAlignment});
}

void HostStreamBackend::copy(StreamHandle stream, void* destination, const void* source, std::size_t bytes,
                             CopyDirection /*direction*/) {
  check_caller("copy");
  detail::HostStream& s = stream_of(stream, "copy");
  if (bytes > 0 && (destination == nullptr || source == nullptr)) {
    throw std::invalid_argument("HostStreamBackend::copy: null pointer");
  }
  detail::Entry entry;
  entry.kind = detail::Entry::Kind::kCopy;
  entry.pointer = destination;
  entry.source = source;
  entry.bytes = bytes;
  s.enqueue(std::move(entry));
}

void HostStreamBackend::launch(StreamHandle stream, HostTask task) {
  check_caller("launch");
  detail::HostStream& s = stream_of(stream, "launch");
  if (!task) throw std::invalid_argument("HostStreamBackend::launch: empty task");
  detail::Entry entry;
  entry.kind = detail::Entry::Kind::kLaunch;
  entry.task = std::move(task);
  s.enqueue(std::move(entry));
}

void HostStreamBackend::set_launch_delay(StreamHandle stream, std::chrono::nanoseconds delay) {
  check_caller("set_launch_delay");
  if (delay.count() < 0) throw std::invalid_argument("HostStreamBackend::set_launch_delay: negative delay");
  stream_of(stream, "set_launch_delay").set_delay(delay);
}

void HostStreamBackend::begin_recording(StreamHandle stream) {
  check_caller("begin_recording");
  if (!records_work_) StreamBackend::begin_recording(stream);  // throws: this backend does not record
  stream_of(stream, "begin_recording").begin_recording();
}

RecordedWork HostStreamBackend::end_recording(StreamHandle stream) {
  check_caller("end_recording");
  std::unique_ptr<std::vector<detail::Entry>> entries =
      stream_of(stream, "end_recording").end_recording("end_recording");
  auto recording = std::make_unique<std::shared_ptr<detail::HostRecording>>(std::make_shared<detail::HostRecording>());
  (*recording)->entries = std::move(*entries);
  return RecordedWork(recording.release(), [](void* impl) noexcept {
    delete static_cast<std::shared_ptr<detail::HostRecording>*>(impl);  // queued launches keep their own reference
  });
}

void HostStreamBackend::abandon_recording(StreamHandle stream) noexcept {
  check_caller_noexcept("abandon_recording");
  if (!stream) return;
  try {
    (void)static_cast<detail::HostStream*>(stream.impl)->end_recording("abandon_recording");
  } catch (...) {  // the stream did not record: nothing to discard
  }
}

void HostStreamBackend::launch(const RecordedWork& work, StreamHandle stream) {
  check_caller("launch");
  if (!work) throw std::invalid_argument("HostStreamBackend::launch: empty recorded work");
  std::shared_ptr<detail::HostRecording> recording = *static_cast<std::shared_ptr<detail::HostRecording>*>(work.impl());
  launch(stream, [recording = std::move(recording)] {
    const std::lock_guard lock(recording->mutex);
    detail::HostStream::run_recorded(recording->entries);
  });
}

HostStreamBackend* HostStreamBackend::of(const StreamPlacement& where) noexcept {
  // A final class: the check is one type comparison.
  return dynamic_cast<HostStreamBackend*>(where.backend);
}

void launch_host(const StreamPlacement& where, HostTask task) {
  HostStreamBackend* host = HostStreamBackend::of(where);
  if (host == nullptr) {
    throw std::logic_error(std::string("launch_host: the op was placed on a ") +
                           (where.backend != nullptr ? where.backend->name() : "null") +
                           " stream, not a host stream; enqueue device work through StreamPlacement::native");
  }
  host->launch(where.stream, std::move(task));
}

}  // namespace depengine
