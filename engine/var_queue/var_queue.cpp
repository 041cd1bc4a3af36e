#include "engine/var_queue/var_queue.h"

#include <cassert>

namespace depengine {

bool VarQueue::append_locked(VarUse& use) noexcept {
  use.next = nullptr;
  if (use.access == Access::kRead && head_ == nullptr) {
    ++running_reads_;
    return true;
  }
  if (head_ == nullptr) {
    head_ = tail_ = &use;  // a write heading the queue: runs once the reads before it are done
    return running_reads_ == 0;
  }
  tail_->next = &use;
  tail_ = &use;
  return false;
}

void VarQueue::grant_front_reads(ReadyList& ready) noexcept {
  while (head_ != nullptr && head_->access == Access::kRead) {
    VarUse* read = head_;
    head_ = read->next;
    ++running_reads_;
    grant(*read, ready);
  }
  if (head_ == nullptr) tail_ = nullptr;
}

void VarQueue::complete(const VarUse& use, const VarSignal* signal, ReadyList& ready) noexcept {
  lock_.lock();
  if (signal != nullptr) {
    assert(signals_ != nullptr && "complete() with a signal on a queue without signals (carry_signals)");
    if (use.access == Access::kRead) {
      if (!signal->empty()) signals_->reads.merge(*signal);
    } else {
      signals_->write = *signal;
      signals_->reads.clear();
    }
  }
  if (use.access == Access::kRead) {
    assert(running_reads_ > 0 && "read completed twice");
    if (--running_reads_ == 0 && head_ != nullptr) grant(*head_, ready);
  } else {
    assert(head_ == &use && running_reads_ == 0 && "write completed out of order");
    if (use.access == Access::kWrite) {
      // relaxed load: only writers change version_, and they hold lock_. release store: pairs with the acquire in
      // version(), publishing the mutation this counts.
      version_.store(version_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
    }
    head_ = head_->next;
    grant_front_reads(ready);
    if (head_ != nullptr && running_reads_ == 0) grant(*head_, ready);
  }
  lock_.unlock();
}

}  // namespace depengine
