// OpStatistics: a shard of rows per thread, merged when the table is read.
#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstdio>
#include <functional>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>

#include <depengine/engine/op_statistics.h>
#include <depengine/support/spinlock.h>

namespace depengine {
namespace {

using std::chrono::nanoseconds;

std::atomic<std::uint64_t> g_next_serial{1};

// A histogram of nanoseconds with 8 buckets per power of two (values below 16 exactly), so a value read back from its
// bucket's middle is within 1/16 of any value that fell in it.
class Histogram {
 public:
  static constexpr std::size_t kBuckets = 8 + 61 * 8;  // 0..7, then 8 per power of two from 2^3 to 2^63

  void add(std::int64_t value) noexcept { ++counts_[bucket(value)]; }
  void merge(const Histogram& other) noexcept {
    for (std::size_t i = 0; i < kBuckets; ++i) counts_[i] += other.counts_[i];
  }
  // The value at quantile q (0 < q <= 1) of `total` values added.
  [[nodiscard]] std::int64_t quantile(double q, std::uint64_t total) const noexcept {
    if (total == 0) return 0;
    const auto rank = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(q * static_cast<double>(total) + 0.999999));
    std::uint64_t seen = 0;
    for (std::size_t i = 0; i < kBuckets; ++i) {
      seen += counts_[i];
      if (seen >= rank) return middle(i);
    }
    return middle(kBuckets - 1);
  }

 private:
  static std::size_t bucket(std::int64_t value) noexcept {
    const auto v = static_cast<std::uint64_t>(std::max<std::int64_t>(value, 0));
    if (v < 8) return v;
    const auto exponent = static_cast<int>(std::bit_width(v)) - 1;  // >= 3
    const auto sub = static_cast<std::size_t>((v >> (exponent - 3)) & 7);
    return static_cast<std::size_t>(exponent - 2) * 8 + sub;
  }
  static std::int64_t middle(std::size_t index) noexcept {
    if (index < 8) return static_cast<std::int64_t>(index);
    const int exponent = static_cast<int>(index / 8) + 2;
    const std::uint64_t low = (8 + index % 8) << (exponent - 3);
    return static_cast<std::int64_t>(low + ((std::uint64_t{1} << (exponent - 3)) >> 1));
  }

  std::array<std::uint64_t, kBuckets> counts_{};
};

struct Row {
  std::uint64_t ran = 0, failed = 0, skipped = 0, cancelled = 0;
  std::int64_t run_total = 0, run_max = 0, queue_total = 0, queue_max = 0, wait_total = 0, wait_max = 0;
  Histogram run;

  void merge(const Row& other) noexcept {
    ran += other.ran;
    failed += other.failed;
    skipped += other.skipped;
    cancelled += other.cancelled;
    run_total += other.run_total;
    run_max = std::max(run_max, other.run_max);
    queue_total += other.queue_total;
    queue_max = std::max(queue_max, other.queue_max);
    wait_total += other.wait_total;
    wait_max = std::max(wait_max, other.wait_max);
    run.merge(other.run);
  }
};

struct WorkerRow {
  std::uint32_t executor = 0;
  int worker = -1;
  std::uint64_t ops = 0;
  std::int64_t busy = 0;
};

// Hashes std::string and std::string_view alike, so a lookup by an event's name builds no string.
struct NameHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view name) const noexcept { return std::hash<std::string_view>{}(name); }
};

constexpr std::string_view kUnnamed = "(unnamed)";

// The calling thread's last shard: which statistics object (by serial) and its shard there.
struct ShardCache {
  std::uint64_t serial = 0;
  void* shard = nullptr;
};
thread_local ShardCache t_shard;

std::string format_row(const OpNameStatistics& row, std::size_t width) {
  const auto us = [](nanoseconds t) { return static_cast<double>(t.count()) / 1e3; };
  char line[512];
  std::snprintf(line, sizeof line, "%-*.*s %9llu %11.3f %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f %8llu %8llu %9llu\n",
                static_cast<int>(width), static_cast<int>(width), row.name.c_str(),
                static_cast<unsigned long long>(row.count), us(row.run_total) / 1e3, us(row.run_mean), us(row.run_p50),
                us(row.run_p99), us(row.run_max), us(row.queue_mean), us(row.wait_mean),
                static_cast<unsigned long long>(row.skipped), static_cast<unsigned long long>(row.failed),
                static_cast<unsigned long long>(row.cancelled));
  return line;
}

}  // namespace

