#include <algorithm>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cassert>
#include <deque>
#include <stdexcept>
#include <thread>
#include <utility>

#include <depengine/executors/stream/stream_executor.h>

namespace depengine {

// The event recorded on a stream after the op of `epoch`, and what the stream knew then (its knowledge frontier,
// including (its axis, epoch)). Owned by the issuing thread.
struct StreamExecutor::EventSlot {
  EventHandle event;
  std::uint64_t epoch = 0;  // 0: never recorded
  KnowledgeFrontier<kMaxEngineAxes> knowledge;
};

struct StreamExecutor::Stream {
  // Immutable after construction (start() sets `tracked` before any submit).
  StreamExecutor* owner = nullptr;
  StreamHandle handle;
  void* native = nullptr;
  std::uint32_t device = 0;
  StreamKind kind = StreamKind::kCompute;
  std::uint32_t index = 0;
  Axis axis{};
  TrackedAxis tracked;

  // Owned by the issuing thread (one at a time: see submit()).
  std::uint64_t issued = 0;                     // epoch of the last op issued
  KnowledgeFrontier<kMaxEngineAxes> knowledge;  // what work enqueued on the stream from now on may assume done
  std::array<EventSlot, kEventRing> ring;

  // Completion: shared by the issuing thread and the io thread.
  std::mutex mutex;
  TaskList in_flight;          // issued ops not yet retired, in epoch order; guarded by mutex
  std::uint64_t visible = 0;   // the last epoch whose event is enqueued; guarded by mutex
  std::uint64_t notified = 0;  // kNotify: the epoch of the last notification handled (one per epoch); guarded by mutex
  // kNotify: notifications arrived and not yet handled (StreamExecutor::notified_posted_).
  std::atomic<std::uint64_t> arrived{0};
  std::exception_ptr error;  // the failure, once failed; guarded by mutex
  // Traced ops' device stamps, in epoch order; guarded by mutex. An op skipped after its start was stamped leaves
  // that stamp alone (no end), under the next epoch, so that it is read once later work has passed it.
  struct Stamps {
    std::uint64_t epoch;
    TimeStamp start, end;
  };
  std::deque<Stamps> stamps;
  // Set (release) once `error` is; the issuing thread reads it (acquire) before taking the mutex for the error.
  std::atomic<bool> failed{false};

  // Statistics: relaxed counters, each written by one thread (issuing or io) at a time.
  std::atomic<std::uint64_t> ops_issued{0};
  std::atomic<std::uint64_t> waits_issued{0};
  std::atomic<std::uint64_t> waits_elided{0};
  std::atomic<std::uint64_t> waits_complete{0};
  std::atomic<std::uint64_t> notifications{0};
  std::atomic<std::uint64_t> event_queries{0};

