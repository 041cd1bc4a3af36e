// StallWatch: a thread that reports what the engine's ops wait for when none of them has completed for a while
// (EngineOptions::stall_report_after, 60 s by default, or DEPENGINE_STALL_REPORT=seconds): a hang of the user's making,
// a Completion never called, a fence never signalled, a push blocked behind them, becomes a report naming the ops and
// what each waits for, and an op that merely runs long is named as running, with how long.
//
// Every RunClock period (stall_report_after / RunClock::kTicksPerReport) it advances the engine's run clock and
// compares the engine's count of retired ops with the last one it saw. The engine is quiet from the last period in
// which an op retired or none was in flight; once it has been quiet for `after`, the watch hands the report to the
// sink. Once per stall: it reports again only after some op has retired (or none was in flight). It waits on a
// condition variable with a deadline (a timer, not a wait for another thread), and its destructor wakes and joins it.
//
// Thread safety: construct and destroy from one thread; the callbacks run on the watch's thread. Cost: nothing on any
// engine path; one wake-up every period, which reads the retired count (the sum of a few counters).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include <depengine/engine/detail/run_clock.h>

namespace depengine::detail {

class StallWatch {
 public:
  struct Probe {
    std::function<std::uint64_t()> retired;  // ops retired so far (any monotonic count of progress)
    std::function<std::size_t()> in_flight;  // ops in flight now
    // What to say when nothing has completed for `quiet` (at least `after`).
    std::function<std::string(std::chrono::nanoseconds quiet)> report;
    std::function<void(std::string_view)> sink;  // where to say it
  };

  // `clock` is advanced by the watch's thread, and must outlive the watch; its period is the watch's.
  StallWatch(std::chrono::milliseconds after, RunClock& clock, Probe probe);
  ~StallWatch();
  StallWatch(const StallWatch&) = delete;
  StallWatch& operator=(const StallWatch&) = delete;

 private:
  void run();

  const std::chrono::milliseconds after_;
  RunClock& clock_;  // not owned: the engine's
  const Probe probe_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;  // guarded by mutex_
  std::thread thread_;     // last: started once the members above exist
};

}  // namespace depengine::detail
