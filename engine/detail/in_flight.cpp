#include <algorithm>
#include <limits>
#include <optional>
#include <sstream>

#include <depengine/engine/detail/in_flight.h>
#include <depengine/support/spinlock.h>

namespace depengine::detail {
namespace {

// pushed - retired, where the two were read at different moments: retired may then be ahead.
std::size_t difference(std::size_t pushed, std::size_t retired) noexcept {
  return pushed > retired ? pushed - retired : 0;
}

constexpr std::uint64_t kZeroSleeper = std::uint64_t{1} << 32;
constexpr std::uint64_t kLowSleeper = 1;

// The calling thread's number, given the first time it retires an op (see the header); kUnnumbered until then. The
// initial-exec model reads it at a fixed offset from the thread pointer: the default model's access is a call until
// the linker relaxes it, so leave() would save registers around it.
constexpr std::uint32_t kUnnumbered = ~std::uint32_t{0};
constinit thread_local std::uint32_t t_number [[gnu::tls_model("initial-exec")]] = kUnnumbered;
std::atomic<std::uint32_t> g_threads_numbered{0};

// Gives the calling thread its number. Out of line: once per thread.
[[gnu::noinline]] void number_this_thread() noexcept {
  // relaxed: a number, not a hand-off; distinct numbers only spread the threads over the slots.
  t_number = g_threads_numbered.fetch_add(1, std::memory_order_relaxed) & 0x7fffffffU;
}

}  // namespace

InFlight::InFlight(std::size_t max, std::size_t help_above, std::span<const std::unique_ptr<Executor>> helpers) noexcept
    : max_(max),
      low_water_(max * 3 / 4),
      helpers_(helpers),
      help_spin_([helpers] {
        std::chrono::nanoseconds longest{0};
        for (const auto& executor : helpers) {
          if (executor != nullptr) longest = std::max(longest, executor->help_spin());  // null: the engine refuses it
        }
        return longest;
      }()),
      help_above_(help_above),
      help_gap_(std::max<std::size_t>(help_above / 4, 1)),
      help_low_(help_above > help_gap_ ? help_above - help_gap_ : 0),
      help_at_(help_above != 0 ? help_above + 1 : std::numeric_limits<std::size_t>::max()) {}

std::size_t InFlight::upper_bound() const noexcept {
  // seq_cst: also used as the waiters' side of the Dekker pair with leave() (see wait_at_most()).
  const std::size_t retired = retired_total(std::memory_order_seq_cst);
  return difference(pushed_.load(std::memory_order_seq_cst), retired);
}

std::size_t InFlight::now() const noexcept {
  // upper_bound() overestimates when the caller is delayed between its two loads (retired_ read long before pushed_).
  // Here retired_ is summed again after pushed_: when the sum has not moved, no slot has (they only grow), so pushed_
  // was read at a moment when the slots held those values, and the difference is the count at that moment. Completions
  // land every few hundred ns at most, so a retry almost always succeeds at once; after kTries the conservative value
  // is returned rather than spinning on. seq_cst: as in upper_bound().
  constexpr int kTries = 64;
  std::size_t retired = retired_total(std::memory_order_seq_cst);
  std::size_t pushed = 0;
  for (int i = 0; i < kTries; ++i) {
    pushed = pushed_.load(std::memory_order_seq_cst);
    const std::size_t again = retired_total(std::memory_order_seq_cst);
    if (again == retired) break;
    retired = again;
  }
  return difference(pushed, retired);
}

// Lists the calling thread, waiting at the bound, in waiting_ for its lifetime (blocked()).
class InFlight::Listed {
 public:
  Listed(InFlight& in_flight, const char* api, std::string_view name, std::size_t graph_ops, std::size_t resumes_at)
      : in_flight_(in_flight),
        waiting_{api, name, graph_ops, resumes_at, std::this_thread::get_id(), std::chrono::steady_clock::now()} {
    std::lock_guard lock(in_flight_.waiting_mutex_);
    waiting_.next = in_flight_.waiting_;
    in_flight_.waiting_ = &waiting_;
  }
  ~Listed() {
    std::lock_guard lock(in_flight_.waiting_mutex_);
    Waiting** link = &in_flight_.waiting_;
    while (*link != &waiting_) link = &(*link)->next;
    *link = waiting_.next;
  }
  Listed(const Listed&) = delete;
  Listed& operator=(const Listed&) = delete;