  [[nodiscard]] std::exception_ptr failure() {
    std::lock_guard lock(mutex);
    return error;
  }
};

struct StreamExecutor::Io {
  boost::asio::io_context context{1};
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard{context.get_executor()};
  boost::asio::steady_timer timer{context};  // kPoll: the slow poll's interval
  std::thread thread;
};

namespace {

void bump(std::atomic<std::uint64_t>& counter, std::uint64_t by = 1) noexcept {
  // relaxed: a statistic (see StreamStats).
  counter.fetch_add(by, std::memory_order_relaxed);
}

std::uint64_t read(const std::atomic<std::uint64_t>& counter) noexcept {
  return counter.load(std::memory_order_relaxed);  // relaxed: a statistic
}

}  // namespace

StreamExecutor::StreamExecutor(std::unique_ptr<StreamBackend> backend, StreamExecutorOptions options)
    : backend_(std::move(backend)), name_(std::move(options.name)) {
  stream_facet_ = this;
  if (backend_ == nullptr) throw std::invalid_argument("StreamExecutor: null backend");
  const int available = backend_->device_count();
  if (available == 0) {
    throw StreamError(backend_->name(), "StreamExecutor", StreamError::kNoDevice, backend_->status());
  }
  if (options.devices == 0 || options.devices < -1 || options.devices > available) {
    throw StreamError(backend_->name(), "StreamExecutor", StreamError::kBadDevice,
                      "StreamExecutorOptions::devices is " + std::to_string(options.devices) + " but the backend has " +
                          std::to_string(available) + " device(s)");
  }
  if (options.compute_streams == 0 && options.copy_streams == 0) {
    throw std::invalid_argument("StreamExecutorOptions: at least one compute or copy stream per device is needed");
  }
  devices_ = static_cast<std::uint32_t>(options.devices == -1 ? available : options.devices);
  completion_ = options.completion;
  if (completion_ == StreamCompletion::kAuto) {
    completion_ = backend_->cheap_notifications() ? StreamCompletion::kNotify : StreamCompletion::kPoll;
  }
  compute_streams_ = options.compute_streams;
  copy_streams_ = options.copy_streams;
  channels_ = options.collective_channels;
  const AxisAllocator axes(options.machine);
  auto add = [&](std::uint32_t device, StreamKind kind, std::uint32_t index) {
    auto stream = std::make_unique<Stream>();
    stream->owner = this;
    stream->device = device;
    stream->kind = kind;
    stream->index = index;
    stream->axis = axes.allocate(kind == StreamKind::kCollective ? AxisDomain::kCollective : AxisDomain::kQueue);
    // A channel is an ordinary stream of device 0 to the backend.
    stream->handle = backend_->create_stream(static_cast<int>(device),
                                             kind == StreamKind::kCollective ? StreamKind::kCompute : kind);
    Stream& s = *streams_.emplace_back(std::move(stream));
    s.native = backend_->native_handle(s.handle);
    for (EventSlot& slot : s.ring) slot.event = backend_->create_event(static_cast<int>(device));
  };
  try {
    for (std::uint32_t device = 0; device < devices_; ++device) {
      for (const StreamKind kind : {StreamKind::kCompute, StreamKind::kCopy}) {
        for (std::uint32_t index = 0; index < streams(kind); ++index) add(device, kind, index);
      }
    }
    for (std::uint32_t index = 0; index < channels_; ++index) add(0, StreamKind::kCollective, index);
  } catch (...) {
    for (const auto& s : streams_) {
      for (EventSlot& slot : s->ring) backend_->destroy_event(slot.event);
      backend_->destroy_stream(s->handle);
    }
    throw;
  }
}

StreamExecutor::~StreamExecutor() {
  stop();
  for (const auto& s : streams_) {
    backend_->destroy_stream(s->handle);            // waits for its enqueued work and notifications
    for (const Stream::Stamps& left : s->stamps) {  // a failed stream's, or skipped ops' at the end: all have run
      (void)backend_->read_stamp(left.start);
      if (left.end) (void)backend_->read_stamp(left.end);
    }
    for (EventSlot& slot : s->ring) backend_->destroy_event(slot.event);
  }
  // Only now: a notification may still be inside post() (after its handler has already run on the io thread) until
  // destroy_stream has returned.
  io_.reset();
}

void StreamExecutor::start(ExecutorHost& host) {
  host_ = &host;
  for (const auto& s : streams_) s->tracked = host.tracker().register_axis(s->axis);
  io_ = std::make_unique<Io>();
  // The completion thread, where ops complete (ExecutorHost::complete_issued): told as worker -1, no worker of ours.
  const bool observed = host.observes_threads();
  io_->thread = std::thread([this, io = io_.get(), observed] {
    if (observed) host_->thread_started(*this, -1);
    io->context.run();
    if (observed) host_->thread_stopped(*this, -1);
  });
}

void StreamExecutor::stop() noexcept {
  if (io_ == nullptr || !io_->thread.joinable()) return;
  // Every op has retired, so every notification has been handled; run() returns once the last handler has. The
  // io_context itself stays until the destructor (see there).
  io_->guard.reset();
  io_->thread.join();
}

// --- Lookup ----------------------------------------------------------------------------------------------------

StreamExecutor::Stream* StreamExecutor::find(Axis axis) const noexcept {
  for (const auto& s : streams_) {
    if (s->axis == axis) return s.get();
  }
  return nullptr;
}

StreamExecutor::Stream* StreamExecutor::stream_at(std::uint32_t device, StreamKind kind,
                                                  std::uint32_t index) const noexcept {
  if (device >= devices_ || index >= streams(kind)) return nullptr;
  const std::size_t per_device = compute_streams_ + copy_streams_;
  if (kind == StreamKind::kCollective) return device == 0 ? streams_[devices_ * per_device + index].get() : nullptr;
  return streams_[device * per_device + (kind == StreamKind::kCompute ? 0 : compute_streams_) + index].get();
}

std::string StreamExecutor::axis_name(Axis axis) const {
  const Stream* s = find(axis);
  if (s == nullptr) return StreamFacet::axis_name(axis);
  const std::string kind(to_string(s->kind)), index = std::to_string(s->index);
  return s->kind == StreamKind::kCollective ? kind + " " + index
                                            : "d" + std::to_string(s->device) + " " + kind + " " + index;
}

DeviceWaits StreamExecutor::device_waits() const noexcept {
  const StreamStats sum = stats();
  return DeviceWaits{sum.waits_issued, sum.waits_elided + sum.waits_complete};
}

Axis StreamExecutor::axis(std::uint32_t device, StreamKind kind, std::uint32_t index) const {
  const Stream* s = stream_at(device, kind, index);
  if (s == nullptr) throw std::out_of_range("StreamExecutor::axis: no such stream");
  return s->axis;
}

StreamStats StreamExecutor::stats(std::uint32_t device, StreamKind kind, std::uint32_t index) const {
  Stream* s = stream_at(device, kind, index);
  if (s == nullptr) throw std::out_of_range("StreamExecutor::stats: no such stream");
  return StreamStats{read(s->ops_issued),
                     read(s->waits_issued),
                     read(s->waits_elided),
                     read(s->waits_complete),
                     read(s->notifications),
                     read(s->event_queries),
                     0};
}

StreamStats StreamExecutor::stats() const noexcept {
  StreamStats sum;
  for (const auto& s : streams_) {
    sum.ops_issued += read(s->ops_issued);
    sum.waits_issued += read(s->waits_issued);
    sum.waits_elided += read(s->waits_elided);
    sum.waits_complete += read(s->waits_complete);
    sum.notifications += read(s->notifications);
    sum.event_queries += read(s->event_queries);
  }
  sum.host_synchronizations = backend_->host_synchronizations();
  return sum;
}

// --- Issue -----------------------------------------------------------------------------------------------------

void StreamExecutor::submit(Task& task) noexcept {
  {
    std::lock_guard lock(queue_mutex_);
    if (draining_) {
      queue_.push(&task);  // the draining thread issues it, after what it is issuing now
      return;
    }
    draining_ = true;  // the queue is empty: a drainer leaves only once it has found it so, under this lock
  }
  Task* next = &task;
  while (next != nullptr) {
    issue_one(*next);
    std::lock_guard lock(queue_mutex_);
    next = queue_.pop();
    if (next == nullptr) draining_ = false;
  }
}

std::string StreamExecutor::placement_error(std::uint32_t device, StreamKind kind, std::int32_t stream) const {
  const std::uint32_t count = streams(kind);
  if (kind == StreamKind::kCollective && device != 0) {
    return "an op's context names device " + std::to_string(device) + " with kind collective; executor '" + name_ +
           "' keeps its " + std::to_string(count) + " collective channel(s) on device 0";
  }
  if (device < devices_ && count != 0 && (stream < 0 || static_cast<std::uint32_t>(stream) < count)) return {};
  const std::string which = stream >= 0 ? "stream " + std::to_string(stream) + " of kind " : "kind ";
  return "an op's context names device " + std::to_string(device) + ", " + which + std::string(to_string(kind)) +
         ", but executor '" + name_ + "' has " + std::to_string(devices_) + " device(s) with " + std::to_string(count) +
         " " + std::string(to_string(kind)) + " stream(s) each";
}

// The stream for `task` (see "Streams and contexts" in the header).
StreamExecutor::Stream* StreamExecutor::choose(const Task& task, const WaitFrontier& need) const {
  const StreamKind kind = task.stream_kind();
  const std::uint32_t count = streams(kind);
  // The engine refused a bad placement at the push (Engine::Push).
  assert(placement_error(task.device(), kind, task.stream()).empty() && "a task placed where no stream is");
  if (task.stream() >= 0) return stream_at(task.device(), kind, static_cast<std::uint32_t>(task.stream()));
  Stream* best = nullptr;
  bool best_free = false;
  std::size_t best_known = 0;
  std::uint64_t best_load = 0;
  for (std::uint32_t index = 0; index < count; ++index) {
    Stream* s = stream_at(task.device(), kind, index);
    // acquire: pairs with the release in fail_stream(); a failed stream is a last resort.
    if (s->failed.load(std::memory_order_acquire)) continue;
    const std::uint64_t done = host_->tracker().completed(s->tracked);
    const bool free = s->issued <= need.epoch(s->axis) || done >= s->issued;  // depended on, or idle
    std::size_t known = 0;
    for (const FrontierEntry& entry : need) known += s->knowledge.epoch(entry.axis) >= entry.epoch ? 1 : 0;
    const std::uint64_t load = s->issued > done ? s->issued - done : 0;
    const bool better = best == nullptr || (free && !best_free) ||
                        (free == best_free && (known > best_known || (known == best_known && load < best_load)));
    if (better) {
      best = s;
      best_free = free;
      best_known = known;
      best_load = load;
    }
  }
  return best != nullptr ? best : stream_at(task.device(), kind, 0);  // all failed: the op fails on stream 0
}

void StreamExecutor::wait_on(void* context, const WaitFrontier& entries) {
  Stream& stream = *static_cast<Stream*>(context);
  (void)stream.owner->issue_waits(stream, entries);
}

std::uint32_t StreamExecutor::issue_waits(Stream& stream, const WaitFrontier& need) {
  static_assert(kMaxEngineAxes <= 32, "the mask of waits issued has a bit per entry of a wait frontier");
  struct Pending {
    Stream* source;
    std::uint64_t epoch;
    const EventSlot* slot;
    std::uint32_t index;  // the entry's position in `need`
  };
  std::array<Pending, kMaxEngineAxes> pending;
  std::size_t count = 0;
  std::uint32_t index = 0;
  for (const FrontierEntry& entry : need) {
    const std::uint32_t position = index++;
    if (stream.knowledge.epoch(entry.axis) >= entry.epoch) {
      bump(stream.waits_elided);
      continue;
    }
    Stream* source = find(entry.axis);
    if (source == nullptr || host_->tracker().completed(source->tracked) >= entry.epoch) {
      bump(stream.waits_complete);  // another executor's entry: the engine handed the op over once it completed
      continue;
    }
    pending[count++] = Pending{source, entry.epoch, &source->ring[entry.epoch % kEventRing], position};
  }
  // Visit the waits whose events know most first: waiting on them may imply the others.
  std::sort(pending.begin(), pending.begin() + count,
            [](const Pending& a, const Pending& b) { return a.slot->knowledge.size() > b.slot->knowledge.size(); });
  std::uint32_t waited = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const Pending& wait = pending[i];
    if (stream.knowledge.epoch(wait.source->axis) >= wait.epoch) {
      bump(stream.waits_elided);
      continue;
    }
    // The slot holds this epoch's record, or a later one of the same stream (which covers it). It cannot hold an
    // earlier one: an epoch's event is recorded before the op's signal is released.
    backend_->wait(stream.handle, wait.slot->event);
    bump(stream.waits_issued);
    stream.knowledge.merge(wait.slot->knowledge);
    waited |= std::uint32_t{1} << wait.index;
  }
  return waited;
}

