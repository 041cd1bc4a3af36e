#include "bench/common/workloads.h"

#include <algorithm>
#include <random>

#include "bench/common/op_body.h"

namespace depengine::bench {

void Workload::add(std::span<const std::uint32_t> reads, std::span<const std::uint32_t> mutates) {
  vars_.insert(vars_.end(), reads.begin(), reads.end());
  vars_.insert(vars_.end(), mutates.begin(), mutates.end());
  begin_.push_back(vars_.size());
  num_reads_.push_back(static_cast<std::uint32_t>(reads.size()));
  max_list_ = std::max({max_list_, reads.size(), mutates.size()});
}

Workload make_independent(std::size_t ops, std::uint32_t vars) {
  Workload w("independent", vars);
  for (std::size_t i = 0; i < ops; ++i) {
    const std::uint32_t var = static_cast<std::uint32_t>(i % vars);
    w.add({}, {&var, 1});
  }
  return w;
}

Workload make_chain(std::size_t ops) {
  Workload w("chain", 1);
  const std::uint32_t var = 0;
  for (std::size_t i = 0; i < ops; ++i) w.add({}, {&var, 1});
  return w;
}

Workload make_randsum(std::size_t ops, std::uint32_t vars, std::uint64_t seed) {
  Workload w("randsum", vars);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::uint32_t> pick_var(0, vars - 1);
  std::uniform_int_distribution<std::uint32_t> pick_count(2, 19);
  std::vector<std::uint32_t> reads;
  for (std::size_t i = 0; i < ops; ++i) {
    reads.resize(pick_count(rng));
    for (std::uint32_t& r : reads) r = pick_var(rng);
    const std::uint32_t target = pick_var(rng);
    w.add(reads, {&target, 1});
  }
  return w;
}

Workload make_fanout(std::size_t ops, std::uint32_t readers) {
  Workload w("fanout", 1);
  const std::uint32_t shared = 0;
  std::size_t i = 0;
  while (i < ops) {
    w.add({}, {&shared, 1});  // the writer
    ++i;
    for (std::uint32_t r = 0; r < readers && i < ops; ++r, ++i) w.add({&shared, 1}, {});
  }
  return w;
}

Workload make_randsum_work(bool smoke) {
  const Workload shape = make_randsum(smoke ? 256 : 20'000);
  Workload w("randsum-work", shape.num_vars(), kMicrosecondBody);
  for (std::size_t op = 0; op < shape.size(); ++op) w.add(shape.reads(op), shape.mutates(op));
  return w;
}

std::vector<Workload> standard_workloads(bool smoke) {
  std::vector<Workload> all;
  if (smoke) {
    all.push_back(make_independent(4096, 64));
    all.push_back(make_chain(4096));
    all.push_back(make_randsum(1024, 100));
    all.push_back(make_fanout(4096, 64));
  } else {
    all.push_back(make_independent());
    all.push_back(make_chain());
    all.push_back(make_randsum());
    all.push_back(make_fanout());
  }
  return all;
}

std::vector<Workload> comparison_workloads(bool smoke) {
  std::vector<Workload> all = standard_workloads(smoke);
  all.push_back(make_randsum_work(smoke));
  return all;
}

}  // namespace depengine::bench
