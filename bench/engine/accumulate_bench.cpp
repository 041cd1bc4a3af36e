// Accumulate vs mutate on one variable (docs/accumulate.md): N ops, each adding into one variable `sum`, whose inputs
// complete in a random order. With mutations the adds run in push order, so an add whose input came early waits for
// every add pushed before it; with accumulations they run in the order their inputs complete, one at a time.
//
//   bench_accumulate [--ops N] [--add-us A] [--spacing-us S] [--runs R] [--workers W] [--seed X]
//
// Each run draws one arrival order and times both modes on it (alternating which goes first): the inputs are async ops
// whose Completions this thread calls at 0, S, 2S, ... µs in that order; each add spins for A µs. The makespan is from
// the first input's completion to WaitForVar(sum). Prints each mode's median makespan and the ratio
// accumulate / mutate (the target of issue 47: at most 0.6 with N = 16).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <depengine/engine/engine.h>
#include <depengine/executors/threadpool/threadpool_executor.h>

namespace {

using Clock = std::chrono::steady_clock;

struct Config {
  int ops = 16;
  int add_us = 200;
  int spacing_us = 200;
  int runs = 15;
  int workers = 2;
  std::uint64_t seed = 47;
};

void spin_for(std::chrono::microseconds duration) {
  const auto until = Clock::now() + duration;
  while (Clock::now() < until) {
  }
}

// One makespan in µs: inputs complete in `order`, adds mutate (ordered) or accumulate into sum.
double makespan(const Config& config, const std::vector<int>& order, bool accumulate) {
  depengine::EngineOptions options;
  options.emplace<depengine::ThreadPoolExecutor>(depengine::ThreadPoolOptions{.workers = config.workers});
  depengine::Engine engine(std::move(options));
  const depengine::Var sum = engine.NewVariable();
  std::vector<depengine::Var> inputs;
  std::vector<std::optional<depengine::Completion>> producers(static_cast<std::size_t>(config.ops));
  std::int64_t total = 0;  // sum's data
  std::atomic<int> started{0};
  for (int i = 0; i < config.ops; ++i) {
    inputs.push_back(engine.NewVariable());
    engine.PushAsync(
        [&producers, &started, i](depengine::Completion done) {
          producers[static_cast<std::size_t>(i)] = done;
          // release: pairs with the acquire below, publishing the Completion to this thread.
          started.fetch_add(1, std::memory_order_release);
        },
        {}, {inputs.back()});
  }
  // acquire: pairs with the release above. A spin: the producers run at once on idle workers.
  while (started.load(std::memory_order_acquire) < config.ops) std::this_thread::yield();
  for (int i = 0; i < config.ops; ++i) {
    auto add = [&total, &config, i] {
      spin_for(std::chrono::microseconds(config.add_us));
      total += i;
    };
    const depengine::Var input = inputs[static_cast<std::size_t>(i)];
    if (accumulate) {
      engine.PushAccumulate(add, {input}, {}, {sum});
    } else {
      engine.Push(add, {input}, {sum});
    }
  }
  const auto start = Clock::now();
  for (int k = 0; k < config.ops; ++k) {
    std::this_thread::sleep_until(start + std::chrono::microseconds(config.spacing_us) * k);
    (*producers[static_cast<std::size_t>(order[static_cast<std::size_t>(k)])])();
  }
  engine.WaitForVar(sum);
  const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
  if (total != static_cast<std::int64_t>(config.ops) * (config.ops - 1) / 2) {
    std::fprintf(stderr, "bench_accumulate: wrong sum %lld\n", static_cast<long long>(total));
    std::exit(1);
  }
  return us;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  Config config;
  for (int i = 1; i < argc; ++i) {
    if (const std::string flag = argv[i]; flag == "--help" || flag == "-h") {
      std::printf(
          "usage: bench_accumulate [--ops N] [--add-us A] [--spacing-us S] [--runs R] [--workers W] [--seed X]\n");
      return 0;
    }
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const long value = std::strtol(argv[i + 1], nullptr, 10);
    if (flag == "--ops") {
      config.ops = static_cast<int>(value);
    } else if (flag == "--add-us") {
      config.add_us = static_cast<int>(value);
    } else if (flag == "--spacing-us") {
      config.spacing_us = static_cast<int>(value);
    } else if (flag == "--runs") {
      config.runs = static_cast<int>(value);
    } else if (flag == "--workers") {
      config.workers = static_cast<int>(value);
    } else if (flag == "--seed") {
      config.seed = static_cast<std::uint64_t>(value);
    } else {
      std::fprintf(stderr, "bench_accumulate: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  std::mt19937_64 rng(config.seed);
  std::vector<double> mutate, accumulate;
  for (int run = 0; run < config.runs; ++run) {
    std::vector<int> order(static_cast<std::size_t>(config.ops));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    if (run % 2 == 0) {
      mutate.push_back(makespan(config, order, false));
      accumulate.push_back(makespan(config, order, true));
    } else {
      accumulate.push_back(makespan(config, order, true));
      mutate.push_back(makespan(config, order, false));
    }
  }
  const double m = median(mutate), a = median(accumulate);
  std::printf("ops %d, add %d us, spacing %d us, %d workers, %d runs (medians)\n", config.ops, config.add_us,
              config.spacing_us, config.workers, config.runs);
  std::printf("mutate (ordered)  %10.1f us\n", m);
  std::printf("accumulate        %10.1f us\n", a);
  std::printf("ratio             %10.3f\n", a / m);
  return 0;
}
