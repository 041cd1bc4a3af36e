#include <mutex>
#include <vector>

#include "engine/detail/op_record.h"

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

struct Depot {
  std::mutex mutex;
  std::vector<Stack> full;  // magazines of kMagazine records; guarded by mutex

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

thread_local Magazine t_magazine;

}  // namespace

OpRecord* RecordPool::acquire() {
  Stack& local = t_magazine.records;
  if (local.size == 0) {
    Depot& depot = Depot::instance();
    {
      std::lock_guard lock(depot.mutex);
      if (!depot.full.empty()) {
        local = depot.full.back();
        depot.full.pop_back();
      }
    }
    // A new batch: never freed (see op_record.h), reachable from the depot or a magazine while the process runs.
    for (int i = local.size; i < kMagazine; ++i) local.push(new OpRecord);
  }
  return local.pop();
}

void RecordPool::release(OpRecord* record) noexcept {
  Stack& local = t_magazine.records;
  local.push(record);
  if (local.size < 2 * kMagazine) return;
  Stack spill = local.split(kMagazine);
  Depot& depot = Depot::instance();
  std::lock_guard lock(depot.mutex);
  depot.full.push_back(spill);  // may allocate: a slow path once per kMagazine releases
}

}  // namespace depengine::detail
