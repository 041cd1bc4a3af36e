#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <unordered_map>
#include <utility>

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
  waits_.push_back(Counter{at, issued, elided});
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
  for (const Slice& s : slices_) {
    by_op.emplace(s.op, &s);
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
    out += "\"}}";
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
  for (const Counter& c : waits_) {
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
  out += "\n]}\n";

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
