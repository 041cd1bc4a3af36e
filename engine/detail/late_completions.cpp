#include <array>
#include <cstdio>
#include <mutex>
#include <string_view>

#include <depengine/engine/detail/engine_core.h>
#include <depengine/engine/detail/late_completions.h>
#include <depengine/engine/detail/op_record.h>
#include <depengine/engine/op_name.h>

namespace depengine::detail {
namespace {

struct Entry {
  const OpRecord* op = nullptr;  // null: a free entry
  std::uint64_t ticket = 0;
  EngineCore* engine = nullptr;  // null once the engine is being destroyed (forget)
  std::uint64_t owner = 0;       // the op's owner (error_log.h), for an error the late call carries
  OpName name;                   // the op's name: its record serves other ops by the time the late call comes
};

struct Registry {
  std::mutex mutex;
  std::array<Entry, LateCompletions::kKept> entries;  // a ring: `next` overwrites the oldest
  std::size_t next = 0;
  std::size_t used = 0;  // entries[0, used) were ever written: what a search looks at
};

// Never destroyed: a late call may come during static destruction.
Registry& registry() {
  static Registry* const instance = new Registry();
  return *instance;
}

}  // namespace

bool LateCompletions::claim_on_throw(OpRecord* op, std::uint64_t ticket, EngineCore* engine, std::uint64_t owner,
                                     std::string_view name) noexcept {
  Registry& r = registry();
  // Under the mutex, with the entry written before it is released: a call that fails its compare-exchange because of
  // this one then takes the mutex in absorb() and finds the entry.
  std::lock_guard lock(r.mutex);
  std::uint64_t expected = ticket;
  // acq_rel: as Completion::operator()'s compare-exchange, which this one stands in for (and races with).
  if (!op->ticket.compare_exchange_strong(expected, ticket + 1, std::memory_order_acq_rel, std::memory_order_relaxed)) {
    return false;
  }
  Entry& entry = r.entries[r.next];
  r.next = (r.next + 1) % kKept;
  if (r.used < kKept) ++r.used;
  entry.op = op;
  entry.ticket = ticket;
  entry.engine = engine;
  entry.owner = owner;
  try {
    entry.name = name;
  } catch (...) {  // out of memory for a long name: the late call's error, if any, is reported without it
    entry.name = OpName();
  }
  return true;
}

bool LateCompletions::absorb(const OpRecord* op, std::uint64_t ticket, const std::exception_ptr& error) noexcept {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  for (std::size_t i = 0; i < r.used; ++i) {
    Entry& entry = r.entries[i];
    if (entry.op != op || entry.ticket != ticket) continue;
    entry.op = nullptr;  // absorbed once: a further call is a second call
    if (error != nullptr) {
      if (entry.engine != nullptr) {
        // Under the mutex: forget() waits for it, so the engine is alive for the call.
        entry.engine->raise_late(error, entry.name.view(), entry.owner);
      } else {
        const std::string_view name = entry.name.empty() ? std::string_view("(unnamed)") : entry.name.view();
        std::fprintf(stderr,
                     "depengine: op '%.*s' completed late, with an error, after its function had thrown and its "
                     "engine was destroyed; the error is dropped\n",
                     static_cast<int>(name.size()), name.data());
      }
    }
    return true;
  }
  return false;
}

void LateCompletions::forget(const EngineCore* engine) noexcept {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  for (std::size_t i = 0; i < r.used; ++i) {
    if (r.entries[i].engine == engine) r.entries[i].engine = nullptr;
  }
}

}  // namespace depengine::detail