void StreamExecutor::issue_one(Task& task) noexcept {
  TaskList ready;
  const WaitFrontier& need = host_->requirement(task);
  std::exception_ptr error;
  Stream* stream = choose(task, need);
  if (stream->failed.load(std::memory_order_acquire)) error = stream->failure();  // see choose
  if (error == nullptr) {
    for (const FrontierEntry& entry : need) {  // an input whose stream failed before producing it
      Stream* source = find(entry.axis);
      // acquire: as in choose().
      if (source != nullptr && source->failed.load(std::memory_order_acquire) &&
          host_->tracker().completed(source->tracked) < entry.epoch) {
        error = source->failure();
        break;
      }
    }
  }
  std::uint32_t waited = 0;
  if (error == nullptr) {
    try {
      waited = issue_waits(*stream, need);
    } catch (...) {  // a backend failure while enqueuing the waits: the stream is broken
      fail_stream(*stream, std::current_exception());
      error = stream->failure();
    }
  }
  if (error != nullptr) {
    host_->skip(task, std::move(error), ready);
  } else {
    Stream& s = *stream;
    s.knowledge.merge_satisfied(need);
    const std::uint64_t epoch = s.issued + 1;
    s.knowledge.insert_or_raise(s.axis, epoch);
    const StreamPlacement where{.backend = backend_.get(),
                                .stream = s.handle,
                                .native = s.native,
                                .device = s.device,
                                .kind = s.kind,
                                .index = s.index,
                                .axis = s.axis,
                                .epoch = epoch,
                                .knowledge = &s.knowledge,
                                .wait = &StreamExecutor::wait_on,
                                .wait_context = &s};
    const TimeStamp started = host_->traced(task) ? stamp(s) : TimeStamp{};
    if (host_->issue(task, where, FrontierEntry{s.axis, epoch}, waited, ready)) {
      s.issued = epoch;
      bump(s.ops_issued);
      if (started) keep_stamps(s, epoch, started, stamp(s));
      enqueue_completion(s, task);
    } else if (started) {
      keep_stamps(s, epoch, started, TimeStamp{});  // epoch: the next op issued here, which completes after it
    }
  }
  // After the record: a successor on one of our streams may wait on this epoch's event.
  submit_in_priority_order(ready);
}

