// A data pipeline with random augmentation whose output is bitwise identical for any number of threads.
//
// Each sample is loaded, augmented (a random flip, shift and noise) and normalised by engine ops. The pseudo-random
// generator's state is itself an engine variable that every augmentation mutates, so the augmentations draw from it
// in push order, one after another, whatever thread runs them; loading and normalising, which touch only their own
// sample, run in parallel around them. No lock and no per-thread generator: the engine's ordering is the determinism.
//
//   prng_pipeline [--samples N] [--threads T]
//
// Without --threads it runs the pipeline on 1, 2 and 4 worker threads, prints each run's checksum (FNV-1a over every
// output value's bits, in sample order) and exits with status 1 if they differ. With --threads it runs once.
#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <depengine/engine/engine.h>
#include <depengine/executors/threadpool/threadpool_executor.h>

namespace {

using depengine::Engine;
using depengine::Var;

constexpr int kValues = 256;  // per sample

struct Sample {
  std::vector<float> values;
  Var var;
};

// The generator and the variable that orders every draw from it.
struct Generator {
  std::mt19937_64 engine{20261122};
  Var var;
};

std::uint64_t fnv1a(std::uint64_t hash, float value) {
  const auto bits = std::bit_cast<std::uint32_t>(value);
  for (int byte = 0; byte < 4; ++byte) {
    hash ^= (bits >> (8 * byte)) & 0xffu;
    hash *= 1099511628211ull;
  }
  return hash;
}

// Runs the pipeline over `count` samples on `threads` workers; returns the checksum of the normalised samples.
std::uint64_t run(int count, int threads) {
  depengine::EngineOptions options;
  options.executors.push_back(
      std::make_unique<depengine::ThreadPoolExecutor>(depengine::ThreadPoolOptions{.workers = threads}));
  Engine engine(std::move(options));
  Generator generator;
  generator.var = engine.NewVariable();
  std::vector<Sample> samples(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) {
    Sample& s = samples[static_cast<std::size_t>(i)];
    s.var = engine.NewVariable();
    // Load: a synthetic "image" that depends only on its index.
    engine.Push(
        [&s, i] {
          s.values.resize(kValues);
          for (int k = 0; k < kValues; ++k) s.values[k] = std::sin(0.01f * static_cast<float>(i * kValues + k));
        },
        {}, {s.var}, {.name = "load"});
    // Augment: draws from the shared generator, so it mutates the generator's variable too.
    engine.Push(
        [&s, &generator] {
          std::mt19937_64& rng = generator.engine;
          if (rng() % 2 == 0) std::reverse(s.values.begin(), s.values.end());
          std::rotate(s.values.begin(), s.values.begin() + static_cast<std::ptrdiff_t>(rng() % kValues),
                      s.values.end());
          std::normal_distribution<float> noise(0.0f, 0.1f);
          for (float& v : s.values) v += noise(rng);
        },
        {}, {s.var, generator.var}, {.name = "augment"});
    // Normalise: zero mean, unit variance; its own sample only.
    engine.Push(
        [&s] {
          float mean = 0.0f;
          for (const float v : s.values) mean += v;
          mean /= kValues;
          float variance = 0.0f;
          for (const float v : s.values) variance += (v - mean) * (v - mean);
          const float scale = 1.0f / std::sqrt(variance / kValues + 1e-6f);
          for (float& v : s.values) v = (v - mean) * scale;
        },
        {}, {s.var}, {.name = "normalise"});
  }
  engine.WaitForAll();
  std::uint64_t hash = 14695981039346656037ull;
  for (const Sample& s : samples) {
    for (const float v : s.values) hash = fnv1a(hash, v);
  }
  return hash;
}

int parse_positive(std::string_view flag, const char* value) {
  char* end = nullptr;
  const long parsed = value != nullptr ? std::strtol(value, &end, 10) : 0;
  if (value == nullptr || *end != '\0' || parsed < 1 || parsed > 1'000'000) {
    throw std::invalid_argument(std::string(flag) + " needs a number from 1 to 1000000");
  }
  return static_cast<int>(parsed);
}

}  // namespace

int main(int argc, char** argv) try {
  int count = 20000;
  std::vector<int> thread_counts{1, 2, 4};
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::printf("usage: prng_pipeline [--samples N] [--threads T]\n");
      return 0;
    }
    if (arg == "--samples") {
      count = parse_positive(arg, i + 1 < argc ? argv[++i] : nullptr);
    } else if (arg == "--threads") {
      thread_counts = {parse_positive(arg, i + 1 < argc ? argv[++i] : nullptr)};
    } else {
      throw std::invalid_argument("unknown argument '" + std::string(arg) + "' (expected --samples N, --threads T)");
    }
  }
  std::vector<std::uint64_t> checksums;
  for (const int threads : thread_counts) {
    const auto start = std::chrono::steady_clock::now();
    checksums.push_back(run(count, threads));
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    std::printf("%d samples on %d thread(s): checksum %016llx (%.1f ms)\n", count, threads,
                static_cast<unsigned long long>(checksums.back()), ms);
  }
  if (std::adjacent_find(checksums.begin(), checksums.end(), std::not_equal_to<>()) != checksums.end()) {
    std::printf("FAILED: the checksums differ\n");
    return 1;
  }
  if (checksums.size() > 1) std::printf("identical for every thread count\n");
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "prng_pipeline: %s\n", e.what());
  return 2;
}
