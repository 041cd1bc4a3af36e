// ThreadPoolExecutor (executors/threadpool/threadpool_executor.h) against its Executor contract, without an engine: a
// fake ExecutorHost runs scripted tasks, so each promise of the header is observed directly — every task runs once,
// a chain made ready by completions stays on one thread, urgent tasks run first, try_help runs a queued task on the
// caller, never more tasks run at once than there are workers, and stop() returns only once every drainer is gone.
#include <oneapi/tbb/global_control.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <functional>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include <depengine/executors/executor.h>
#include <depengine/executors/ready_queue.h>
#include <depengine/executors/threadpool/threadpool_executor.h>
#include <depengine/support/spinlock.h>

#include "test/test_support.h"

namespace depengine::test {
namespace {

// Atomics: ScriptedTask::runs is release/acquire (ran()); the other flags and counters (timed_out, rings, met) carry no
// data, and are read by the test thread after stop(), whose join orders them, or only compared: relaxed.

// A task whose body the test scripts. `successors` are made ready when it completes, as the engine's completions do.
struct ScriptedTask : Task {
  ScriptedTask(Executor* runs_on, std::int32_t urgency) {
    executor_ = runs_on;
    priority_ = urgency;
  }
  std::function<void(int worker)> body;
  std::vector<ScriptedTask*> successors;
  // How many times it has run, as the test thread sees it. acquire: pairs with the release in FakeHost::execute, so a
  // test that sees a run also sees what the body wrote and everything ordered before the run.
  [[nodiscard]] int ran() const noexcept { return runs.load(std::memory_order_acquire); }
  std::atomic<int> runs{0};
  std::thread::id thread;  // written by the one run; read after the executor is stopped
  int worker = -2;
};

// Runs a ScriptedTask's body and hands its successors back through `ready`. Tracks how many run at once.
class FakeHost final : public ExecutorHost {
 public:
  void execute(Task& task, int worker, TaskList& ready) noexcept override {
    auto& scripted = static_cast<ScriptedTask&>(task);
    // relaxed: counters read for statistics after stop(), whose join orders them.
    const int now = running_.fetch_add(1, std::memory_order_relaxed) + 1;
    int seen = max_running_.load(std::memory_order_relaxed);
    while (now > seen && !max_running_.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
    }
    scripted.thread = std::this_thread::get_id();
    scripted.worker = worker;
    if (scripted.body) scripted.body(worker);
    scripted.runs.fetch_add(1, std::memory_order_release);  // release: pairs with the acquire in ScriptedTask::ran()
    running_.fetch_sub(1, std::memory_order_relaxed);
    for (ScriptedTask* next : scripted.successors) ready.push_back(next);
  }

  [[nodiscard]] int max_running() const noexcept { return max_running_.load(std::memory_order_relaxed); }

  // Helping threads: the test says whether one sleeps, and counts the pool's calls to wake it.
  [[nodiscard]] bool helpers_asleep() const noexcept override {
    return helper_asleep.load(std::memory_order_seq_cst);  // seq_cst: as ExecutorHost asks
  }
  void wake_helpers() noexcept override { rings.fetch_add(1, std::memory_order_relaxed); }  // relaxed: a count
  std::atomic<bool> helper_asleep{false};
  std::atomic<int> rings{0};

  // The stream-executor half of the host: a CPU executor never calls it (these abort the test if it does).
  [[nodiscard]] Tracker& tracker() noexcept override { return tracker_; }
  [[nodiscard]] const WaitFrontier& requirement(const Task&) const noexcept override { std::abort(); }
  [[nodiscard]] bool issue(Task&, const StreamPlacement&, FrontierEntry, std::uint32_t, TaskList&) noexcept override {
    std::abort();
  }
  void skip(Task&, std::exception_ptr, TaskList&) noexcept override { std::abort(); }
  void complete_issued(Task&, std::exception_ptr) noexcept override { std::abort(); }

