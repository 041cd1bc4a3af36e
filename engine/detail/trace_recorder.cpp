#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <unordered_map>
#include <utility>

#include <depengine/engine/detail/critical_path.h>
#include <depengine/engine/detail/trace_recorder.h>
#include <depengine/engine/errors.h>

namespace depengine::detail {
namespace {

std::atomic<std::uint64_t> g_next_op{1};
std::atomic<std::uint64_t> g_next_generation{1};

// The calling thread's lane in the recorder of `generation`.
struct ThreadLane {
  std::uint64_t generation = 0;
  std::uint32_t lane = 0;
};
thread_local ThreadLane t_lane;

void append_escaped(std::string& out, std::string_view text) {
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char code[8];
      std::snprintf(code, sizeof code, "\\u%04x", static_cast<unsigned>(c));
      out += code;
    } else {
      out += c;
    }
  }
}

// An op in words: "'forward' (op 12)", or "(op 12)" for one without a name. Appended piece by piece: GCC 12 warns of a
// false overlap in `"'" + name + "' "` (-Wrestrict).
std::string op_label(std::string_view name, std::uint64_t op) {
  std::string label;
  if (!name.empty()) {
    label += '\'';
    label += name;
    label += "' ";
  }
  label += "(op ";
  label += std::to_string(op);
  label += ')';
  return label;
}

const TraceRecorder::Slice* find(const std::unordered_map<std::uint64_t, const TraceRecorder::Slice*>& by_op,
                                 std::uint64_t op) {
  const auto found = by_op.find(op);
  return found != by_op.end() ? found->second : nullptr;
}

// The variables of space-separated `labels` ("v3 v7.1").
std::vector<std::string_view> labels_of(std::string_view labels) {
  std::vector<std::string_view> out;
  while (!labels.empty()) {
    const std::size_t space = labels.find(' ');
    out.push_back(labels.substr(0, space));
    labels = space == std::string_view::npos ? std::string_view() : labels.substr(space + 1);
  }
  return out;
}

// " on v3": the variables through which the op of slice `from` ordered the op of slice `to` (one of the two mutates
// each), from their labels; empty if either slice is missing or they share none.
std::string shared_vars(const TraceRecorder::Slice* from, const TraceRecorder::Slice* to) {
  if (from == nullptr || to == nullptr) return {};
  const std::vector<std::string_view> from_reads = labels_of(from->reads), from_mutates = labels_of(from->mutates);
  const std::vector<std::string_view> to_reads = labels_of(to->reads), to_mutates = labels_of(to->mutates);
  auto has = [](const std::vector<std::string_view>& list, std::string_view var) {
    return std::find(list.begin(), list.end(), var) != list.end();
  };
  std::string out;
  auto add = [&](std::string_view var) {
    out += out.empty() ? " on " : " ";
    out += var;
  };
  for (const std::string_view var : from_mutates) {
    if (has(to_reads, var) || has(to_mutates, var)) add(var);
  }
  for (const std::string_view var : from_reads) {
    if (has(to_mutates, var)) add(var);
  }
  return out;
}

// Microseconds, as the format wants, from nanoseconds.
void append_us(std::string& out, std::int64_t ns) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", static_cast<double>(ns) / 1000.0);
  out += text;
}

}  // namespace

TraceRecorder::TraceRecorder(std::string path)
    : path_(std::move(path)),
      generation_(g_next_generation.fetch_add(1, std::memory_order_relaxed)) {}  // relaxed: only uniqueness matters

std::uint64_t TraceRecorder::next_op() noexcept { return next_ops(1); }

std::uint64_t TraceRecorder::next_ops(std::size_t count) noexcept {
  return g_next_op.fetch_add(count, std::memory_order_relaxed);  // relaxed: only uniqueness matters
}

std::int64_t TraceRecorder::now() const noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - origin_).count();
}

std::uint32_t TraceRecorder::thread_lane(std::string_view executor, int worker) {
  if (t_lane.generation == generation_) return t_lane.lane;
  std::lock_guard lock(mutex_);
  std::string name = worker >= 0 ? std::string(executor) + " worker " + std::to_string(worker)
                                 : "thread " + std::to_string(unnamed_threads_++);
  lanes_.push_back(Lane{std::move(name)});
  t_lane = ThreadLane{generation_, static_cast<std::uint32_t>(lanes_.size() - 1)};
  return t_lane.lane;
}

std::uint32_t TraceRecorder::stream_lane(Axis axis, const Executor& executor) {
  std::lock_guard lock(mutex_);
  const auto [it, added] = streams_.try_emplace(axis, static_cast<std::uint32_t>(lanes_.size()));
  if (added) {  // a stream op's lane: its executor has the stream facet
    lanes_.push_back(Lane{std::string(executor.name()) + " " + executor.stream_facet()->axis_name(axis), 0, true});
  }
  return it->second;
}

