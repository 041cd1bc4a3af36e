// OpStatistics: per-name statistics of an engine's ops (MXNet's aggregate profiler table), built as one Observer.
//
// For each op name (PushOptions::name; "(unnamed)" for ops without one): how many ops ended, and how (ran, failed,
// skipped, cancelled); their run time (start to end: a CPU op's function, an async op until its Completion, a stream
// op from its issue until its device work completed) with total, mean, p50, p99 and max; their time from ready to
// start (queueing: waiting for a worker, or for device work on an engine with streams) and from push to ready (waiting
// on dependencies). And for each executor worker that ran ops, how long it was busy running them, so that its idle
// time is the window less that.
//
// An engine keeps one when EngineOptions::statistics is set, or the environment has DEPENGINE_PROFILE=1: read it with
// Engine::Statistics(); with DEPENGINE_PROFILE=1 the engine's destructor also prints its table to stderr. One may also
// be made and registered by hand (EngineOptions::observers), e.g. to share one table among engines.
//
// Thread safety: the Observer calls from any threads at once (each thread adds to a shard of its own, under a lock
// that only a reader of the table takes as well); Table() and Reset() from any thread, at any time: a table read while
// ops run holds the ops that had ended by some moment during the call. Cost per ended op: a compare of its name with
// the last one the thread counted (a hash and a lookup in the thread's shard when it differs) and a few additions;
// allocation the first time a thread sees a name (a row of about 4 KiB). The engine's own statistics (not one
// registered by hand) are called at OnEnd only, directly: their OnReady and OnStart do nothing. With the engine's two
// or three clock reads per op (observer.h), about as much as an empty observer costs: measured in
// bench/notes/2026-11-28-statistics-cost.md.
// p50 and p99 come from a histogram of 8 buckets per power of two: within 1/16 of the exact value.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <depengine/engine/observer.h>

namespace depengine {

// One op name's row.
struct OpNameStatistics {
  std::string name;             // PushOptions::name (empty: the ops without one)
  std::uint64_t count = 0;      // ops ended: ran + failed + skipped + cancelled
  std::uint64_t ran = 0;        // ended OpOutcome::kRan
  std::uint64_t failed = 0;     // ended OpOutcome::kFailed
  std::uint64_t skipped = 0;    // ended OpOutcome::kSkipped
  std::uint64_t cancelled = 0;  // ended OpOutcome::kCancelled
  // Run time (start to end), over the ops that started (ran or failed); p50 and p99 within 1/16.
  std::chrono::nanoseconds run_total{};  // the sum
  std::chrono::nanoseconds run_mean{};   // the mean
  std::chrono::nanoseconds run_p50{};    // the median
  std::chrono::nanoseconds run_p99{};    // the 99th percentile
  std::chrono::nanoseconds run_max{};    // the longest
  // Queueing (ready to start), over the ops that started.
  std::chrono::nanoseconds queue_total{};  // the sum
  std::chrono::nanoseconds queue_mean{};   // the mean
  std::chrono::nanoseconds queue_max{};    // the longest
  // Waiting on dependencies (push to ready), over every op that ended.
  std::chrono::nanoseconds wait_total{};  // the sum
  std::chrono::nanoseconds wait_mean{};   // the mean
  std::chrono::nanoseconds wait_max{};    // the longest
};

// One executor worker's row; `worker` -1 gathers the ops of an executor run by threads not its own (pushing threads
// that ran an op themselves, waiting threads that helped, an inline executor's callers). Stream ops are not counted
// here: their run time is device time.
struct WorkerStatistics {
  std::uint32_t executor = 0;       // its index in EngineOptions::executors
  int worker = -1;                  // its worker index (RunContext::worker), or -1 (above)
  std::uint64_t ops = 0;            // ops started on it
  std::chrono::nanoseconds busy{};  // their run time
  std::chrono::nanoseconds idle{};  // the table's window less busy (0 if busy exceeds it: async ops end elsewhere)
};

// The statistics of an engine's ops at one moment (Engine::Statistics, OpStatistics::Table): a row per op name and a
// row per executor worker.
struct StatisticsTable {
  std::vector<OpNameStatistics> ops;      // by run_total, largest first (then by name)
  std::vector<WorkerStatistics> workers;  // by executor, then worker
  std::chrono::nanoseconds window{};      // from the statistics' start (or last Reset) to the table's reading
  [[nodiscard]] std::uint64_t op_count() const noexcept;  // the sum of the rows' counts
  // The table as text: a header line, a row per name, then a row per worker (times in milliseconds and
  // microseconds), as DEPENGINE_PROFILE=1 prints it.
  [[nodiscard]] std::string ToString() const;
};

class OpStatistics final : public Observer {
 public:
  OpStatistics();
  ~OpStatistics() override;

  // The rows so far.
  [[nodiscard]] StatisticsTable Table() const;
  // Forgets every row and starts a new window.
  void Reset();

  // Its Observer members: each event counted in the calling thread's shard.
  void OnReady(const OpEvent& op) noexcept override;
  void OnStart(const OpEvent& op) noexcept override;
  void OnEnd(const OpEvent& op) noexcept override;
  void OnThreadStart(const ThreadEvent& thread) noexcept override;
  void OnThreadStop(const ThreadEvent& thread) noexcept override;

 private:
  struct Shard;
  // The calling thread's shard, made on its first op.
  [[nodiscard]] Shard* shard() noexcept;

  const std::uint64_t serial_;  // process-wide, never reused: names this object in each thread's shard cache
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<Shard>> shards_;   // guarded by mutex_; one per thread that ended an op
  std::chrono::steady_clock::time_point start_;  // guarded by mutex_
};

}  // namespace depengine
