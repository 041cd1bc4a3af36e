// StallWatch: a thread that reports what the engine's ops wait for when none of them has completed for a while
// (EngineOptions::stall_report_after, or DEPENGINE_STALL_REPORT=seconds): a hang of the user's making, a Completion
// never called, a fence never signalled, becomes a report naming the ops and what each waits for.
//
// Every `after` it compares the engine's count of retired ops with the last one it saw; when ops are in flight and
// none has retired since, it hands the report to the sink. Once per stall: it reports again only after some op has
// retired. It waits on a condition variable with a timeout (a timer, not a wait for another thread), and its
// destructor wakes and joins it.
//
// Thread safety: construct and destroy from one thread; the callbacks run on the watch's thread. Cost: nothing on
// any engine path; one wake-up every `after`.
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

namespace depengine::detail {

class StallWatch {
 public:
  struct Probe {
    std::function<std::uint64_t()> retired;      // ops retired so far (any monotonic count of progress)
    std::function<std::size_t()> in_flight;      // ops in flight now
    std::function<std::string()> report;         // what to say when stalled
    std::function<void(std::string_view)> sink;  // where to say it
  };

  StallWatch(std::chrono::milliseconds after, Probe probe);
  ~StallWatch();
  StallWatch(const StallWatch&) = delete;
  StallWatch& operator=(const StallWatch&) = delete;

 private:
  void run();

  const std::chrono::milliseconds after_;
  const Probe probe_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;  // guarded by mutex_
  std::thread thread_;     // last: started once the members above exist
};

}  // namespace depengine::detail