void TraceRecorder::slice(Slice slice, std::int64_t ops_in_flight) {
  std::lock_guard lock(mutex_);
  Lane& lane = lanes_[slice.lane];
  if (lane.stream) {  // a stream runs its ops one after another
    slice.start = std::min(std::max(slice.start, lane.last_end), slice.end);
    lane.last_end = slice.end;
  }
  in_flight_.push_back(Counter{slice.end, static_cast<std::uint64_t>(std::max<std::int64_t>(ops_in_flight, 0)), 0});
  slices_.push_back(std::move(slice));
}

void TraceRecorder::flow(std::uint64_t from, std::uint64_t to, Flow kind) {
  std::lock_guard lock(mutex_);
  flows_.push_back(Arrow{from, to, kind});
  if (kind != Flow::kRelease) waits_[to].after.push_back(from);  // a stream op whose work `to` could not run before
}

TraceRecorder::OpWait TraceRecorder::effective_locked(
    std::uint64_t op, const std::unordered_map<std::uint64_t, const Slice*>& by_op) const {
  const auto found = waits_.find(op);
  if (found == waits_.end()) return OpWait{};
  OpWait wait = found->second;
  const Slice* last = nullptr;  // of the stream ops it was ordered after, the one whose work ended last
  for (const std::uint64_t from : wait.after) {
    const Slice* slice = find(by_op, from);
    if (slice != nullptr && (last == nullptr || slice->end > last->end)) last = slice;
  }
  if (last == nullptr) return wait;
  if (wait.why.kind == Wait::kDevice) {  // parked: it waited for that work, and was unparked once it was done
    if (wait.why.from != last->op) wait.why = Waited{Wait::kDevice, last->op};
  } else if (wait.ready >= 0 && last->end > wait.ready) {  // granted before that work was done: it waited on the device
    wait.why = Waited{Wait::kDevice, last->op};
    wait.ready = last->end;
  }
  return wait;
}

void TraceRecorder::stream_epoch(Axis axis, std::uint64_t epoch, std::uint64_t op, const WaitFrontier& requirement) {
  std::lock_guard lock(mutex_);
  epochs_.try_emplace({axis, epoch}, Issued{op, requirement});
}

const TraceRecorder::Issued* TraceRecorder::issued_at(Axis axis, std::uint64_t epoch) const {
  std::lock_guard lock(mutex_);
  const auto found = epochs_.find({axis, epoch});
  return found != epochs_.end() ? &found->second : nullptr;
}

void TraceRecorder::device_waits(std::uint64_t issued, std::uint64_t elided) {
  const std::int64_t at = now();
  std::lock_guard lock(mutex_);
  device_waits_.push_back(Counter{at, issued, elided});
}

void TraceRecorder::pushed(std::uint64_t op, std::int64_t at, bool async) {
  std::lock_guard lock(mutex_);
  OpWait& wait = waits_[op];
  wait.pushed = at;
  wait.async = async;
}

void TraceRecorder::ready(std::uint64_t op, std::int64_t at, Waited why, bool arrow) {
  std::lock_guard lock(mutex_);
  if (arrow) flows_.push_back(Arrow{why.from, op, Flow::kRelease});
  OpWait& wait = waits_[op];
  if (at < wait.ready) return;  // an earlier grant, recorded late: not the last
  wait.ready = at;
  if (why.kind == Wait::kNone && wait.why.kind == Wait::kBound) return;  // ready at its push, after the bound
  wait.why = std::move(why);
}

void TraceRecorder::unparked(std::uint64_t op, std::int64_t at, std::uint64_t from) {
  std::lock_guard lock(mutex_);
  OpWait& wait = waits_[op];
  wait.ready = std::max(wait.ready, at);
  // The stream op that released it, if recorded; else one it waited for (granted at its push, after that op's issue).
  if (wait.why.kind != Wait::kVariable || wait.why.from == 0) wait.why = Waited{Wait::kDevice, from};
  wait.why.kind = Wait::kDevice;
}

std::string TraceRecorder::reason_locked(std::uint64_t waiter, const OpWait& wait,
                                         const std::unordered_map<std::uint64_t, const Slice*>& by_op) const {
  const Waited& why = wait.why;
  std::string holder;
  if (why.from != 0) {
    const auto found = by_op.find(why.from);
    const std::string_view name = found != by_op.end() ? std::string_view(found->second->name) : why.holder;
    holder = op_label(name, why.from);
  }
  switch (why.kind) {
    case Wait::kOutside:
      return "an op not in this trace (pushed before it started, or a wait of the engine's own)";
    case Wait::kNone:
      return "nothing: ready at its push";
    case Wait::kBound:
      return "room under EngineOptions::max_in_flight: its push waited at the bound";
    case Wait::kVariable: {
      const auto from = waits_.find(why.from);
      const bool async = from != waits_.end() && from->second.async;
      return why.what + " held by " + (holder.empty() ? "an op not in this trace" : holder) +
             (async ? ", released at its Completion" : "");
    }
    case Wait::kFence:
      return why.what + (holder.empty() ? ", reached from outside the engine" : " raised by " + holder);
    case Wait::kDevice:
      return "the device work of " + (holder.empty() ? "an op not in this trace" : holder) +
             (why.what.empty() ? shared_vars(find(by_op, why.from), find(by_op, waiter)) : " on " + why.what);
  }
  return "?";
}

