// The dependency workloads every system in bench/ is measured on, defined once so that our engine and its peers run
// exactly the same ops: the same variables, the same read and mutate sets, in the same push order.
//
// A workload is a list of ops over variables 0..num_vars-1. Op i reads reads(i) and mutates mutates(i). The four
// standard workloads have empty bodies, so what is measured is the cost of dependency tracking and scheduling (ns per
// op, from the first push to the completion of all); randsum-work's bodies compute (body_iterations() > 0: what they
// compute is common/op_body.h), so what is measured is how much of the threads a system leaves for work.
//
//   independent   ops each mutate their own variable out of 1,024, round robin: no dependencies at all
//   chain         every op mutates variable 0: a single serial chain
//   randsum       each op reads 2..19 random variables out of 100 and mutates one (MXNet's RandSumExpr shape)
//   fanout        one writer of a variable, then 64 readers of it, then the next writer, ...
//   randsum-work  2 * 10^4 ops of randsum's shape, each computing about 1 µs (kMicrosecondBody) over its reads
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace depengine::bench {

class Workload {
 public:
  // `body_iterations`: arithmetic_body's steps in each op's body (common/op_body.h), 0 for an empty body.
  Workload(std::string name, std::uint32_t num_vars, std::uint32_t body_iterations = 0)
      : name_(std::move(name)), num_vars_(num_vars), body_iterations_(body_iterations) {}

  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] std::uint32_t num_vars() const noexcept { return num_vars_; }
  [[nodiscard]] std::size_t size() const noexcept { return num_reads_.size(); }
  [[nodiscard]] std::uint32_t body_iterations() const noexcept { return body_iterations_; }

  [[nodiscard]] std::span<const std::uint32_t> reads(std::size_t op) const noexcept {
    return {vars_.data() + begin_[op], num_reads_[op]};
  }
  [[nodiscard]] std::span<const std::uint32_t> mutates(std::size_t op) const noexcept {
    const std::size_t first = begin_[op] + num_reads_[op];
    return {vars_.data() + first, begin_[op + 1] - first};
  }
  // The largest read or mutate list of any op (for callers that stage lists in fixed buffers).
  [[nodiscard]] std::size_t max_list() const noexcept { return max_list_; }

  void add(std::span<const std::uint32_t> reads, std::span<const std::uint32_t> mutates);

 private:
  std::string name_;
  std::uint32_t num_vars_;
  std::uint32_t body_iterations_;
  std::vector<std::uint32_t> vars_;    // all lists, back to back: op i's reads, then its mutates
  std::vector<std::size_t> begin_{0};  // op i's lists start at begin_[i]; begin_[size()] is the end
  std::vector<std::uint32_t> num_reads_;
  std::size_t max_list_ = 0;
};

// `ops` sets the number of ops; the defaults are the sizes the issue specifies.
Workload make_independent(std::size_t ops = 1'000'000, std::uint32_t vars = 1024);
Workload make_chain(std::size_t ops = 1'000'000);
Workload make_randsum(std::size_t ops = 100'000, std::uint32_t vars = 100, std::uint64_t seed = 42);
Workload make_fanout(std::size_t ops = 1'000'000, std::uint32_t readers = 64);
// randsum's first 2 * 10^4 ops (256 for a smoke run), named "randsum-work", with kMicrosecondBody steps in each body.
Workload make_randsum_work(bool smoke);

// The four with empty bodies, at their full sizes, or at tiny sizes for a smoke run.
std::vector<Workload> standard_workloads(bool smoke);
// The four, then randsum-work: what every system of bench/peers runs.
std::vector<Workload> comparison_workloads(bool smoke);

}  // namespace depengine::bench