namespace {

// What a stream executor records for replay_recorded(): the backend's recorded work.
struct BackendRecording final : RecordedOps {
  explicit BackendRecording(RecordedWork recorded) noexcept : work(std::move(recorded)) {}
  RecordedWork work;
};

}  // namespace

void StreamExecutor::replay_recorded(const StreamPlacement& where, std::unique_ptr<RecordedOps>& recorded,
                                     void (*enqueue)(void* context), void* context) {
  if (recorded == nullptr) {
    backend_->begin_recording(where.stream);
    try {
      enqueue(context);
    } catch (...) {
      backend_->abandon_recording(where.stream);
      throw;
    }
    recorded = std::make_unique<BackendRecording>(backend_->end_recording(where.stream));
  }
  backend_->launch(static_cast<const BackendRecording&>(*recorded).work, where.stream);
}

// A stamp of the stream's progress for a traced op, or none if the backend failed to enqueue it (the trace then shows
// the op from its issue to its completion).
TimeStamp StreamExecutor::stamp(Stream& s) noexcept {
  try {
    return backend_->stamp(s.handle);
  } catch (...) {
    return TimeStamp{};
  }
}

void StreamExecutor::keep_stamps(Stream& s, std::uint64_t epoch, TimeStamp start, TimeStamp end) noexcept {
  try {
    std::lock_guard lock(s.mutex);
    s.stamps.push_back(Stream::Stamps{epoch, start, end});
  } catch (...) {  // out of memory: the slice is lost, and the stamps, which may not have run yet, are leaked
  }
}