 private:
  Tracker tracker_;
  std::atomic<int> running_{0};
  std::atomic<int> max_running_{0};
};

// A flag one thread raises and a task body waits for (with a deadline that fails the test rather than hanging). The
// body runs on a worker, where Catch2 may not assert (it is not thread-safe): a timeout is recorded for the test
// thread to check.
struct Gate {
  std::atomic<bool> open{false};
  std::atomic<bool> entered{false};
  std::atomic<bool> timed_out{false};
  void hold() {
    // release: publishes "the worker is inside the gate" to the acquire in reached().
    entered.store(true, std::memory_order_release);
    // acquire: pairs with the release in let_go().
    if (!wait_until([&] { return open.load(std::memory_order_acquire); })) {
      timed_out.store(true, std::memory_order_relaxed);  // relaxed: read after stop(), which joins the worker
    }
  }
  void let_go() { open.store(true, std::memory_order_release); }
  [[nodiscard]] bool reached() {
    return wait_until([&] { return entered.load(std::memory_order_acquire); });
  }
};

// The order in which task bodies ran, by id (they may run on any thread).
class RunOrder {
 public:
  [[nodiscard]] std::function<void(int)> body(int id) {
    return [this, id](int) {
      std::lock_guard lock(mutex_);
      ids_.push_back(id);
    };
  }
  [[nodiscard]] std::vector<int> ids() {
    std::lock_guard lock(mutex_);
    return ids_;
  }

