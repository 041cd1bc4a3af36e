#include <utility>

#include <depengine/engine/detail/stall_watch.h>

namespace depengine::detail {

StallWatch::StallWatch(std::chrono::milliseconds after, RunClock& clock, Probe probe)
    : after_(after), clock_(clock), probe_(std::move(probe)), thread_([this] { run(); }) {}

StallWatch::~StallWatch() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void StallWatch::run() {
  using Clock = std::chrono::steady_clock;
  const Clock::duration period = std::chrono::duration_cast<Clock::duration>(clock_.period());
  Clock::time_point next = Clock::now() + period;
  // The start of the quiet: the period in which an op last retired, or none was in flight. Measured from there rather
  // than from the last retirement, so that an op pushed into an engine idle for an hour is given `after` like any
  // other.
  Clock::time_point quiet_since = Clock::now();
  std::uint64_t seen = probe_.retired();
  bool reported = false;  // this stall has been reported
  std::unique_lock lock(mutex_);
  while (!wake_.wait_until(lock, next, [this] { return stopping_; })) {
    lock.unlock();
    clock_.advance();
    const Clock::time_point now = Clock::now();
    // On schedule, so that ticks do not drift; a watch that ran late (a suspended process) skips the missed ticks.
    next = next + period > now ? next + period : now + period;
    const std::uint64_t retired = probe_.retired();
    if (retired != seen || probe_.in_flight() == 0) {
      seen = retired;
      quiet_since = now;
      reported = false;
    } else if (!reported && now - quiet_since >= after_) {
      probe_.sink(probe_.report(now - quiet_since));
      reported = true;
    }
    lock.lock();
  }
}

}  // namespace depengine::detail