// Records the epoch's event and makes sure a notification will cover it.
void StreamExecutor::enqueue_completion(Stream& s, Task& task) {
  const std::uint64_t epoch = s.issued;
  task.executor_word_ = epoch;
  EventSlot& slot = s.ring[epoch % kEventRing];
  try {
    backend_->record(s.handle, slot.event);
  } catch (...) {
    fail_stream(s, std::current_exception());
    host_->complete_issued(task, s.failure());
    return;
  }
  slot.epoch = epoch;
  slot.knowledge = s.knowledge;
  if (completion_ == StreamCompletion::kPoll) {
    {
      std::lock_guard lock(s.mutex);
      s.in_flight.push_back(&task);
      s.visible = epoch;
    }
    // seq_cst: the issuer's half of the Dekker pair with poll() (see outstanding_).
    outstanding_.fetch_add(1, std::memory_order_seq_cst);
    start_polling();
    return;
  }
  {
    std::lock_guard lock(s.mutex);
    s.in_flight.push_back(&task);
    s.visible = epoch;
  }
  // One notification per op, enqueued right behind its event: a notification shared with ops issued later would reach
  // the engine only once they had run too, holding back this op's CPU successors for as long as that later work takes.
  bump(s.notifications);
  try {
    backend_->notify(s.handle, &StreamExecutor::notified, &s);
  } catch (...) {  // no notification will come: retire what it was to cover, with the error
    fail_stream(s, std::current_exception());
    on_notified(s, 1);
  }
}

void StreamExecutor::fail_stream(Stream& s, const std::exception_ptr& error) noexcept {
  {
    std::lock_guard lock(s.mutex);
    if (s.error != nullptr) return;
    s.error = error;
  }
  // release: pairs with the acquire loads in choose() and issue_one(), which then read `error` under the mutex.
  s.failed.store(true, std::memory_order_release);
}

// --- Completion ------------------------------------------------------------------------------------------------

