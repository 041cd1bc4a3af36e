// Observers: an OpEvent from an op's record or replayed op, handed to every observer in registration order.
#include <chrono>
#include <string_view>
#include <utility>

#include <depengine/engine/detail/observers.h>

namespace depengine::detail {
namespace {

// The index in the plan of replayed op `op`.
std::uint32_t index_of(const GraphOp& op) noexcept { return static_cast<std::uint32_t>(&op - op.instance->ops.get()); }

}  // namespace

Observers::Observers(std::vector<Observer*> observers, bool statistics,
                     const std::vector<std::unique_ptr<Executor>>& executors)
    : list_(std::move(observers)), executors_(executors) {
  if (statistics) {
    statistics_ = std::make_unique<OpStatistics>();
    list_.push_back(statistics_.get());
  }
  for (const Observer* observer : list_) timed_ = timed_ || observer->Timed();
}

std::int64_t Observers::now() const noexcept {
  if (!timed_) return 0;
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::uint32_t Observers::index_of(const Executor* executor) const noexcept {
  std::uint32_t index = 0;
  while (index < executors_.size() && executors_[index].get() != executor) ++index;
  return index;
}

OpEvent Observers::event_of(const OpRecord& op) const noexcept {
  OpEvent event;
  event.id = op.observed.id;
  event.name = op.name_view();
  event.executor = index_of(op.executor());
  event.pushed_at = op.observed.pushed_at;
  event.ready_at = op.observed.ready_at;
  event.started_at = op.observed.started_at;
  event.worker = op.observed.worker;
  if (op.observed.stream) {
    event.stream = op.issued_at.axis;
    event.epoch = op.issued_at.epoch;
    event.device = op.device();
  }
  return event;
}

OpEvent Observers::event_of(const GraphOp& op) const noexcept {
  const GraphInstance& instance = *op.instance;
  const std::uint32_t index = detail::index_of(op);
  const ObservedOp& observed = instance.observed[index];
  OpEvent event;
  event.id = observed.id;
  event.name = instance.plan.op(index).name_view();
  event.executor = index_of(op.executor());
  event.replay = instance.replay;
  event.pushed_at = observed.pushed_at;
  event.ready_at = observed.ready_at;
  event.started_at = observed.started_at;
  event.worker = observed.worker;
  return event;
}

void Observers::pushed(OpRecord& op) noexcept {
  // relaxed: only uniqueness; the op's hand-offs carry the id to its later events.
  op.observed = ObservedOp{next_id_.fetch_add(1, std::memory_order_relaxed), now(), 0, 0, -1, false, false};
}

void Observers::ready(OpRecord& op) noexcept {
  if (op.internal || op.observed.readied) return;
  op.observed.readied = true;
  op.observed.ready_at = now();
  const OpEvent event = event_of(op);
  for (Observer* observer : list_) observer->OnReady(event);
}

void Observers::started(OpRecord& op, int worker, bool stream) noexcept {
  if (op.internal) return;
  op.observed.started_at = now();
  op.observed.worker = worker;
  op.observed.stream = stream;
  const OpEvent event = event_of(op);
  for (Observer* observer : list_) observer->OnStart(event);
}

void Observers::ended(OpRecord& op, OpOutcome outcome, const std::exception_ptr* error) noexcept {
  if (op.internal) return;
  OpEvent event = event_of(op);
  event.ended_at = now();
  event.outcome = outcome;
  event.error = error;
  for (Observer* observer : list_) observer->OnEnd(event);
}

void Observers::replayed(GraphInstance& instance) {
  const std::size_t count = instance.plan.size();
  if (instance.observed == nullptr) instance.observed = std::make_unique<ObservedOp[]>(count);
  // relaxed: only uniqueness, as in pushed().
  const std::uint64_t first = next_id_.fetch_add(count, std::memory_order_relaxed);
  const std::int64_t at = now();
  for (std::size_t i = 0; i < count; ++i) instance.observed[i] = ObservedOp{first + i, at, 0, 0, -1, false};
}

void Observers::ready(GraphOp& op) noexcept {
  op.instance->observed[detail::index_of(op)].ready_at = now();
  const OpEvent event = event_of(op);
  for (Observer* observer : list_) observer->OnReady(event);
}

void Observers::started(GraphOp& op, int worker) noexcept {
  ObservedOp& observed = op.instance->observed[detail::index_of(op)];
  observed.started_at = now();
  observed.worker = worker;
  const OpEvent event = event_of(op);
  for (Observer* observer : list_) observer->OnStart(event);
}

void Observers::ended(GraphOp& op, OpOutcome outcome, const std::exception_ptr* error) noexcept {
  OpEvent event = event_of(op);
  event.ended_at = now();
  event.outcome = outcome;
  event.error = error;
  for (Observer* observer : list_) observer->OnEnd(event);
}

ThreadEvent Observers::thread_event(const Executor& executor, int worker) const noexcept {
  return ThreadEvent{index_of(&executor), executor.name(), worker};
}

void Observers::thread_started(const Executor& executor, int worker) noexcept {
  const ThreadEvent event = thread_event(executor, worker);
  for (Observer* observer : list_) observer->OnThreadStart(event);
}

void Observers::thread_stopped(const Executor& executor, int worker) noexcept {
  const ThreadEvent event = thread_event(executor, worker);
  for (Observer* observer : list_) observer->OnThreadStop(event);
}

}  // namespace depengine::detail
