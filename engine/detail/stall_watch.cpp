#include <utility>

#include <depengine/engine/detail/stall_watch.h>

namespace depengine::detail {

StallWatch::StallWatch(std::chrono::milliseconds after, Probe probe)
    : after_(after), probe_(std::move(probe)), thread_([this] { run(); }) {}

StallWatch::~StallWatch() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void StallWatch::run() {
  std::uint64_t seen = probe_.retired();
  bool reported = false;  // this stall has been reported
  std::unique_lock lock(mutex_);
  while (!wake_.wait_for(lock, after_, [this] { return stopping_; })) {
    lock.unlock();
    const std::uint64_t retired = probe_.retired();
    if (retired != seen) {
      seen = retired;
      reported = false;
    } else if (!reported && probe_.in_flight() > 0) {
      probe_.sink(probe_.report());
      reported = true;
    }
    lock.lock();
  }
}

}  // namespace depengine::detail