std::vector<PathStep> TraceRecorder::path_locked(const std::unordered_map<std::uint64_t, const Slice*>& by_op) const {
  std::vector<PathOp> ops;
  ops.reserve(slices_.size());
  for (const Slice& s : slices_) {
    PathOp& op = ops.emplace_back();
    op.op = s.op;
    op.label = op_label(s.name, s.op);
    op.lane_id = s.lane;
    op.lane = lanes_[s.lane].name;
    op.start = s.start;
    op.end = s.end;
    if (waits_.contains(s.op)) {
      const OpWait wait = effective_locked(s.op, by_op);
      op.pushed = wait.pushed;
      op.ready = wait.ready;
      op.from = wait.why.kind == Wait::kVariable || wait.why.kind == Wait::kFence || wait.why.kind == Wait::kDevice
                    ? wait.why.from
                    : 0;
      op.reason = reason_locked(s.op, wait, by_op);
    }
  }
  return detail::critical_path(ops);
}

std::string TraceRecorder::critical_path() const {
  std::lock_guard lock(mutex_);
  std::unordered_map<std::uint64_t, const Slice*> by_op;
  for (const Slice& s : slices_) by_op.emplace(s.op, &s);
  return critical_path_text(path_locked(by_op), slices_.size());
}

void TraceRecorder::write(std::span<const Mark> marks) const {
  const std::int64_t written_at = now();
  std::lock_guard lock(mutex_);
  std::string out = "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
  out += R"({"ph":"M","name":"process_name","pid":1,"args":{"name":"depengine"}})";
  for (std::size_t i = 0; i < lanes_.size(); ++i) {
    const std::string tid = std::to_string(i + 1);
    out += ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":1,\"tid\":" + tid + ",\"args\":{\"name\":\"";
    append_escaped(out, lanes_[i].name);
    out += "\"}},\n{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":1,\"tid\":" + tid +
           ",\"args\":{\"sort_index\":" + std::to_string((lanes_[i].stream ? 1000 : 0) + i) + "}}";
  }
  std::unordered_map<std::uint64_t, const Slice*> by_op;
  by_op.reserve(slices_.size());
  for (const Slice& s : slices_) by_op.emplace(s.op, &s);
  // Why each op waited: its slice's args.
  auto append_wait_args = [&](std::string& text, const Slice& s) {
    if (!waits_.contains(s.op)) return;
    const OpWait wait = effective_locked(s.op, by_op);
    static constexpr const char* kKinds[] = {"outside", "none", "bound", "variable", "fence", "device"};
    text += ",\"waited on\":\"";
    append_escaped(text, reason_locked(s.op, wait, by_op));
    text += "\",\"wait_kind\":\"" + std::string(kKinds[static_cast<int>(wait.why.kind)]) + '"';
    if (wait.ready < 0 || wait.pushed < 0) return;  // when it was granted last is not known
    text += ",\"waited (us)\":";
    append_us(text, std::max<std::int64_t>(wait.ready - wait.pushed, 0));
    text += ",\"queued (us)\":";
    append_us(text, std::max<std::int64_t>(s.start - wait.ready, 0));
    text += ",\"waited_for_op\":" + std::to_string(wait.why.from) + ",\"pushed_ts\":";
    append_us(text, wait.pushed);
    text += ",\"ready_ts\":";
    append_us(text, wait.ready);
  };
  for (const Slice& s : slices_) {
    out += ",\n{\"ph\":\"X\",\"cat\":\"op\",\"name\":\"";
    append_escaped(out, s.name);
    out += "\",\"pid\":1,\"tid\":" + std::to_string(s.lane + 1) + ",\"ts\":";
    append_us(out, s.start);
    out += ",\"dur\":";
    append_us(out, s.end - s.start);
    out += ",\"args\":{\"op\":" + std::to_string(s.op) + ",\"reads\":\"";
    append_escaped(out, s.reads);
    out += "\",\"mutates\":\"";
    append_escaped(out, s.mutates);
    out += '"';
    append_wait_args(out, s);
    out += "}}";
  }
  std::uint64_t id = 0;
  static constexpr const char* kFlowNames[] = {"release", "device wait", "elided", "host wait"};
  for (const auto& [from, to, kind] : flows_) {
    const auto source = by_op.find(from), target = by_op.find(to);
    if (source == by_op.end() || target == by_op.end()) continue;
    const Slice& a = *source->second;
    const Slice& b = *target->second;
    const std::string flow = std::to_string(++id);
    const std::string args = ",\"args\":{\"from\":" + std::to_string(from) + ",\"to\":" + std::to_string(to) + "}}";
    const std::string name = kFlowNames[static_cast<int>(kind)];
    // Inside the source slice (a flow start binds to the slice enclosing it), at the target slice's start.
    out += ",\n{\"ph\":\"s\",\"cat\":\"dep\",\"name\":\"" + name + "\",\"id\":" + flow +
           ",\"pid\":1,\"tid\":" + std::to_string(a.lane + 1) + ",\"ts\":";
    append_us(out, a.released_at_start ? a.start : a.end);
    out += args + ",\n{\"ph\":\"f\",\"bp\":\"e\",\"cat\":\"dep\",\"name\":\"" + name + "\",\"id\":" + flow +
           ",\"pid\":1,\"tid\":" + std::to_string(b.lane + 1) + ",\"ts\":";
    append_us(out, b.start);
    out += args;
  }
  for (const Counter& c : in_flight_) {
    out += ",\n{\"ph\":\"C\",\"name\":\"ops in flight\",\"pid\":1,\"ts\":";
    append_us(out, c.at);
    out += ",\"args\":{\"ops\":" + std::to_string(c.a) + "}}";
  }
  for (const Counter& c : device_waits_) {
    out += ",\n{\"ph\":\"C\",\"name\":\"device waits\",\"pid\":1,\"ts\":";
    append_us(out, c.at);
    out += ",\"args\":{\"issued\":" + std::to_string(c.a) + ",\"elided\":" + std::to_string(c.b) + "}}";
  }
  if (!marks.empty()) {
    const std::string tid = std::to_string(lanes_.size() + 1);
    out += ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":1,\"tid\":" + tid +
           ",\"args\":{\"name\":\"in flight at "
           "stall\"}},\n{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":1,\"tid\":" +
           tid + ",\"args\":{\"sort_index\":-1}}";
    for (const Mark& mark : marks) {
      out += ",\n{\"ph\":\"i\",\"s\":\"t\",\"cat\":\"in flight\",\"name\":\"";
      append_escaped(out, mark.name);
      out += "\",\"pid\":1,\"tid\":" + tid + ",\"ts\":";
      append_us(out, written_at);
      out += ",\"args\":{\"state\":\"";
      append_escaped(out, mark.state);
      out += "\"}}";
    }
  }
  // The critical path: a lane of its own, after every other, and the same in words under otherData.
  const std::vector<PathStep> path = path_locked(by_op);
  if (!path.empty()) {
    const std::string tid = std::to_string(lanes_.size() + (marks.empty() ? 1 : 2));
    out += ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":1,\"tid\":" + tid +
           ",\"args\":{\"name\":\"critical path\"}},\n{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":1,"
           "\"tid\":" +
           tid + ",\"args\":{\"sort_index\":-2}}";
    static constexpr const char* kStepNames[] = {"push", "wait", "queued", "run"};
    for (const PathStep& step : path) {
      if (step.kind == PathStep::Kind::kPush) continue;  // a moment, in the text only
      out += ",\n{\"ph\":\"X\",\"cat\":\"critical path\",\"name\":\"" +
             std::string(kStepNames[static_cast<int>(step.kind)]) + "\",\"pid\":1,\"tid\":" + tid + ",\"ts\":";
      append_us(out, step.start);
      out += ",\"dur\":";
      append_us(out, step.end - step.start);
      out += ",\"args\":{\"op\":" + std::to_string(step.op) + ",\"step\":\"";
      append_escaped(out, step.text);
      out += "\"}}";
    }
  }
  out += "\n],\"otherData\":{\"critical path\":\"";
  append_escaped(out, critical_path_text(path, slices_.size()));
  out += "\"}}\n";

  // Written beside the file and renamed over it, so that a process killed during a write (FlushTrace, a stall
  // report) leaves the previous complete file, never half of one.
  const std::string temporary = path_ + ".writing";
  std::FILE* file = std::fopen(temporary.c_str(), "w");
  if (file == nullptr) throw Error("trace: cannot open '" + path_ + "' for writing: " + std::strerror(errno));
  const bool written = std::fwrite(out.data(), 1, out.size(), file) == out.size();
  if (std::fclose(file) != 0 || !written || std::rename(temporary.c_str(), path_.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    std::remove(temporary.c_str());
    throw Error("trace: cannot write '" + path_ + "': " + reason);
  }
}

}  // namespace depengine::detail