// On a backend thread: hand the notification to the io thread (a notification must not call the backend; failing the
// stream does not). Notifications of every stream are counted and handled together (see notified_posted_).
void StreamExecutor::notified(void* context, std::exception_ptr error) noexcept {
  Stream* s = static_cast<Stream*>(context);
  StreamExecutor* self = s->owner;
  if (error != nullptr) self->fail_stream(*s, error);
  // seq_cst both: the arrival's half of the Dekker pair with handle_notifications().
  s->arrived.fetch_add(1, std::memory_order_seq_cst);
  if (self->notified_posted_.exchange(true, std::memory_order_seq_cst)) return;
  boost::asio::post(self->io_->context, [self] { self->handle_notifications(); });
}

// On the io thread: every notification arrived since the last call, stream by stream.
void StreamExecutor::handle_notifications() noexcept {
  // seq_cst both: the handler's half of the Dekker pair (see notified_posted_).
  notified_posted_.store(false, std::memory_order_seq_cst);
  for (const auto& s : streams_) {
    const std::uint64_t count = s->arrived.exchange(0, std::memory_order_seq_cst);
    if (count != 0) on_notified(*s, count);
  }
}

// On the io thread (or on the issuing thread when requesting a notification failed): retire the ops of the next
// `count` epochs, whose notifications these are (notifications arrive in the order they were enqueued, one per epoch).
// Once the stream has failed (a notification carried an error, or one could not be requested), nothing issued on it
// will succeed any more: every op in flight retires with the error (an op whose notification arrived in the same batch
// before the failing one is blamed too); the notifications still to come then find nothing left to retire.
void StreamExecutor::on_notified(Stream& s, std::uint64_t count) noexcept {
  TaskList done;
  std::uint64_t covered = 0;
  bool stamped = false;
  {
    std::lock_guard lock(s.mutex);
    s.notified += count;
    covered = s.error != nullptr ? std::max(s.notified, s.visible) : s.notified;
    while (s.in_flight.front() != nullptr && s.in_flight.front()->executor_word_ <= covered) {
      done.push_back(s.in_flight.pop_front());
    }
    stamped = !s.stamps.empty();  // see retire()
  }
  if (!done.empty()) retire(s, done, covered, stamped);
}

// Retires `done` (ops up to epoch `covered`, in order): advances the tracker, or fails the axis if the stream failed.
// `stamped`: the stream held traced ops' stamps when `done` was taken off it, under the same lock. The stamps of the
// ops in `done` were kept before those ops were put in flight, so without any there are none to read.
void StreamExecutor::retire(Stream& s, TaskList& done, std::uint64_t covered, bool stamped) noexcept {
  // acquire: pairs with the release in fail_stream().
  const std::exception_ptr failure = s.failed.load(std::memory_order_acquire) ? s.failure() : nullptr;
  if (failure == nullptr) {
    // Ops first, then the axis: a WaitForVar woken by the advance finds their signal fences raised.
    while (Task* task = done.pop_front()) {
      if (stamped) report_stamps(s, *task);
      host_->complete_issued(*task, nullptr);
    }
    host_->tracker().advance(s.tracked, covered);
  } else {
    // Errors first, so that a WaitForVar woken by the failed axis finds the error already noted.
    while (Task* task = done.pop_front()) host_->complete_issued(*task, failure);
    host_->tracker().fail(s.axis, failure);
  }
}

// Reads the stamps of `task` (and of skipped ops before it) and reports when it ran on the device. Only for a stream
// that has not failed: its completion reported, in stream order, everything up to the task's epoch, stamps included.
// (A failed stream retires ops whose stamps may not have run yet: they are read once it is destroyed.)
void StreamExecutor::report_stamps(Stream& s, Task& task) noexcept {
  const std::uint64_t epoch = task.executor_word_;
  for (;;) {
    Stream::Stamps front{};
    {
      std::lock_guard lock(s.mutex);
      if (s.stamps.empty() || s.stamps.front().epoch > epoch) return;
      front = s.stamps.front();
      s.stamps.pop_front();
    }
    const std::int64_t start = backend_->read_stamp(front.start);
    if (!front.end) continue;  // a skipped op's
    const std::int64_t end = backend_->read_stamp(front.end);
    if (front.epoch == epoch && start >= 0 && end >= start) host_->ran_on_device(task, start, end);
  }
}

