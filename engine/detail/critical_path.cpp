// CriticalPath (critical_path.h): walked back from the op that ends last.
#include <algorithm>
#include <cstdio>
#include <iterator>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include <depengine/engine/detail/critical_path.h>

namespace depengine::detail {
namespace {

std::string ms(std::int64_t ns) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", static_cast<double>(ns) / 1e6);
  return text;
}

}  // namespace

std::vector<PathStep> critical_path(std::span<const PathOp> ops) {
  if (ops.empty()) return {};
  std::unordered_map<std::uint64_t, const PathOp*> by_op;
  std::unordered_map<std::uint32_t, std::vector<const PathOp*>> by_lane;  // each lane's ops, by their end
  for (const PathOp& op : ops) {
    by_op.emplace(op.op, &op);
    by_lane[op.lane_id].push_back(&op);
  }
  auto by_end = [](const PathOp* a, const PathOp* b) { return a->end < b->end || (a->end == b->end && a->op < b->op); };
  for (auto& [lane, list] : by_lane) std::sort(list.begin(), list.end(), by_end);
  const PathOp* at = &*std::max_element(ops.begin(), ops.end(), [](const PathOp& a, const PathOp& b) {
    return a.end < b.end || (a.end == b.end && a.op > b.op);  // the earliest pushed of those that end together
  });
  std::vector<PathStep> steps;  // last step first
  std::unordered_set<std::uint64_t> taken;
  while (true) {
    taken.insert(at->op);
    steps.push_back({PathStep::Kind::kRun, at->start, at->end, at->op, at->label + " ran on " + at->lane});
    if (at->ready < 0) break;  // no grant recorded: the path begins with this run
    const auto holder = at->from != 0 ? by_op.find(at->from) : by_op.end();
    const PathOp* from = holder != by_op.end() && !taken.contains(at->from) ? holder->second : nullptr;
    const std::int64_t released = from != nullptr ? std::max(at->ready, from->end) : at->ready;
    // The op that ran last on its lane before it started: if that ended after the op could run, the lane held it.
    const std::vector<const PathOp*>& lane = by_lane[at->lane_id];
    auto before = std::upper_bound(lane.begin(), lane.end(), at->start,
                                   [](std::int64_t start, const PathOp* op) { return start < op->end; });
    while (before != lane.begin() && (*std::prev(before) == at || taken.contains((*std::prev(before))->op))) --before;
    const PathOp* busy = before != lane.begin() ? *std::prev(before) : nullptr;
    if (busy != nullptr && busy->end > released) {
      if (busy->end < at->start) {
        steps.push_back({PathStep::Kind::kQueued, busy->end, at->start, at->op,
                         at->label + " queued (ready, its lane busy with " + busy->label + ")"});
      }
      at = busy;
      continue;
    }
    const std::int64_t queued = std::min(released, at->start);
    if (queued < at->start) {
      steps.push_back({PathStep::Kind::kQueued, queued, at->start, at->op, at->label + " queued (ready, not started)"});
    }
    if (from != nullptr) {
      if (from->end < queued) {
        steps.push_back({PathStep::Kind::kWait, from->end, queued, at->op, at->label + " waited for " + at->reason});
      }
      at = from;
      continue;
    }
    const std::int64_t pushed = at->pushed >= 0 ? std::min(at->pushed, at->ready) : at->ready;
    if (pushed < at->ready) {
      steps.push_back({PathStep::Kind::kWait, pushed, at->ready, at->op, at->label + " waited for " + at->reason});
    }
    steps.push_back({PathStep::Kind::kPush, pushed, pushed, at->op, "push of " + at->label});
    break;
  }
  std::reverse(steps.begin(), steps.end());
  return steps;
}

std::string critical_path_text(std::span<const PathStep> path, std::size_t traced) {
  if (path.empty()) return "critical path: no op was recorded\n";
  std::int64_t ran = 0, waited = 0, queued = 0;
  std::size_t runs = 0;
  for (const PathStep& step : path) {
    const std::int64_t length = step.end - step.start;
    if (step.kind == PathStep::Kind::kRun) {
      ran += length;
      ++runs;
    } else if (step.kind == PathStep::Kind::kWait) {
      waited += length;
    } else if (step.kind == PathStep::Kind::kQueued) {
      queued += length;
    }
  }
  const std::int64_t first = path.front().start, last = path.back().end;
  std::string out = "critical path: " + ms(last - first) + " ms, from " + ms(first) + " to " + ms(last) +
                    " ms: " + std::to_string(runs) + " of " + std::to_string(traced) + " ops ran " + ms(ran) +
                    " ms, waited " + ms(waited) + " ms, queued " + ms(queued) + " ms\n" + "     at (ms)   took (ms)\n";
  for (const PathStep& step : path) {
    char times[48];
    std::snprintf(times, sizeof times, "%12.3f %11.3f  ", static_cast<double>(step.start) / 1e6,
                  static_cast<double>(step.end - step.start) / 1e6);
    out += times + step.text + "\n";
  }
  return out;
}

}  // namespace depengine::detail