 private:
  std::mutex mutex_;
  std::vector<int> ids_;  // guarded by mutex_
};

TEST_CASE("a negative worker count is rejected with a message", "[executors][threadpool]") {
  CHECK_THROWS_WITH(ThreadPoolExecutor(ThreadPoolOptions{.workers = -1}), Catch::Contains("workers must be >= 0"));
  CHECK(ThreadPoolExecutor(ThreadPoolOptions{.workers = 0}).workers() >= 1);
}

TEST_CASE("DEPENGINE_CPU_WORKERS sets the default worker count; a bad value is refused", "[executors][threadpool]") {
  {
    const ScopedEnv env("DEPENGINE_CPU_WORKERS", "3");
    CHECK(ThreadPoolExecutor().workers() == 3);
    CHECK(ThreadPoolExecutor(ThreadPoolOptions{.workers = 2}).workers() == 2);  // an explicit count wins
  }
  const ScopedEnv env("DEPENGINE_CPU_WORKERS", "three");
  CHECK_THROWS_WITH(ThreadPoolExecutor(), Catch::Contains("DEPENGINE_CPU_WORKERS='three'"));
}

TEST_CASE("every submitted task runs exactly once, from many submitting threads", "[executors][threadpool]") {
  for (const int workers : {1, 2}) {
    DYNAMIC_SECTION("workers " << workers) {
      Watchdog watchdog("threadpool runs every task");
      FakeHost host;
      ThreadPoolExecutor pool(ThreadPoolOptions{.workers = workers});
      pool.start(host);
      const std::size_t per_thread = sized(20'000, 2'000, 5'000);
      std::vector<std::deque<ScriptedTask>> tasks(3);
      for (auto& list : tasks) {
        for (std::size_t i = 0; i < per_thread; ++i) list.emplace_back(&pool, static_cast<std::int32_t>(i % 3) - 1);
      }
      std::vector<std::thread> submitters;
      for (auto& list : tasks) {
        submitters.emplace_back([&pool, &list] {
          for (ScriptedTask& task : list) pool.submit(task);
        });
      }
      for (std::thread& t : submitters) t.join();
      REQUIRE(wait_until([&] {
        return std::all_of(tasks.begin(), tasks.end(), [](const auto& list) {
          return std::all_of(list.begin(), list.end(), [](const ScriptedTask& t) { return t.ran() > 0; });
        });
      }));
      pool.stop();
      for (const auto& list : tasks) {
        for (const ScriptedTask& task : list) REQUIRE(task.ran() == 1);
      }
      CHECK(host.max_running() <= workers);
    }
  }
}

TEST_CASE("a submit racing with a drainer that gives up is never lost", "[executors][threadpool]") {
  // With no spin, a drainer that finds the queues empty gives up at once, so nearly every submit below lands while the
  // only drainer is leaving: the Dekker pair between submit() and giving up (threadpool_executor.cpp, next_task()) must
  // either keep that drainer or start another. A lost wake-up leaves a task unrun, which wait_until reports. Between
  // rounds the test thread idles for a random while, so that submits land at every point of a drainer's spin and exit.
  const unsigned seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> idle_pauses(0, 600);
  for (const int workers : {1, 2}) {
    DYNAMIC_SECTION("workers " << workers) {
      Watchdog watchdog("threadpool wake race");
      FakeHost host;
      ThreadPoolExecutor pool(ThreadPoolOptions{.workers = workers, .spin = std::chrono::nanoseconds(0)});
      pool.start(host);
      const std::size_t rounds = sized(2'000, 500, 1'000);
      std::deque<ScriptedTask> tasks;
      for (std::size_t i = 0; i < rounds; ++i) tasks.emplace_back(&pool, 0);
      std::size_t unrun = 0;
      for (ScriptedTask& task : tasks) {
        for (int i = idle_pauses(rng); i > 0; --i) support::cpu_relax();
        pool.submit(task);
        if (!wait_until([&] { return task.ran() == 1; }, std::chrono::seconds(2))) ++unrun;
      }
      pool.stop();
      CHECK(unrun == 0);
      CHECK(host.max_running() <= workers);
    }
  }
}

TEST_CASE("a pool raises oneTBB's process-wide thread limit only when its workers need it", "[executors][threadpool]") {
  using tbb::global_control;
  const std::size_t before = global_control::active_value(global_control::max_allowed_parallelism);
  REQUIRE(before >= 2);
  {
    // Fits: workers + 1 <= the limit (oneTBB counts the thread that starts it). The pool holds no control of its own,
    // so the application may still raise the limit (oneTBB keeps the smallest of the controls alive: one held by the
    // pool would cap the application's).
    ThreadPoolExecutor pool(ThreadPoolOptions{.workers = static_cast<int>(before) - 1});
    CHECK(global_control::active_value(global_control::max_allowed_parallelism) == before);
    const global_control application(global_control::max_allowed_parallelism, before + 4);
    CHECK(global_control::active_value(global_control::max_allowed_parallelism) == before + 4);
  }
  {
    // Does not fit: raised to workers + 1 while the pool lives, and no further.
    ThreadPoolExecutor pool(ThreadPoolOptions{.workers = static_cast<int>(before) + 2});
    CHECK(global_control::active_value(global_control::max_allowed_parallelism) == before + 3);
  }
  CHECK(global_control::active_value(global_control::max_allowed_parallelism) == before);
}

TEST_CASE("a chain made ready by completions stays on the worker that started it", "[executors][threadpool]") {
  Watchdog watchdog("threadpool chain");
  FakeHost host;
  ThreadPoolExecutor pool(ThreadPoolOptions{.workers = 2});
  pool.start(host);
  std::deque<ScriptedTask> chain;
  const std::size_t length = sized(10'000, 1'000, 2'000);
  for (std::size_t i = 0; i < length; ++i) chain.emplace_back(&pool, 0);
  for (std::size_t i = 0; i + 1 < length; ++i) chain[i].successors.push_back(&chain[i + 1]);
  pool.submit(chain.front());
  REQUIRE(wait_until([&] { return chain.back().ran() == 1; }));
  pool.stop();
  for (const ScriptedTask& task : chain) {
    REQUIRE(task.ran() == 1);
    REQUIRE(task.thread == chain.front().thread);
    REQUIRE(task.worker == chain.front().worker);
  }
  CHECK(chain.front().worker >= 0);  // a pool worker, not a helper
}

TEST_CASE("a pool of 1 worker keeps what its completions make ready in its worker's slot", "[executors][threadpool]") {
  // oneTBB numbers the one worker of a 1-slot arena 1, not 0: the slots must cover that index. A worker without a
  // slot would submit the fan-out to the inbox, where run_here() (an op still in the inbox) sees it.
  Watchdog watchdog("threadpool 1-worker slot");
  FakeHost host;
  ThreadPoolExecutor pool(ThreadPoolOptions{.workers = 1});
  pool.start(host);
  ScriptedTask probe(&pool, 0);
  std::deque<ScriptedTask> fan;
  for (int i = 0; i < 9; ++i) fan.emplace_back(&pool, 0);
  for (std::size_t i = 1; i < fan.size(); ++i) fan[0].successors.push_back(&fan[i]);
  std::atomic<bool> inbox_seen{true};
  fan[1].body = [&](int) {  // the successor the worker runs next: the other seven wait in its slot meanwhile
    inbox_seen.store(pool.run_here(probe), std::memory_order_relaxed);  // relaxed: read after stop()
  };
  pool.submit(fan[0]);
  REQUIRE(wait_until(
      [&] { return std::all_of(fan.begin(), fan.end(), [](const ScriptedTask& t) { return t.ran() == 1; }); }));
  pool.stop();
  CHECK_FALSE(inbox_seen.load(std::memory_order_relaxed));
  for (const ScriptedTask& task : fan) {
    CHECK(task.worker >= 0);
    CHECK(task.worker <= pool.workers());  // RunContext::worker: from 0 to workers()
  }
}

TEST_CASE("of several successors the worker keeps the most urgent and queues the rest", "[executors][threadpool]") {
  // One worker: the first task makes three ready; the urgent one must run next, on the same thread, before the
  // others (which wait in the queue behind it).
  Watchdog watchdog("threadpool successor choice");
  FakeHost host;
  ThreadPoolExecutor pool(ThreadPoolOptions{.workers = 1});
  pool.start(host);
  RunOrder order;
  ScriptedTask first(&pool, 0), low(&pool, 0), urgent(&pool, 5), low2(&pool, 0);
  first.body = order.body(0);
  low.body = order.body(1);
  urgent.body = order.body(2);
  low2.body = order.body(3);
  first.successors = {&low, &urgent, &low2};
  pool.submit(first);
  REQUIRE(wait_until([&] { return low.ran() + urgent.ran() + low2.ran() == 3; }));
  pool.stop();
  const std::vector<int> ran = order.ids();
  REQUIRE(ran.size() == 4);
  CHECK(ran[1] == 2);
  CHECK(urgent.thread == first.thread);
}

TEST_CASE("queued urgent tasks run before queued normal ones, each in submission order",
          "[executors][threadpool][priority]") {
  Watchdog watchdog("threadpool priority");
  FakeHost host;
  ThreadPoolExecutor pool(ThreadPoolOptions{.workers = 1});
  pool.start(host);
  Gate gate;
  ScriptedTask blocker(&pool, 0);
  blocker.body = [&](int) { gate.hold(); };
  pool.submit(blocker);
  REQUIRE(gate.reached());  // the only worker is busy: what follows queues up
  std::mutex order_mutex;
  std::vector<int> order;  // task indices
  std::deque<ScriptedTask> tasks;
  for (int i = 0; i < 8; ++i) {
    tasks.emplace_back(&pool, i % 2 == 0 ? 0 : 1);
    tasks.back().body = [&, i](int) {
      std::lock_guard lock(order_mutex);
      order.push_back(i);
    };
  }
  for (ScriptedTask& task : tasks) pool.submit(task);
  gate.let_go();
  REQUIRE(wait_until(
      [&] { return std::all_of(tasks.begin(), tasks.end(), [](const ScriptedTask& t) { return t.ran() == 1; }); }));
  pool.stop();
  CHECK_FALSE(gate.timed_out.load(std::memory_order_relaxed));
  // Odd indices are urgent. The tasks waited in the inbox, newest first, until the worker was free: it must restore
  // submission order among equals.
  CHECK(order == std::vector<int>{1, 3, 5, 7, 0, 2, 4, 6});
}

TEST_CASE("try_help runs a queued task on the calling thread and reports an empty queue", "[executors][threadpool]") {
  Watchdog watchdog("threadpool try_help");
  FakeHost host;
  ThreadPoolExecutor pool(ThreadPoolOptions{.workers = 1});
  pool.start(host);
  CHECK_FALSE(pool.try_help());
  Gate gate;
  ScriptedTask blocker(&pool, 0), queued(&pool, 0), successor(&pool, 0);
  blocker.body = [&](int) { gate.hold(); };
  queued.successors = {&successor};
  pool.submit(blocker);
  REQUIRE(gate.reached());
  pool.submit(queued);
  CHECK(pool.try_help());
  CHECK(queued.ran() == 1);
  CHECK(queued.thread == std::this_thread::get_id());
  CHECK(queued.worker == -1);
  // A helper runs the chain it starts, as a worker does: the successor ran on it too, in the same call.
  CHECK(successor.ran() == 1);
  CHECK(successor.thread == std::this_thread::get_id());
  CHECK_FALSE(pool.try_help());
  gate.let_go();
  pool.stop();
  CHECK_FALSE(gate.timed_out.load(std::memory_order_relaxed));
  CHECK(blocker.ran() == 1);
}

// threadpool_executor.h: a helper runs a chain as a worker would, but returns to its wait within a bounded number of
// ops, so that a chain fed without end cannot keep it from its own condition. With and without waiters_work.
TEST_CASE("a helping thread runs the chain it starts, a bounded part of it per call", "[executors][threadpool]") {
  Watchdog watchdog("threadpool helper chain");
  for (const bool waiters_work : {true, false}) {
    FakeHost host;
    ThreadPoolExecutor pool(ThreadPoolOptions{.workers = 1, .waiters_work = waiters_work});
    pool.start(host);
    Gate gate;
    ScriptedTask blocker(&pool, 0);
    blocker.body = [&](int) { gate.hold(); };
    pool.submit(blocker);
    REQUIRE(gate.reached());  // the one worker is taken: only this thread runs the chain
    std::deque<ScriptedTask> chain;
    for (int i = 0; i < 200; ++i) chain.emplace_back(&pool, 0);
    for (std::size_t i = 0; i + 1 < chain.size(); ++i) chain[i].successors.push_back(&chain[i + 1]);
    pool.submit(chain.front());
    const auto ran = [&] {
      return std::count_if(chain.begin(), chain.end(), [](const ScriptedTask& t) { return t.ran() == 1; });
    };
    REQUIRE(pool.try_help());
    const auto first_call = ran();
    CHECK(first_call > 1);                  // more than the op it found: the chain went on, on this thread
    CHECK(first_call < std::ssize(chain));  // but not to its end
    int calls = 1;
    while (pool.try_help()) ++calls;
    CHECK(ran() == std::ssize(chain));
    CHECK(calls > 1);
    for (const ScriptedTask& task : chain) CHECK(task.thread == std::this_thread::get_id());
    gate.let_go();
    pool.stop();
    CHECK_FALSE(gate.timed_out.load(std::memory_order_relaxed));
  }
}

// "A waiting thread as a worker" (ThreadPoolOptions::waiters_work): work made ready while every worker is busy and
// none searches wakes a helper that sleeps; without the option, helpers are neither woken nor asked to keep looking.
TEST_CASE("a pool whose waiters work wakes a sleeping helper for work no worker takes", "[executors][threadpool]") {
  Watchdog watchdog("threadpool helper wake");
  for (const bool waiters_work : {true, false}) {
    FakeHost host;
    ThreadPoolExecutor pool(
        ThreadPoolOptions{.workers = 1, .spin = std::chrono::microseconds(50), .waiters_work = waiters_work});
    CHECK(pool.help_spin() == (waiters_work ? std::chrono::microseconds(50) : std::chrono::microseconds(0)));
    pool.start(host);
    Gate gate;
    ScriptedTask blocker(&pool, 0), queued(&pool, 0), later(&pool, 0);
    blocker.body = [&](int) { gate.hold(); };
    pool.submit(blocker);
    REQUIRE(gate.reached());  // the one worker runs it: every worker is busy, none searches
    pool.submit(queued);
    CHECK(host.rings.load(std::memory_order_relaxed) == 0);  // no helper sleeps
    host.helper_asleep.store(true, std::memory_order_seq_cst);
    pool.submit(later);
    CHECK(host.rings.load(std::memory_order_relaxed) == (waiters_work ? 1 : 0));
    host.helper_asleep.store(false, std::memory_order_seq_cst);
    gate.let_go();
    REQUIRE(wait_until([&] { return later.ran() == 1 && queued.ran() == 1; }));
    pool.stop();
    CHECK_FALSE(gate.timed_out.load(std::memory_order_relaxed));
  }
}

// The hint behind "Yielding to a thread that pushes" (threadpool_executor.h): what sets it and what clears it.
TEST_CASE("submits from outside the pool mark it until a waiting thread finds nothing to help with; a worker's do not",
          "[executors][threadpool]") {
  Watchdog watchdog("threadpool outside submits");
  FakeHost host;
  ThreadPoolExecutor pool(ThreadPoolOptions{.workers = 1});
  pool.start(host);
  CHECK_FALSE(pool.outside_submitting());
  Gate gate;
  ScriptedTask blocker(&pool, 0), inner(&pool, 0);
  blocker.body = [&](int) {
    gate.hold();
    pool.submit(inner);  // from the worker, once let go
  };
  pool.submit(blocker);  // from this thread, outside the pool
  CHECK(pool.outside_submitting());
  REQUIRE(gate.reached());
  // The only worker is inside `blocker` and nothing is queued: a waiting thread finds nothing, and clears the mark.
  CHECK_FALSE(pool.try_help());
  CHECK_FALSE(pool.outside_submitting());
  gate.let_go();
  REQUIRE(wait_until([&] { return inner.ran() == 1; }));
  pool.stop();
  CHECK_FALSE(gate.timed_out.load(std::memory_order_relaxed));
  CHECK_FALSE(pool.outside_submitting());
  CHECK(inner.thread == blocker.thread);
}

TEST_CASE("two workers run two blocked tasks at once, and never more", "[executors][threadpool]") {
  Watchdog watchdog("threadpool parallelism");
  FakeHost host;
  ThreadPoolExecutor pool(ThreadPoolOptions{.workers = 2});
  pool.start(host);
  Rendezvous both(2);
  std::atomic<int> met{0};
  std::deque<ScriptedTask> tasks;
  for (int i = 0; i < 2; ++i) {
    tasks.emplace_back(&pool, 0);
    tasks.back().body = [&](int) {
      if (both.arrive_and_wait()) met.fetch_add(1, std::memory_order_relaxed);
    };
  }
  for (ScriptedTask& task : tasks) pool.submit(task);
  REQUIRE(wait_until([&] { return tasks[0].ran() + tasks[1].ran() == 2; }));
  pool.stop();
  CHECK(met.load(std::memory_order_relaxed) == 2);  // both were inside their bodies at the same time
  CHECK(tasks[0].thread != tasks[1].thread);
  CHECK(host.max_running() == 2);
}

// A worker keeps what its completions made ready, beyond the task it runs next, in a slot of its own
// (threadpool_executor.h); other threads must still reach those tasks, or a blocked worker would strand them.
TEST_CASE("a worker's own ready tasks are taken by another worker while it is blocked", "[executors][threadpool]") {
  Watchdog watchdog("threadpool steal");
  FakeHost host;
  ThreadPoolExecutor pool(ThreadPoolOptions{.workers = 2});
  pool.start(host);
  ScriptedTask first(&pool, 0), blocker(&pool, 0), other(&pool, 0);
  std::atomic<bool> timed_out{false};
  // The worker keeps `blocker` to run next and `other` in its slot; `blocker` waits for `other` to have run.
  blocker.body = [&](int) {
    // relaxed: read after stop(), which joins the workers.
    if (!wait_until([&] { return other.ran() == 1; })) timed_out.store(true, std::memory_order_relaxed);
  };
  first.successors = {&blocker, &other};
  pool.submit(first);
  REQUIRE(wait_until([&] { return blocker.ran() == 1; }));
  pool.stop();
  CHECK_FALSE(timed_out.load(std::memory_order_relaxed));
  CHECK(blocker.thread == first.thread);
  CHECK(other.thread != blocker.thread);
  CHECK(other.worker >= 0);
}

TEST_CASE("the one op a completion makes ready beside the next one runs on the worker searching for work",
          "[executors][threadpool]") {
  // Both workers up: `first` waits until `idler` has run on the other worker, which then searches for work (for up to
  // 100 ms before it gives its thread back). `first` makes `blocker` and `other` ready: its worker runs `blocker` next
  // and hands `other` to the searcher (the hand-off cell), and `blocker` waits for `other` to have run.
  Watchdog watchdog("threadpool hand-off");
  FakeHost host;
  ThreadPoolExecutor pool(ThreadPoolOptions{.workers = 2, .spin = std::chrono::milliseconds(100)});
  pool.start(host);
  ScriptedTask first(&pool, 0), idler(&pool, 0), blocker(&pool, 0), other(&pool, 0);
  std::atomic<bool> timed_out{false};
  first.body = [&](int) {
    // relaxed: read after stop(), which joins the workers.
    if (!wait_until([&] { return idler.ran() == 1; })) timed_out.store(true, std::memory_order_relaxed);
  };
  blocker.body = [&](int) {
    if (!wait_until([&] { return other.ran() == 1; })) timed_out.store(true, std::memory_order_relaxed);
  };
  first.successors = {&blocker, &other};
  pool.submit(first);
  pool.submit(idler);
  REQUIRE(wait_until([&] { return blocker.ran() == 1; }));
  pool.stop();
  CHECK_FALSE(timed_out.load(std::memory_order_relaxed));
  CHECK(blocker.thread == first.thread);
  CHECK(idler.thread != first.thread);
  CHECK(other.thread == idler.thread);
}

TEST_CASE("a waiting thread helps with a worker's own ready tasks", "[executors][threadpool]") {
  Watchdog watchdog("threadpool help from a slot");
  FakeHost host;
  ThreadPoolExecutor pool(ThreadPoolOptions{.workers = 1});
  pool.start(host);
  ScriptedTask first(&pool, 0), blocker(&pool, 0), other(&pool, 0);
  std::atomic<bool> timed_out{false};
  std::atomic<bool> blocked{false};
  blocker.body = [&](int) {
    // release: pairs with the acquire below; the worker is inside `blocker`, `other` in its slot.
    blocked.store(true, std::memory_order_release);
    // relaxed: read after stop(), which joins the worker.
    if (!wait_until([&] { return other.ran() == 1; })) timed_out.store(true, std::memory_order_relaxed);
  };
  first.successors = {&blocker, &other};
  pool.submit(first);
  // Not before: this thread would run `first` itself, and its successors would go to the queue, not to a slot.
  REQUIRE(wait_until([&] { return blocked.load(std::memory_order_acquire); }));
  // The only worker is blocked in `blocker`, with `other` in its slot: only this thread can run it.
  REQUIRE(wait_until([&] { return other.ran() == 1 || pool.try_help(); }));
  REQUIRE(wait_until([&] { return blocker.ran() == 1; }));
  pool.stop();
  CHECK_FALSE(timed_out.load(std::memory_order_relaxed));
  CHECK(other.thread == std::this_thread::get_id());
  CHECK(other.worker == -1);
}

TEST_CASE("an urgent task submitted meanwhile runs before the rest of a worker's own tasks",
          "[executors][threadpool][priority]") {
  Watchdog watchdog("threadpool urgent before slot");
  FakeHost host;
  ThreadPoolExecutor pool(ThreadPoolOptions{.workers = 1});
  pool.start(host);
  RunOrder order;
  ScriptedTask first(&pool, 0), a(&pool, 0), b(&pool, 0), c(&pool, 0), urgent(&pool, 5);
  // `first` submits the urgent task while it runs, then makes a, b and c ready: the worker runs a next (on its
  // thread), keeps b and c in its slot, and must run the urgent task before them.
  first.body = [&](int worker) {
    order.body(0)(worker);
    pool.submit(urgent);
  };
  a.body = order.body(1);
  b.body = order.body(2);
  c.body = order.body(3);
  urgent.body = order.body(4);
  first.successors = {&a, &b, &c};
  pool.submit(first);
  REQUIRE(wait_until([&] { return c.ran() + b.ran() + urgent.ran() == 3; }));
  pool.stop();
  CHECK(order.ids() == std::vector<int>{0, 1, 4, 2, 3});
}

TEST_CASE("every task of random fan-outs made ready by completions runs exactly once", "[executors][threadpool]") {
  // A random tree: each task makes 0 to 12 children ready, so workers fill their slots, steal halves of each other's,
  // overflow a slot into the ready queue (a task with more children than a slot holds) and go idle and come back.
  const unsigned seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  for (const int workers : {1, 2, 4}) {
    DYNAMIC_SECTION("workers " << workers) {
      Watchdog watchdog("threadpool random fan-outs");
      FakeHost host;
      ThreadPoolExecutor pool(ThreadPoolOptions{.workers = workers});
      pool.start(host);
      const std::size_t count = sized(40'000, 4'000, 10'000);
      std::deque<ScriptedTask> tasks;
      for (std::size_t i = 0; i < count; ++i) tasks.emplace_back(&pool, 0);
      std::size_t next = 1;
      for (std::size_t i = 0; i < count && next < count; ++i) {
        // Now and then one task with more children than a slot holds.
        std::size_t children = rng() % 97 == 0 ? 300 : rng() % 13;
        if (children == 0 && i + 1 == next) children = 1;  // the tree must reach every task
        for (std::size_t k = 0; k < children && next < count; ++k) tasks[i].successors.push_back(&tasks[next++]);
      }
      pool.submit(tasks.front());
      REQUIRE(wait_until([&] {
        return std::all_of(tasks.begin(), tasks.begin() + static_cast<std::ptrdiff_t>(next),
                           [](auto& t) { return t.ran() > 0; });
      }));
      pool.stop();
      for (std::size_t i = 0; i < next; ++i) REQUIRE(tasks[i].ran() == 1);
      CHECK(host.max_running() <= workers);
    }
  }
}

TEST_CASE("take_ready keeps the first most urgent task of its executor and submits the rest by priority",
          "[executors]") {
  // A recording executor stands in for "another executor" so that routing is observable.
  class Recorder final : public Executor {
   public:
    [[nodiscard]] std::string_view name() const noexcept override { return "recorder"; }
    void start(ExecutorHost&) override {}
    void submit(Task& task) noexcept override { submitted.push_back(&task); }
    [[nodiscard]] bool try_help() noexcept override { return false; }
    void stop() noexcept override {}
    std::vector<Task*> submitted;
  };
  Recorder self, other;
  ScriptedTask a(&self, 0), b(&other, 9), c(&self, 3), d(&self, 3), e(&self, -1);
  TaskList ready;
  for (ScriptedTask* t : {&a, &b, &c, &d, &e}) ready.push_back(t);
  Task* kept = take_ready(ready, &self);
  CHECK(kept == &c);
  CHECK(ready.empty());
  CHECK(other.submitted == std::vector<Task*>{&b});
  CHECK(self.submitted == std::vector<Task*>{&d, &a, &e});  // highest priority first (issue 48, item 4)
}

}  // namespace
}  // namespace depengine::test
