#include <algorithm>
#include <array>
#include <map>
#include <utility>

#include <depengine/engine/detail/engine_trace.h>
#include <depengine/engine/detail/graph_plan.h>
#include <depengine/engine/detail/var_table.h>
#include <depengine/engine/errors.h>

namespace depengine::detail {
namespace {

// The op's variables, as trace labels: "v<slot>", with ".<n>" for the slot's n-th reincarnation.
void describe_uses(const OpRecord& op, TraceRecorder::Slice& slice) {
  for (std::uint32_t i = 0; i < op.num_uses; ++i) {
    const VarUse& use = op.uses[i];
    std::string& out = use.access == Access::kRead ? slice.reads : slice.mutates;
    if (!out.empty()) out += ' ';
    out += 'v' + std::to_string(state_of(use)->slot);
    if (use.tag != 0) out += '.' + std::to_string(use.tag);
  }
}

std::string name_of(const OpRecord& op) { return std::string(op.named ? op.name.view() : "op"); }

// A variable's trace label: "v<slot>", with ".<n>" for the slot's n-th reincarnation.
void append_var(std::string& out, const VarState* var, std::uint32_t tag) {
  if (!out.empty()) out += ' ';
  out += 'v' + std::to_string(var->slot);
  if (tag != 0) out += '.' + std::to_string(tag);
}

// A use as the wait reasons compare them, from an op record's or a plan's uses.
struct SeenUse {
  const VarState* var;
  std::uint32_t tag;
  Access access;
};
std::vector<SeenUse> seen_uses(const OpRecord& op) {
  std::vector<SeenUse> uses;
  for (std::uint32_t i = 0; i < op.num_uses; ++i)
    uses.push_back({state_of(op.uses[i]), op.uses[i].tag, op.uses[i].access});
  return uses;
}
std::vector<SeenUse> seen_uses(const GraphPlan& plan, const GraphPlan::Op& op) {
  std::vector<SeenUse> uses;
  const GraphPlan::Use* planned = plan.uses(op);
  for (std::uint32_t i = 0; i < op.uses.end - op.uses.begin; ++i) {
    uses.push_back({planned[i].var, planned[i].tag, planned[i].access});
  }
  return uses;
}

// The variables through which an op using `from` can have held back one using `to`: those both use, one of them not
// only reading. (A queue grants a reader behind a writer, and a writer behind readers and a writer.)
std::string ordering_vars(const std::vector<SeenUse>& from, const std::vector<SeenUse>& to) {
  std::string out;
  for (const SeenUse& a : from) {
    for (const SeenUse& b : to) {
      if (a.var == b.var && (a.access != Access::kRead || b.access != Access::kRead)) append_var(out, a.var, a.tag);
    }
  }
  return out;
}

// The op raising or promising its signal fences on this thread (EngineTrace::FenceRaiser), or null.
thread_local const OpRecord* t_raising = nullptr;

// Draws an arrow to op `to` from each stream op it was ordered after directly: the op recorded at each entry of its
// wait frontier `need`, unless another of those ops was itself ordered after that entry (a frontier is transitive:
// the arrow would only repeat a path through that op). `kind(i)` says how the dependency on entry i was kept.
template <class Kind>
void frontier_arrows(TraceRecorder& trace, const WaitFrontier& need, std::uint64_t to, Kind&& kind) {
  std::array<const TraceRecorder::Issued*, kMaxEngineAxes> from{};
  std::size_t count = 0;
  for (const FrontierEntry& entry : need) from[count++] = trace.issued_at(entry.axis, entry.epoch);
  std::uint32_t position = 0;
  for (const FrontierEntry& entry : need) {
    const std::uint32_t i = position++;
    if (from[i] == nullptr) continue;
    const bool implied = std::any_of(from.begin(), from.begin() + count, [&](const TraceRecorder::Issued* other) {
      return other != nullptr && other != from[i] && other->requirement.epoch(entry.axis) >= entry.epoch;
    });
    if (!implied) trace.flow(from[i]->op, to, kind(i));
  }
}

}  // namespace

std::string EngineTrace::env_path(const std::string& path) {
  static std::mutex mutex;
  static std::map<std::string, std::uint32_t> engines;  // per path, engines traced to it so far
  std::lock_guard lock(mutex);
  const std::uint32_t nth = ++engines[path];
  return nth == 1 ? path : path + "." + std::to_string(nth);
}

void EngineTrace::start(std::string path) {
  std::lock_guard lock(mutex_);
  // relaxed: mutex_ orders starts and stops.
  if (const TraceRecorder* on = current_.load(std::memory_order_relaxed); on != nullptr) {
    throw Error("StartTrace: a trace is already on (to '" + on->path() + "')");
  }
  TraceRecorder* recorder = recorders_.emplace_back(std::make_unique<TraceRecorder>(std::move(path))).get();
  // release: pairs with the acquire in recorder(), whose callers then see it constructed.
  current_.store(recorder, std::memory_order_release);
}

TraceRecorder& EngineTrace::stop_begin() {
  std::lock_guard lock(mutex_);
  TraceRecorder* recorder = current_.load(std::memory_order_relaxed);  // relaxed: mutex_ orders starts and stops
  if (recorder == nullptr) throw Error("StopTrace: no trace is on");
  return *recorder;
}

void EngineTrace::stop_end() noexcept {
  std::lock_guard lock(mutex_);
  current_.store(nullptr, std::memory_order_relaxed);  // relaxed: nothing is published by clearing it
}

void EngineTrace::cpu_op(const OpRecord& op, int worker, std::int64_t start, std::size_t in_flight,
                         const WaitFrontier* waited_for) noexcept {
  TraceRecorder* trace = recorder();
  if (trace == nullptr) return;
  try {
    TraceRecorder::Slice slice{op.trace_op, name_of(op), trace->thread_lane(op.executor()->name(), worker), start,
                               trace->now()};
    describe_uses(op, slice);
    trace->slice(std::move(slice), static_cast<std::int64_t>(in_flight));
    if (waited_for != nullptr) {
      frontier_arrows(*trace, *waited_for, op.trace_op, [](std::uint32_t) { return TraceRecorder::Flow::kHostWait; });
    }
  } catch (...) {  // out of memory while tracing: the trace misses this op, the op is unaffected
  }
}

void EngineTrace::replayed_op(const GraphPlan& plan, const GraphPlan::Op& op, std::uint64_t id, std::int64_t replay,
                              Executor* executor, int worker, std::int64_t start, std::size_t in_flight) noexcept {
  TraceRecorder* trace = recorder();
  if (trace == nullptr) return;
  try {
    TraceRecorder::Slice slice{
        id, std::string(op.named ? plan.name_of(op) : "op") + " (replay " + std::to_string(replay) + ")",
        trace->thread_lane(executor->name(), worker), start, trace->now()};
    const GraphPlan::Use* uses = plan.uses(op);
    for (std::uint32_t i = 0; i < op.uses.end - op.uses.begin; ++i) {
      std::string& out = uses[i].access == Access::kRead ? slice.reads : slice.mutates;
      if (!out.empty()) out += ' ';
      out += 'v' + std::to_string(uses[i].var->slot);
      if (uses[i].tag != 0) out += '.' + std::to_string(uses[i].tag);
    }
    trace->slice(std::move(slice), static_cast<std::int64_t>(in_flight));
  } catch (...) {  // as in cpu_op
  }
}

void EngineTrace::replay_release(const GraphPlan& plan, std::uint32_t from, std::uint32_t to,
                                 std::uint64_t traced) noexcept {
  TraceRecorder* trace = recorder();
  if (trace == nullptr) return;
  try {
    const std::int64_t at = trace->now();
    TraceRecorder::Waited why{TraceRecorder::Wait::kVariable, traced + from,
                              ordering_vars(seen_uses(plan, plan.op(from)), seen_uses(plan, plan.op(to)))};
    why.holder = std::string(plan.name_of(plan.op(from)));
    trace->ready(traced + to, at, std::move(why), true);
  } catch (...) {  // as in cpu_op
  }
}

void EngineTrace::join_release(std::uint64_t from, std::uint64_t to, const VarState* var, std::uint32_t tag) noexcept {
  TraceRecorder* trace = recorder();
  if (trace == nullptr) return;
  try {
    const std::int64_t at = trace->now();
    TraceRecorder::Waited why{TraceRecorder::Wait::kVariable, from};
    append_var(why.what, var, tag);
    trace->ready(to, at, std::move(why), true);
  } catch (...) {  // as in cpu_op
  }
}

void EngineTrace::pushed(const OpRecord& op) noexcept {
  TraceRecorder* trace = recorder();
  if (trace == nullptr) return;
  try {
    trace->pushed(op.trace_op, trace->now(), op.async);
  } catch (...) {  // as in cpu_op
  }
}

void EngineTrace::ready_at_push(const OpRecord& op, bool bound) noexcept {
  TraceRecorder* trace = recorder();
  if (trace == nullptr) return;
  try {
    trace->ready(op.trace_op, trace->now(),
                 TraceRecorder::Waited{bound ? TraceRecorder::Wait::kBound : TraceRecorder::Wait::kNone});
  } catch (...) {  // as in cpu_op
  }
}

void EngineTrace::fence_reached(const OpRecord& op, const Fence& fence) noexcept {
  TraceRecorder* trace = recorder();
  if (trace == nullptr) return;
  try {
    TraceRecorder::Waited why{TraceRecorder::Wait::kFence};
    why.what = "fence value " + std::to_string(fence.value);
    if (t_raising != nullptr && t_raising->trace_op != 0) {
      why.from = t_raising->trace_op;
      why.holder = std::string(t_raising->name_view());
    }
    trace->ready(op.trace_op, trace->now(), std::move(why));
  } catch (...) {  // as in cpu_op
  }
}

void EngineTrace::unparked(const OpRecord& op) noexcept {
  TraceRecorder* trace = recorder();
  if (trace == nullptr) return;
  try {
    // The latest stream op its wait frontier names (the others are most often implied by it: a frontier is
    // transitive), for an op granted at its push, after that op's issue.
    std::uint64_t from = 0;
    for (const FrontierEntry& entry : op.requirement) {
      if (const TraceRecorder::Issued* issued = trace->issued_at(entry.axis, entry.epoch); issued != nullptr) {
        from = std::max(from, issued->op);
      }
    }
    trace->unparked(op.trace_op, trace->now(), from);
  } catch (...) {  // as in cpu_op
  }
}

void EngineTrace::replay_pushed(const GraphPlan& plan, std::uint64_t first) noexcept {
  TraceRecorder* trace = recorder();
  if (trace == nullptr) return;
  try {
    const std::int64_t at = trace->now();
    for (std::uint32_t i = 0; i < plan.size(); ++i) trace->pushed(first + i, at, plan.op(i).async);
  } catch (...) {  // as in cpu_op
  }
}

void EngineTrace::replay_ready(std::uint64_t first, const GraphOp* ops, const TaskList& ready) noexcept {
  TraceRecorder* trace = recorder();
  if (trace == nullptr) return;
  try {
    const std::int64_t at = trace->now();
    for (const Task* task = ready.front(); task != nullptr; task = task->next_) {
      const auto index = static_cast<std::uint64_t>(static_cast<const GraphOp*>(task) - ops);
      trace->ready(first + index, at, TraceRecorder::Waited{TraceRecorder::Wait::kNone});
    }
  } catch (...) {  // as in cpu_op
  }
}

EngineTrace::FenceRaiser::FenceRaiser(const OpRecord* op) noexcept : outer_(t_raising) { t_raising = op; }
EngineTrace::FenceRaiser::~FenceRaiser() { t_raising = outer_; }

std::string EngineTrace::critical_path() {
  TraceRecorder* on = recorder();
  if (on != nullptr) return on->critical_path();
  std::lock_guard lock(mutex_);
  if (recorders_.empty()) throw Error("TraceCriticalPath: no trace was recorded (StartTrace, or DEPENGINE_TRACE)");
  return recorders_.back()->critical_path();
}

void EngineTrace::stream_issue(OpRecord& op, FrontierEntry signal, std::uint32_t waited) noexcept {
  TraceRecorder* trace = recorder();
  if (trace == nullptr) return;
  op.trace_start = trace->now();
  op.ran_start = op.ran_end = -1;
  try {
    op.trace_lane = trace->stream_lane(signal.axis, *op.executor());
    trace->stream_epoch(signal.axis, signal.epoch, op.trace_op, op.requirement);
    frontier_arrows(*trace, op.requirement, op.trace_op, [waited](std::uint32_t i) {
      return ((waited >> i) & 1U) != 0 ? TraceRecorder::Flow::kDeviceWait : TraceRecorder::Flow::kElided;
    });
  } catch (...) {  // out of memory for a new lane: the trace misses this op, the op is unaffected
    op.trace_op = 0;
  }
}

void EngineTrace::stream_op(const OpRecord& op, std::size_t in_flight,
                            std::span<const std::unique_ptr<Executor>> executors) noexcept {
  TraceRecorder* trace = recorder();
  if (trace == nullptr) return;
  try {
    // When the stream ran the op's work, if its executor stamped it; else from its issue to its completion's report.
    const bool ran = op.ran_start >= 0;
    TraceRecorder::Slice slice{op.trace_op,
                               name_of(op),
                               op.trace_lane,
                               ran ? trace->at(op.ran_start) : op.trace_start,
                               ran ? trace->at(op.ran_end) : trace->now(),
                               true};
    describe_uses(op, slice);
    trace->slice(std::move(slice), static_cast<std::int64_t>(in_flight));
    std::uint64_t issued = 0, elided = 0;
    for (const auto& executor : executors) {
      if (executor->stream_facet() == nullptr) continue;  // a CPU executor makes no device waits
      const DeviceWaits waits = executor->stream_facet()->device_waits();
      issued += waits.issued;
      elided += waits.elided;
    }
    trace->device_waits(issued, elided);
  } catch (...) {  // as in cpu_op
  }
}

void EngineTrace::flows(const OpRecord& from_op, const ReadyList& granted) noexcept {
  TraceRecorder* trace = recorder();
  if (trace == nullptr) return;
  try {
    const bool arrows = !from_op.executor()->issues_ahead();
    const std::int64_t at = trace->now();
    std::vector<SeenUse> from_uses;
    for (const OpNode* node = granted.front(); node != nullptr; node = node->ready_next_) {
      if (node->owner_kind != kPushedOp) continue;  // a replay's join: see GraphRunner::grant_join()
      const auto* released = static_cast<const OpRecord*>(node);
      if (released->trace_op == 0) continue;
      if (from_uses.empty()) from_uses = seen_uses(from_op);
      TraceRecorder::Waited why{TraceRecorder::Wait::kVariable, from_op.trace_op,
                                ordering_vars(from_uses, seen_uses(*released))};
      why.holder = name_of(from_op);
      trace->ready(released->trace_op, at, std::move(why), arrows);
    }
  } catch (...) {  // as in cpu_op
  }
}

void EngineTrace::flows(const GraphPlan& plan, std::uint32_t index, std::uint64_t traced,
                        const ReadyList& granted) noexcept {
  TraceRecorder* trace = recorder();
  if (trace == nullptr) return;
  try {
    const std::int64_t at = trace->now();
    const GraphPlan::Op& op = plan.op(index);
    const std::vector<SeenUse> from_uses = seen_uses(plan, op);
    for (const OpNode* node = granted.front(); node != nullptr; node = node->ready_next_) {
      if (node->owner_kind != kPushedOp) continue;  // a replay's join: see GraphRunner::grant_join()
      const auto* released = static_cast<const OpRecord*>(node);
      if (released->trace_op == 0) continue;
      TraceRecorder::Waited why{TraceRecorder::Wait::kVariable, traced + index,
                                ordering_vars(from_uses, seen_uses(*released))};
      why.holder = std::string(plan.name_of(op));
      trace->ready(released->trace_op, at, std::move(why), true);
    }
  } catch (...) {  // as in cpu_op
  }
}

}  // namespace depengine::detail