struct OpStatistics::Shard {
  std::thread::id thread;
  support::Spinlock lock;  // taken by its thread per op, and by Table() and Reset()
  std::unordered_map<std::string, Row, NameHash, std::equal_to<>> rows;  // guarded by lock
  std::vector<WorkerRow> workers;                                        // guarded by lock
  // The row of the name this thread ended last, and that name (its key in `rows`, whose nodes do not move): most ops
  // end on a thread after one of the same name, and a compare of the name costs less than its hash and lookup.
  Row* last_row = nullptr;     // guarded by lock
  std::string_view last_name;  // guarded by lock
};

OpStatistics::OpStatistics()
    : serial_(g_next_serial.fetch_add(1, std::memory_order_relaxed)),  // relaxed: only uniqueness
      start_(std::chrono::steady_clock::now()) {}

OpStatistics::~OpStatistics() = default;

OpStatistics::Shard* OpStatistics::shard() noexcept {
  if (t_shard.serial == serial_) return static_cast<Shard*>(t_shard.shard);
  const std::lock_guard lock(mutex_);
  const std::thread::id self = std::this_thread::get_id();
  Shard* found = nullptr;
  for (const auto& shard : shards_) {
    if (shard->thread == self) found = shard.get();
  }
  if (found == nullptr) {
    try {
      shards_.push_back(std::make_unique<Shard>());
    } catch (...) {  // out of memory: the op goes uncounted
      return nullptr;
    }
    found = shards_.back().get();
    found->thread = self;
  }
  t_shard = ShardCache{serial_, found};
  return found;
}

void OpStatistics::OnReady(const OpEvent& /*op*/) noexcept {}
void OpStatistics::OnStart(const OpEvent& /*op*/) noexcept {}
void OpStatistics::OnThreadStart(const ThreadEvent& /*thread*/) noexcept {}
void OpStatistics::OnThreadStop(const ThreadEvent& /*thread*/) noexcept {}

// Everything a row needs is in the op's last event: its push, ready, start and end times.
void OpStatistics::OnEnd(const OpEvent& op) noexcept {
  Shard* shard = this->shard();
  if (shard == nullptr) return;
  const std::string_view name = op.name.empty() ? kUnnamed : op.name;
  const std::lock_guard lock(shard->lock);
  if (shard->last_row == nullptr || shard->last_name != name) {
    auto found = shard->rows.find(name);
    if (found == shard->rows.end()) {
      try {
        found = shard->rows.emplace(std::string(name), Row{}).first;
      } catch (...) {  // out of memory: the op goes uncounted
        return;
      }
    }
    shard->last_row = &found->second;
    shard->last_name = found->first;
  }
  Row& row = *shard->last_row;
  switch (op.outcome) {
    case OpOutcome::kRan:
      ++row.ran;
      break;
    case OpOutcome::kFailed:
      ++row.failed;
      break;
    case OpOutcome::kSkipped:
      ++row.skipped;
      break;
    case OpOutcome::kCancelled:
      ++row.cancelled;
      break;
  }
  const std::int64_t wait = op.ready_at - op.pushed_at;
  row.wait_total += wait;
  row.wait_max = std::max(row.wait_max, wait);
  if (op.started_at == 0) return;
  const std::int64_t run = op.ended_at - op.started_at;
  const std::int64_t queue = op.started_at - op.ready_at;
  row.run_total += run;
  row.run_max = std::max(row.run_max, run);
  row.run.add(run);
  row.queue_total += queue;
  row.queue_max = std::max(row.queue_max, queue);
  if (!op.stream.is_null()) return;  // device time: no worker's
  auto worker = std::find_if(shard->workers.begin(), shard->workers.end(),
                             [&](const WorkerRow& w) { return w.executor == op.executor && w.worker == op.worker; });
  if (worker == shard->workers.end()) {
    try {
      worker = shard->workers.insert(shard->workers.end(), WorkerRow{op.executor, op.worker});
    } catch (...) {
      return;
    }
  }
  ++worker->ops;
  worker->busy += run;
}