 private:
  InFlight& in_flight_;
  Waiting waiting_;
};

// An op that try_admit() found at the bound by its view of retired_: looks at the slots, and waits while the bound is
// reached. Off the push's common path, it lists itself for reports (a node on its stack, a mutex) once it waits.
bool InFlight::admit_at_bound(const char* api, std::string_view name) {
  if (closed_.load(std::memory_order_relaxed)) return false;  // relaxed: see close()
  std::optional<Listed> listed;                               // from the first wait on
  // relaxed throughout: as in try_admit().
  std::size_t pushed = pushed_.load(std::memory_order_relaxed);
  for (;;) {
    if (difference(pushed, retired_view_.load(std::memory_order_relaxed)) >= max_) {
      const std::size_t retired = retired_total(std::memory_order_relaxed);
      retired_view_.store(retired, std::memory_order_relaxed);
      if (difference(pushed, retired) >= max_) {
        if (!listed.has_value()) listed.emplace(*this, api, name, 0, low_water_);
        wait_at_most(low_water_);
        pushed = pushed_.load(std::memory_order_relaxed);
        continue;
      }
    }
    if (pushed_.compare_exchange_weak(pushed, pushed + 1, std::memory_order_relaxed)) return true;
  }
}

bool InFlight::admit_many(std::size_t count, bool exempt) {
  if (exempt) {
    // relaxed: as in try_admit().
    pushed_.fetch_add(count, std::memory_order_relaxed);
    return true;
  }
  if (closed_.load(std::memory_order_relaxed)) [[unlikely]]  // relaxed: see close()
    return false;
  // relaxed throughout: as in try_admit(). The waits are for the levels leave() announces: the low water mark when the
  // replay fits above it, else zero.
  const std::size_t level = count <= max_ - low_water_ ? low_water_ : 0;
  std::optional<Listed> listed;  // from the first wait on
  std::size_t pushed = pushed_.load(std::memory_order_relaxed);
  for (;;) {
    if (difference(pushed, retired_total(std::memory_order_relaxed)) + count > max_) {
      if (!listed.has_value()) listed.emplace(*this, "Replay", std::string_view{}, count, level);
      wait_at_most(level);
      pushed = pushed_.load(std::memory_order_relaxed);
      continue;
    }
    if (pushed_.compare_exchange_weak(pushed, pushed + count, std::memory_order_relaxed)) return true;
  }
}

std::vector<InFlight::Blocked> InFlight::blocked() const {
  const auto now = std::chrono::steady_clock::now();
  std::vector<Blocked> out;
  std::lock_guard lock(waiting_mutex_);
  for (const Waiting* waiting = waiting_; waiting != nullptr; waiting = waiting->next) {
    std::string what = waiting->api;
    if (waiting->graph_ops > 0) {
      what += " of a graph of " + std::to_string(waiting->graph_ops) + " ops";
    } else {
      what += waiting->name.empty() ? " of an unnamed op" : " of op '" + std::string(waiting->name) + "'";
    }
    std::ostringstream thread;
    thread << waiting->thread;
    out.push_back(Blocked{std::move(what), waiting->resumes_at, thread.str(), now - waiting->since});
  }
  return out;
}

void InFlight::leave(std::size_t ops) noexcept {
  // seq_cst, with the seq_cst load of sleepers_: a Dekker pair with wait_at_most(), which raises sleepers_ and then
  // reads the counts. One of the two sees the other, so no sleeper misses the level it waits for.
  const std::uint32_t number = t_number;
  if (number == kUnnumbered) [[unlikely]]
    return leave_first(ops);
  retired_[number % kRetireSlots].count.fetch_add(ops, std::memory_order_seq_cst);
  const std::uint64_t sleepers = sleepers_.load(std::memory_order_seq_cst);
  if (sleepers != 0) [[unlikely]]
    return wake_sleepers(sleepers);
}

// leave() on a thread that has not retired an op before: numbers it (its slot: see the header) first.
void InFlight::leave_first(std::size_t ops) noexcept {
  number_this_thread();
  leave(ops);
}

// leave() found threads asleep in wait_at_most(), waiting for a level: wakes them if the count has reached it.
void InFlight::wake_sleepers(std::uint64_t sleepers) noexcept {
  // seq_cst: the sum sees every increment before ours in the single total order, so of threads retiring at once the
  // last sees them all. Every op counted was pushed before it retired, and pushed_ is read after the sum, so the
  // difference is exact when it reaches zero, and at worst an overestimate otherwise (a later leave() then wakes).
  const std::size_t retired = retired_total(std::memory_order_seq_cst);
  const std::size_t count = difference(pushed_.load(std::memory_order_seq_cst), retired);
  if ((count == 0 && sleepers >= kZeroSleeper) || (count <= low_water_ && (sleepers & (kZeroSleeper - 1)) != 0)) {
    std::lock_guard lock(wake_mutex_);
    wake_cv_.notify_all();
  }
}

void InFlight::help_while_ahead() noexcept {
  // relaxed throughout: as in admit_at_bound(). A stale sum overestimates the count, which costs at most one more help.
  const auto count = [this] {
    const std::size_t retired = retired_total(std::memory_order_relaxed);
    retired_view_.store(retired, std::memory_order_relaxed);
    return difference(pushed_.load(std::memory_order_relaxed), retired);
  };
  std::size_t in_flight = count();
  bool helped = false;
  if (in_flight > help_above_) {
    // Counts again only every kHelpsPerCount helps: a count reads every retire slot, lines the workers write.
    for (;;) {
      std::size_t ran = 0;
      while (ran < kHelpsPerCount && help()) ++ran;
      helped = helped || ran != 0;
      in_flight = count();
      if (ran < kHelpsPerCount || in_flight <= help_low_) break;
    }
  }
  // When to look again. Under the bound: not before pushes could take the count above it, and at least help_gap_
  // pushes later. Above it, no queued work left: on the next push if this call ran some (the workers are behind, and
  // their completions queue more), else after twice as many pushes as the last time, up to help_gap_, so that a count
  // held up by ops that are not queued (a long chain the workers run on their own) costs a look per help_gap_ pushes.
  std::size_t next = 1;
  if (in_flight <= help_above_) {
    next = std::max(help_above_ - in_flight, help_gap_);
  } else if (!helped) {
    next = std::min(help_backoff_.load(std::memory_order_relaxed) * 2, help_gap_);
  }
  // relaxed, both: hints that pushers share; a lost update costs one look more or less.
  help_backoff_.store(in_flight > help_above_ && !helped ? next : 1, std::memory_order_relaxed);
  help_at_.store(pushed_.load(std::memory_order_relaxed) + next, std::memory_order_relaxed);
}

bool InFlight::help() noexcept {
  for (const auto& executor : helpers_) {
    if (executor->try_help()) return true;
  }
  return false;
}

void InFlight::notify_waiters() noexcept {
  std::lock_guard lock(wake_mutex_);
  wake_cv_.notify_all();
}

void InFlight::wake_helpers() noexcept {
  // relaxed: looking first keeps the line shared while a ring is pending. It sees the clear of every helper that the
  // caller's helpers_asleep() found asleep: that load acquired the helper's count, made after its clear. seq_cst: one
  // caller rings per clear.
  if (rung_.load(std::memory_order_relaxed) || rung_.exchange(true, std::memory_order_seq_cst)) return;
  std::lock_guard lock(wake_mutex_);
  ++rings_;
  wake_cv_.notify_all();
}

// `level` is 0 or low_water_, the levels leave() announces. When it returns, the effects of the retired ops are
// visible: upper_bound()'s seq_cst loads acquire what leave()'s seq_cst increments released.
void InFlight::wait_at_most(std::size_t level) {
  const auto done = [this, level] { return upper_bound() <= level; };
  help_until([](const void* context) { return (*static_cast<const decltype(done)*>(context))(); }, &done,
             level == 0 ? kZeroSleeper : kLowSleeper);
}

void InFlight::help_until(bool (*done)(const void* context), const void* context, std::uint64_t sleeper) {
  using Clock = std::chrono::steady_clock;
  Clock::time_point give_up{};
  while (!done(context)) {
    if (help()) {
      give_up = Clock::time_point{};
      continue;
    }
    // Keep looking for a while, as a worker of the executors that asked for it would (help_spin_).
    if (help_spin_.count() > 0) {
      const Clock::time_point now = Clock::now();
      if (give_up == Clock::time_point{}) give_up = now + help_spin_;
      if (now < give_up) {
        for (int i = 0; i < 64; ++i) support::cpu_relax();
        continue;
      }
      give_up = Clock::time_point{};
    }
    std::uint64_t seen = 0;
    {
      std::lock_guard lock(wake_mutex_);
      seen = rings_;
    }
    // seq_cst: a ring that sees this clear comes after it, so after `seen` was read, and wakes us.
    rung_.store(false, std::memory_order_seq_cst);
    // seq_cst, both, and the fence: the waiter's half of two Dekker pairs. With leave(): sleepers_ is raised before
    // done() reads the counts (seq_cst loads), and leave() raises retired_ before it reads sleepers_. With an
    // executor's work (ExecutorHost::helpers_asleep): asleep_ is raised before help() looks for work again (the
    // fence orders its relaxed hint loads after it), and the executor publishes the work before it reads asleep_.
    if (sleeper != 0) sleepers_.fetch_add(sleeper, std::memory_order_seq_cst);
    asleep_.fetch_add(1, std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (!done(context) && !help()) {
      std::unique_lock lock(wake_mutex_);
      wake_cv_.wait(lock, [&] { return rings_ != seen || done(context); });
    }
    // relaxed: leaving late costs at most a spurious notify.
    asleep_.fetch_sub(1, std::memory_order_relaxed);
    if (sleeper != 0) sleepers_.fetch_sub(sleeper, std::memory_order_relaxed);
  }
}

}  // namespace depengine::detail