// --- Completion by polling (kPoll) -----------------------------------------------------------------------------

void StreamExecutor::start_polling() noexcept {
  // seq_cst: the issuer's half of the Dekker pair (see outstanding_); exactly one claimant posts the poll.
  if (polling_.exchange(true, std::memory_order_seq_cst)) return;
  boost::asio::post(io_->context, [this] { poll(0); });
}

// Retires the ops of `s` whose events have completed, oldest first. Returns whether it retired any. Queries the
// newest op's event first: when the stream has caught up (the common case for a short queue), one query retires all.
bool StreamExecutor::poll_stream(Stream& s) noexcept {
  TaskList done;
  std::uint64_t covered = 0;
  std::uint64_t newest = 0;
  {
    std::lock_guard lock(s.mutex);
    if (s.in_flight.empty()) return false;
    newest = s.visible;
  }
  bool newest_done = false;
  try {
    bump(s.event_queries);
    newest_done = backend_->try_query(s.ring[newest % kEventRing].event);
  } catch (...) {  // a failure: the walk below finds which ops it takes
  }
  bool stamped = false;  // see retire()
  if (newest_done) {     // every op up to it has completed: one lock takes them all
    std::lock_guard lock(s.mutex);
    while (s.in_flight.front() != nullptr && s.in_flight.front()->executor_word_ <= newest) {
      covered = s.in_flight.front()->executor_word_;
      done.push_back(s.in_flight.pop_front());
    }
    stamped = !s.stamps.empty();
  }
  while (!newest_done) {
    Task* front = nullptr;
    {
      std::lock_guard lock(s.mutex);
      front = s.in_flight.front();
    }
    if (front == nullptr) break;
    // The slot of the op's epoch holds its record or a later one of the same stream (complete implies this one is).
    const EventSlot& slot = s.ring[front->executor_word_ % kEventRing];
    bump(s.event_queries);
    bool complete = false;
    try {
      complete = backend_->try_query(slot.event);
    } catch (...) {  // the device failed: this op and everything after it on the stream fail
      fail_stream(s, std::current_exception());
      std::lock_guard lock(s.mutex);
      while (Task* task = s.in_flight.pop_front()) done.push_back(task);
      complete = false;
    }
    if (!complete) break;
    {
      std::lock_guard lock(s.mutex);
      done.push_back(s.in_flight.pop_front());
      stamped = stamped || !s.stamps.empty();
    }
    covered = front->executor_word_;
  }
  if (done.empty()) return false;
  std::uint64_t count = 0;
  for (Task* task = done.front(); task != nullptr; task = task->next_) ++count;
  if (covered == 0) covered = host_->tracker().completed(s.tracked);  // failed before anything completed
  retire(s, done, covered, stamped);
  // relaxed: the count only decides whether to keep polling; the Dekker pair is closed with seq_cst in poll().
  outstanding_.fetch_sub(count, std::memory_order_relaxed);
  return true;
}

// Whether anyone waits for a completion now: a CPU successor or a WaitForVar parked on one of our axes.
bool StreamExecutor::awaited() const noexcept {
  for (const auto& s : streams_) {
    if (host_->tracker().has_waiters(s->tracked)) return true;
  }
  return false;
}

// One round over every stream; then, while someone waits for a completion, again at once (for kIdlePolls rounds
// without progress), else after kPollInterval; not at all when nothing is in flight.
void StreamExecutor::poll(int idle_rounds) noexcept {
  bool progress = false;
  for (const auto& s : streams_) progress = poll_stream(*s) || progress;
  // seq_cst: the poller's half of the Dekker pair (see outstanding_).
  if (outstanding_.load(std::memory_order_seq_cst) == 0) {
    polling_.store(false, std::memory_order_seq_cst);
    if (outstanding_.load(std::memory_order_seq_cst) == 0 || polling_.exchange(true, std::memory_order_seq_cst)) {
      return;  // nothing in flight, or an issuer has started polling again
    }
  }
  idle_rounds = progress ? 0 : idle_rounds + 1;
  if (awaited() && idle_rounds < kIdlePolls) {
    boost::asio::post(io_->context, [this, idle_rounds] { poll(idle_rounds); });
    return;
  }
  io_->timer.expires_after(kPollInterval);
  io_->timer.async_wait([this, idle_rounds](const boost::system::error_code&) { poll(idle_rounds); });
}

}  // namespace depengine