StatisticsTable OpStatistics::Table() const {
  std::unordered_map<std::string, Row, NameHash, std::equal_to<>> rows;
  std::vector<WorkerRow> workers;
  StatisticsTable table;
  {
    const std::lock_guard lock(mutex_);
    table.window = std::chrono::steady_clock::now() - start_;
    for (const auto& shard : shards_) {
      const std::lock_guard shard_lock(shard->lock);
      for (const auto& [name, row] : shard->rows) rows[name].merge(row);
      for (const WorkerRow& w : shard->workers) {
        auto found = std::find_if(workers.begin(), workers.end(),
                                  [&](const WorkerRow& o) { return o.executor == w.executor && o.worker == w.worker; });
        if (found == workers.end()) {
          workers.push_back(w);
        } else {
          found->ops += w.ops;
          found->busy += w.busy;
        }
      }
    }
  }
  for (const auto& [name, row] : rows) {
    OpNameStatistics out;
    out.name = name;
    out.ran = row.ran;
    out.failed = row.failed;
    out.skipped = row.skipped;
    out.cancelled = row.cancelled;
    out.count = row.ran + row.failed + row.skipped + row.cancelled;
    const std::uint64_t started = row.ran + row.failed;
    const auto mean = [](std::int64_t total, std::uint64_t n) {
      return nanoseconds(n == 0 ? 0 : total / static_cast<std::int64_t>(n));
    };
    out.run_total = nanoseconds(row.run_total);
    out.run_mean = mean(row.run_total, started);
    out.run_p50 = nanoseconds(row.run.quantile(0.5, started));
    out.run_p99 = nanoseconds(row.run.quantile(0.99, started));
    out.run_max = nanoseconds(row.run_max);
    out.queue_total = nanoseconds(row.queue_total);
    out.queue_mean = mean(row.queue_total, started);
    out.queue_max = nanoseconds(row.queue_max);
    out.wait_total = nanoseconds(row.wait_total);
    out.wait_mean = mean(row.wait_total, out.count);
    out.wait_max = nanoseconds(row.wait_max);
    table.ops.push_back(std::move(out));
  }
  std::sort(table.ops.begin(), table.ops.end(), [](const OpNameStatistics& a, const OpNameStatistics& b) {
    return a.run_total != b.run_total ? a.run_total > b.run_total : a.name < b.name;
  });
  std::sort(workers.begin(), workers.end(), [](const WorkerRow& a, const WorkerRow& b) {
    return a.executor != b.executor ? a.executor < b.executor : a.worker < b.worker;
  });
  for (const WorkerRow& w : workers) {
    const nanoseconds busy(w.busy);
    table.workers.push_back(
        WorkerStatistics{w.executor, w.worker, w.ops, busy, std::max(nanoseconds{0}, table.window - busy)});
  }
  return table;
}

void OpStatistics::Reset() {
  const std::lock_guard lock(mutex_);
  for (const auto& shard : shards_) {
    const std::lock_guard shard_lock(shard->lock);
    shard->last_row = nullptr;
    shard->rows.clear();
    shard->workers.clear();
  }
  start_ = std::chrono::steady_clock::now();
}

std::uint64_t StatisticsTable::op_count() const noexcept {
  std::uint64_t total = 0;
  for (const OpNameStatistics& row : ops) total += row.count;
  return total;
}

std::string StatisticsTable::ToString() const {
  std::size_t width = 4;
  for (const OpNameStatistics& row : ops) width = std::max(width, row.name.size());
  width = std::min<std::size_t>(width, 40);
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line,
                "depengine profile: %llu ops in %.3f s, by op name, by total run time (run: start to end; queue: "
                "ready to start; wait: push to ready)\n",
                static_cast<unsigned long long>(op_count()), static_cast<double>(window.count()) / 1e9);
  out += line;
  std::snprintf(line, sizeof line, "%-*s %9s %11s %10s %10s %10s %10s %10s %10s %8s %8s %9s\n", static_cast<int>(width),
                "Name", "Count", "Total(ms)", "Mean(us)", "P50(us)", "P99(us)", "Max(us)", "Queue(us)", "Wait(us)",
                "Skipped", "Failed", "Cancelled");
  out += line;
  for (const OpNameStatistics& row : ops) out += format_row(row, width);
  if (workers.empty()) return out;
  out += "Executor Worker       Ops    Busy(ms)    Idle(ms)\n";
  for (const WorkerStatistics& w : workers) {
    std::snprintf(line, sizeof line, "%8u %6d %9llu %11.3f %11.3f\n", w.executor, w.worker,
                  static_cast<unsigned long long>(w.ops), static_cast<double>(w.busy.count()) / 1e6,
                  static_cast<double>(w.idle.count()) / 1e6);
    out += line;
  }
  return out;
}

}  // namespace depengine
