#include "bench/taskbench/task_graph.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "bench/taskbench/kernel.h"

namespace depengine::bench::taskbench {

namespace {
constexpr std::string_view kNames[] = {"trivial", "no_comm", "stencil_1d", "nearest", "fft", "tree", "all_to_all"};

// Appends the points lo..hi clipped to [0, width) to out[n...]; returns the new count.
int append_range(int lo, int hi, int width, int* out, int n) {
  for (int q = std::max(lo, 0); q <= std::min(hi, width - 1); ++q) out[n++] = q;
  return n;
}
}  // namespace

std::string_view name_of(Pattern pattern) noexcept { return kNames[static_cast<int>(pattern)]; }

Pattern parse_pattern(std::string_view name) {
  for (const Pattern p : kAllPatterns) {
    if (name_of(p) == name) return p;
  }
  throw std::invalid_argument("unknown dependence pattern '" + std::string(name) +
                              "' (expected trivial, no_comm, stencil_1d, nearest, fft, tree or all_to_all)");
}

TaskGraph::TaskGraph(Pattern pattern, int width, int steps) : pattern_(pattern), width_(width), steps_(steps) {
  if (width < 1 || width > kMaxWidth) {
    throw std::invalid_argument("task graph width must be 1.." + std::to_string(kMaxWidth));
  }
  if (steps < 1) throw std::invalid_argument("task graph needs at least one timestep");
  while ((1 << (log2_width_ + 1)) <= width) ++log2_width_;
  if (pattern == Pattern::kFft && (1 << log2_width_) != width) {
    throw std::invalid_argument("fft needs a power-of-two width");
  }
  for (int t = 0; t < steps; ++t) num_tasks_ += static_cast<std::size_t>(active(t));
}

int TaskGraph::active(int t) const noexcept {
  if (pattern_ != Pattern::kTree || t > log2_width_) return width_;
  return std::min(width_, 1 << t);
}

int TaskGraph::dependencies(int t, int point, int* out) const noexcept {
  if (t == 0) return 0;
  switch (pattern_) {
    case Pattern::kTrivial:
      return 0;
    case Pattern::kNoComm:
      out[0] = point;
      return 1;
    case Pattern::kStencil1d:
      return append_range(point - 1, point + 1, width_, out, 0);
    case Pattern::kNearest:
      return append_range(point - (kNearestRadix - 1) / 2, point + kNearestRadix / 2, width_, out, 0);
    case Pattern::kFft: {
      if (log2_width_ == 0) {
        out[0] = point;
        return 1;
      }
      const int stride = 1 << ((t - 1) % log2_width_);
      int n = 0;
      if (point - stride >= 0) out[n++] = point - stride;
      out[n++] = point;
      if (point + stride < width_) out[n++] = point + stride;
      return n;
    }
    case Pattern::kTree:
      out[0] = point / 2;
      return 1;
    case Pattern::kAllToAll:
      return append_range(0, width_ - 1, width_, out, 0);
  }
  return 0;
}

TaskData::TaskData(const TaskGraph& graph)
    : graph_(graph),
      cells_(static_cast<std::size_t>(TaskGraph::kFields * graph.width())),
      trivial_out_(graph.pattern() == Pattern::kTrivial ? graph.num_tasks() : 0) {}

void TaskData::execute(int t, int point, std::int64_t iterations) noexcept {
  const int width = graph_.width();
  int deps[TaskGraph::kMaxWidth];
  const int n = graph_.dependencies(t, point, deps);
  double seed = 1e-3 * point;
  for (int j = 0; j < n; ++j) {
    const Cell& in = cell(TaskGraph::field_of(t - 1), deps[j]);
    if (in.step != t - 1 || in.point != deps[j]) fail(t, point, "input", in.step, in.point, t - 1, deps[j]);
    seed += in.value / n;  // the mean keeps values bounded over any number of steps
  }
  const double result = kernel(seed, iterations);
  if (graph_.pattern() == Pattern::kTrivial) {
    trivial_out_[static_cast<std::size_t>(t) * static_cast<std::size_t>(width) + static_cast<std::size_t>(point)] =
        result;
    return;
  }
  Cell& out = cell(TaskGraph::field_of(t), point);
  // Widths never shrink, so a point that was not active at t - 2 was never active before: its cell is unwritten.
  const std::int64_t previous = t >= 2 && point < graph_.active(t - 2) ? t - 2 : -1;
  if (out.step != previous) fail(t, point, "output", out.step, out.point, previous, previous < 0 ? -1 : point);
  out.step = t;
  out.point = point;
  out.value = result;
}

void TaskData::reset() {
  std::fill(cells_.begin(), cells_.end(), Cell{});
  failed_.store(false, std::memory_order_relaxed);  // relaxed: between runs, no task is running
  error_[0] = '\0';
}

void TaskData::check() const {
  // relaxed: the runtime's wait (WaitForAll, taskwait) already orders every task before this call.
  if (failed_.load(std::memory_order_relaxed)) throw std::runtime_error(error_);
}

void TaskData::fail(int t, int point, const char* what, std::int64_t got_step, std::int64_t got_point,
                    std::int64_t want_step, std::int64_t want_point) noexcept {
  // relaxed: only elects the one task that writes error_; the runtime's wait orders that write before check().
  if (failed_.exchange(true, std::memory_order_relaxed)) return;
  std::snprintf(error_, sizeof error_,
                "task (t=%d, point=%d) of %s: %s cell written by (t=%lld, point=%lld), expected (t=%lld, point=%lld): "
                "the runtime ran tasks out of dependency order",
                t, point, std::string_view(name_of(graph_.pattern())).data(), what, static_cast<long long>(got_step),
                static_cast<long long>(got_point), static_cast<long long>(want_step),
                static_cast<long long>(want_point));
}

}  // namespace depengine::bench::taskbench
