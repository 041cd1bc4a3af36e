#include <sys/mman.h>

#include <cstddef>
#include <cstdlib>
#include <mutex>
#include <new>
#include <vector>

#include <depengine/engine/detail/op_record.h>
#include <depengine/support/prefetch.h>

namespace depengine::detail {
namespace {

// A singly linked stack of records, through Task::next_ (unused while a record is in the pool).
struct Stack {
  OpRecord* head = nullptr;
  int size = 0;

  void push(OpRecord* record) noexcept {
    record->next_ = head;
    head = record;
    ++size;
  }
  OpRecord* pop() noexcept {
    OpRecord* record = head;
    head = static_cast<OpRecord*>(record->next_);
    --size;
    return record;
  }
  // Detaches the top `count` records as a stack of their own.
  Stack split(int count) noexcept {
    Stack part;
    for (int i = 0; i < count; ++i) part.push(pop());
    return part;
  }
};

// Where new records come from: chunks of 2 MiB, never freed, carved one record after another. The first chunk keeps the
// system's default pages, so a program that never holds more than a few hundred ops costs only the pages it touches;
// every later chunk is advised to be backed by a transparent huge page (madvise MADV_HUGEPAGE, a hint the kernel may
// ignore). A pusher that runs ahead of its workers cycles through up to max_in_flight records, and each op a worker
// then runs was written a window earlier: on 4 KiB pages that window costs a TLB miss per op besides the cache misses
// (bench/notes/2026-11-27-run-bound-window.md).
class Chunks {
 public:
  static constexpr std::size_t kChunk = std::size_t{2} << 20;

  // A new record; throws std::bad_alloc when no chunk can be had.
  OpRecord* carve() {
    if (left_ < sizeof(OpRecord)) {
      void* chunk = std::aligned_alloc(kChunk, kChunk);  // aligned as a huge page must be
      if (chunk == nullptr) throw std::bad_alloc();
      // Not the first chunk (next_ still null): advise it. A hint: failure leaves default pages.
      if (next_ != nullptr) (void)madvise(chunk, kChunk, MADV_HUGEPAGE);
      next_ = static_cast<std::byte*>(chunk);
      left_ = kChunk;
    }
    OpRecord* record = new (next_) OpRecord;
    next_ += sizeof(OpRecord);
    left_ -= sizeof(OpRecord);
    return record;
  }

 private:
  std::byte* next_ = nullptr;
  std::size_t left_ = 0;
};

struct Depot {
  std::mutex mutex;
  std::vector<Stack> full;  // magazines of kMagazine records; guarded by mutex
  Chunks chunks;            // guarded by mutex

  static Depot& instance() {
    static Depot* depot = new Depot;  // immortal: threads may return magazines during static destruction
    return *depot;
  }
};

struct Magazine {
  Stack records;

  ~Magazine() {
    if (records.size == 0) return;
    Depot& depot = Depot::instance();
    std::lock_guard lock(depot.mutex);
    depot.full.push_back(records);
  }
};

// initial-exec: read at a fixed offset from the thread pointer, where the default model's access is a call until the
// linker relaxes it, around which acquire() and release() would save registers.
thread_local Magazine t_magazine [[gnu::tls_model("initial-exec")]];

// The lines of a record that every push writes: lines 0 to 3 of op_record.h's layout (the bases, the function, the op's
// state, the first uses).
constexpr std::size_t kPushedBytes = 4 * 64;

// Starts fetching, for writing, the lines that the push of `record`, the next one acquire() returns, will write. A
// record comes back dirty from the thread that retired it, most often a worker on another core: fetched one push ahead,
// its lines cross while this push goes on, instead of one after another under the next (whose first locked
// instruction would wait for all of them).
void prefetch_pushed_lines(const OpRecord* record) noexcept {
  if (record == nullptr) return;
  const auto* bytes = reinterpret_cast<const std::byte*>(record);
  for (std::size_t offset = 0; offset < kPushedBytes; offset += 64) support::prefetch_for_write(bytes + offset);
}

// Fills the calling thread's empty magazine: from the depot, topped up with new records. Out of line, as is spill(), so
// that the fast paths of acquire() and release() stay a few instructions with no registers to save.
[[gnu::noinline]] void refill(Stack& local) {
  Depot& depot = Depot::instance();
  std::lock_guard lock(depot.mutex);
  if (!depot.full.empty()) {
    local = depot.full.back();
    depot.full.pop_back();
  }
  // A new batch: never freed (see op_record.h), reachable from the depot or a magazine while the process runs.
  for (int i = local.size; i < RecordPool::kMagazine; ++i) local.push(depot.chunks.carve());
}

// Hands a magazine of the calling thread's records to the depot.
[[gnu::noinline]] void spill(Stack& local) noexcept {
  Stack magazine = local.split(RecordPool::kMagazine);
  Depot& depot = Depot::instance();
  std::lock_guard lock(depot.mutex);
  depot.full.push_back(magazine);  // may allocate: a slow path once per kMagazine releases
}

}  // namespace

OpRecord* RecordPool::acquire() {
  Stack& local = t_magazine.records;
  if (local.size == 0) [[unlikely]]
    refill(local);
  OpRecord* record = local.pop();
  prefetch_pushed_lines(local.head);
  return record;
}

void RecordPool::release(OpRecord* record) noexcept {
  Stack& local = t_magazine.records;
  local.push(record);
  if (local.size >= 2 * kMagazine) [[unlikely]]
    spill(local);
}

}  // namespace depengine::detail
