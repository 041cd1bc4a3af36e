// NotificationPool: recycled records that carry a NotifyFn and its context through a GPU runtime's callback, whose
// user data is a single pointer (cudaStreamAddCallback, hipStreamAddCallback). For the GPU backends only.
//
// acquire() pops a record (allocating a chunk of kChunk records when none is free), the backend passes it as the
// callback's user data, and the callback calls take(), which copies the function and context out and returns the
// record to the pool *before* the function runs: the function may lead its owner to destroy the backend, and with
// it the pool, so nothing may touch the pool after it.
//
// Thread safety: acquire() from any thread, take() from any (callback) thread; a spinlock guards the free list for
// a few instructions. Never calls the GPU runtime, so it is safe inside a callback. Cost: no allocation once the pool
// has as many records as notifications in flight at the peak; the pool never shrinks (records live as long as it).
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include <depengine/executors/stream/stream_backend.h>
#include <depengine/support/spinlock.h>

namespace depengine::detail {

class NotificationPool {
 public:
  struct Record {
    NotifyFn fn = nullptr;
    void* context = nullptr;
    NotificationPool* pool = nullptr;  // not owned: the pool that owns this record
    Record* next = nullptr;            // free-list link, under the pool's lock
  };

  // A record holding fn and context. Allocates a chunk when the free list is empty.
  [[nodiscard]] Record* acquire(NotifyFn fn, void* context) {
    Record* record = pop();
    if (record == nullptr) {
      // Allocate outside the lock; another thread may refill the list meanwhile, which is harmless.
      auto chunk = std::make_unique<Record[]>(kChunk);
      Record* first = chunk.get();
      {
        std::lock_guard lock(lock_);
        chunks_.push_back(std::move(chunk));
        for (std::size_t i = 1; i < kChunk; ++i) push_locked(&first[i]);
      }
      record = first;
    }
    record->fn = fn;
    record->context = context;
    record->pool = this;
    return record;
  }

  // Returns an unused record (the runtime refused the callback).
  void give_back(Record* record) noexcept {
    std::lock_guard lock(lock_);
    push_locked(record);
  }

  // In the callback: the function and context, with the record already back in its pool.
  [[nodiscard]] static std::pair<NotifyFn, void*> take(void* user_data) noexcept {
    auto* record = static_cast<Record*>(user_data);
    std::pair<NotifyFn, void*> call{record->fn, record->context};
    record->pool->give_back(record);
    return call;
  }

 private:
  static constexpr std::size_t kChunk = 64;

  [[nodiscard]] Record* pop() noexcept {
    std::lock_guard lock(lock_);
    Record* record = free_;
    if (record != nullptr) free_ = record->next;
    return record;
  }

  void push_locked(Record* record) noexcept {
    record->next = free_;
    free_ = record;
  }

  support::Spinlock lock_;
  Record* free_ = nullptr;                         // guarded by lock_
  std::vector<std::unique_ptr<Record[]>> chunks_;  // guarded by lock_; owns every record
};

}  // namespace depengine::detail
