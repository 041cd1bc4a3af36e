// Observers: an OpEvent from an op's record or replayed op, handed to every observer in registration order.
#include <algorithm>
#include <string_view>
#include <utility>

#include <depengine/engine/detail/observers.h>

namespace depengine::detail {
namespace {

// The op whose end this thread told last (a pushed op's record or a replayed GraphOp), and that end's time: the ready
// time of the ops its completion makes ready on this thread (ready_time). Cleared by an internal op's end, whose
// record may have been a user op's whose end this thread told.
struct LastEnd {
  const void* op = nullptr;
  std::int64_t at = 0;
};
thread_local LastEnd t_last_end;

// The op this thread made ready at its push, in a push that has not returned, and its push time: if the push runs it
// here (an inline executor, work-first), its start time (started()). Cleared by that start or the op's end, and by
// pushed_done(), so that neither a later start of the op by this thread (a waiting thread that helps a pool) nor
// another op in the same record takes it.
thread_local LastEnd t_ready_here;

// The index in the plan of replayed op `op`.
std::uint32_t index_of(const GraphOp& op) noexcept { return static_cast<std::uint32_t>(&op - op.instance->ops.get()); }

}  // namespace

Observers::Observers(std::vector<Observer*> observers, bool statistics,
                     const std::vector<std::unique_ptr<Executor>>& executors)
    : list_(std::move(observers)),
      timed_(statistics || std::any_of(list_.begin(), list_.end(), [](const Observer* o) { return o->Timed(); })),
      clock_(timed_),
      statistics_(statistics ? std::make_unique<OpStatistics>() : nullptr),
      executors_(executors) {}

std::uint32_t Observers::index_of(const Executor* executor) const noexcept {
  std::uint32_t index = 0;
  while (index < executors_.size() && executors_[index].get() != executor) ++index;
  return index;
}

// Each field written once, in one aggregate: a default-made OpEvent followed by assignments had the compiler clear its
// 112 bytes first (a rep stos, slow to start), three times per op.
OpEvent Observers::event_of(const OpRecord& op) const noexcept {
  const bool stream = op.observed.stream;
  return OpEvent{.id = op.observed.id,
                 .name = op.name_view(),
                 .executor = index_of(op.executor()),
                 .replay = -1,
                 .pushed_at = op.observed.pushed_at,
                 .ready_at = op.observed.ready_at,
                 .started_at = op.observed.started_at,
                 .ended_at = 0,
                 .worker = op.observed.worker,
                 .stream = stream ? op.issued_at.axis : Axis{},
                 .epoch = stream ? op.issued_at.epoch : 0,
                 .device = stream ? op.device() : 0,
                 .outcome = OpOutcome::kRan,
                 .error = nullptr};
}

OpEvent Observers::event_of(const GraphOp& op) const noexcept {
  const GraphInstance& instance = *op.instance;
  const std::uint32_t index = detail::index_of(op);
  const ObservedOp& observed = instance.observed[index];
  return OpEvent{.id = observed.id,
                 .name = instance.plan.name_of(instance.plan.op(index)),
                 .executor = index_of(op.executor()),
                 .replay = instance.replay,
                 .pushed_at = observed.pushed_at,
                 .ready_at = observed.ready_at,
                 .started_at = observed.started_at,
                 .ended_at = 0,
                 .worker = observed.worker,
                 .stream = Axis{},
                 .epoch = 0,
                 .device = 0,
                 .outcome = OpOutcome::kRan,
                 .error = nullptr};
}

void Observers::pushed(OpRecord& op) noexcept {
  // relaxed: only uniqueness; the op's hand-offs carry the id to its later events. Statistics alone read no ids.
  const std::uint64_t id = list_.empty() ? 0 : next_id_.fetch_add(1, std::memory_order_relaxed);
  op.observed = ObservedOp{id, now(), 0, 0, -1, false, false};
}

void Observers::admitted(OpRecord& op) noexcept {
  if (!op.internal) op.observed.ready_at = now();
}

std::int64_t Observers::ready_time(const void* completed) const noexcept {
  if (completed != nullptr && t_last_end.op == completed) return t_last_end.at;
  return now();
}

void Observers::tell_ready(const OpEvent& event) const noexcept {
  for (Observer* observer : list_) observer->OnReady(event);
}

void Observers::tell_end(const OpEvent& event) const noexcept {
  for (Observer* observer : list_) observer->OnEnd(event);
  if (statistics_ != nullptr) statistics_->OnEnd(event);
}

void Observers::ready_at_push(OpRecord& op) noexcept {
  if (op.internal || op.observed.readied) return;
  op.observed.readied = true;
  if (op.observed.ready_at == 0) op.observed.ready_at = op.observed.pushed_at;  // else admitted() stamped it
  t_ready_here = LastEnd{&op, op.observed.ready_at};
  if (!list_.empty()) tell_ready(event_of(op));
}

void Observers::pushed_done() noexcept { t_ready_here = LastEnd{}; }

void Observers::ready(OpRecord& op, const void* completed) noexcept {
  if (op.internal || op.observed.readied) return;
  op.observed.readied = true;
  // Never before its push, nor before its admission under the bound (admitted()): a completion may have ended before
  // the op was published and granted it after.
  op.observed.ready_at = std::max({ready_time(completed), op.observed.pushed_at, op.observed.ready_at});
  if (!list_.empty()) tell_ready(event_of(op));
}

void Observers::started(OpRecord& op, int worker, bool stream) noexcept {
  if (op.internal) return;
  if (t_ready_here.op == &op) {
    op.observed.started_at = t_ready_here.at;
    t_ready_here = LastEnd{};  // used: the record may carry another op before this push returns
  } else {
    op.observed.started_at = now();
  }
  // The record's previous op may be the one this thread last ended: that end is no ready time for this op's
  // successors (a stream op releases them at its issue, before its end).
  if (t_last_end.op == &op) t_last_end = LastEnd{};
  op.observed.worker = worker;
  op.observed.stream = stream;
  if (list_.empty()) return;
  const OpEvent event = event_of(op);
  for (Observer* observer : list_) observer->OnStart(event);
}

void Observers::ended(OpRecord& op, OpOutcome outcome, const std::exception_ptr* error) noexcept {
  if (op.internal) {
    t_last_end = LastEnd{};
    return;
  }
  if (t_ready_here.op == &op) t_ready_here = LastEnd{};  // stopped before it ran: see started()
  OpEvent event = event_of(op);
  event.ended_at = now();
  event.outcome = outcome;
  event.error = error;
  t_last_end = LastEnd{&op, event.ended_at};
  tell_end(event);
}

void Observers::replayed(GraphInstance& instance) {
  const std::size_t count = instance.plan.size();
  if (instance.observed == nullptr) instance.observed = std::make_unique<ObservedOp[]>(count);
  // relaxed: only uniqueness, as in pushed().
  const std::uint64_t first = next_id_.fetch_add(count, std::memory_order_relaxed);
  const std::int64_t at = now();
  for (std::size_t i = 0; i < count; ++i) instance.observed[i] = ObservedOp{first + i, at, 0, 0, -1, false};
}

void Observers::ready_at_push(GraphOp& op) noexcept {
  ObservedOp& observed = op.instance->observed[detail::index_of(op)];
  observed.ready_at = observed.pushed_at;
  if (!list_.empty()) tell_ready(event_of(op));
}

void Observers::ready(GraphOp& op, const void* completed) noexcept {
  ObservedOp& observed = op.instance->observed[detail::index_of(op)];
  observed.ready_at = std::max(ready_time(completed), observed.pushed_at);
  if (!list_.empty()) tell_ready(event_of(op));
}

void Observers::started(GraphOp& op, int worker) noexcept {
  ObservedOp& observed = op.instance->observed[detail::index_of(op)];
  observed.started_at = now();
  observed.worker = worker;
  if (list_.empty()) return;
  const OpEvent event = event_of(op);
  for (Observer* observer : list_) observer->OnStart(event);
}

void Observers::ended(GraphOp& op, OpOutcome outcome, const std::exception_ptr* error) noexcept {
  OpEvent event = event_of(op);
  event.ended_at = now();
  event.outcome = outcome;
  event.error = error;
  t_last_end = LastEnd{&op, event.ended_at};
  tell_end(event);
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
