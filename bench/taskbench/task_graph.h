// A Task-Bench-style task graph (after Slaughter et al., "Task Bench: A Parameterized Benchmark for Evaluating
// Parallel Runtime Performance", SC 2020; written here from that description, no code taken from it).
//
// A graph is a grid of W points by T timesteps. Task (t, p) runs a compute kernel (kernel.h) and depends on a set of
// points of timestep t - 1 given by the dependence pattern:
//
//   trivial     no dependencies at all (the tasks are independent, even across timesteps)
//   no_comm     p                               (W independent chains)
//   stencil_1d  p - 1, p, p + 1                 (clipped at the edges)
//   nearest     the kNearestRadix nearest points, p - 2 .. p + 2 for radix 5 (clipped)
//   fft         p, p - 2^k, p + 2^k with k = (t - 1) mod log2(W): a butterfly (clipped; W a power of two)
//   tree        width doubles each step from 1 until it reaches W; p depends on p / 2 (its parent)
//   all_to_all  every point
//
// Data: kFields (2) fields of W cells. Task (t, p) reads the cells of its dependencies in field (t - 1) mod 2 and
// writes its own cell in field t mod 2, so the task of timestep t + 1 that overwrites a cell must also wait for every
// reader of timestep t: both read-after-write and write-after-read dependencies occur, as in Task Bench with 2 fields.
// A runtime maps each cell to one of its dependency objects (a depengine Var, an OpenMP depend address).
//
// Every task checks, before running its kernel, that each input cell was written by the task (t - 1, q) it expects
// and that its own output cell holds what (t - 2, p) wrote; a run whose order was wrong fails (TaskData::check).
//
// Thread safety: TaskGraph is immutable. TaskData::execute may be called concurrently for tasks the pattern allows to
// run together (that is what is being tested); reset() and check() only between runs. Allocation: construction only.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace depengine::bench::taskbench {

enum class Pattern : std::uint8_t { kTrivial, kNoComm, kStencil1d, kNearest, kFft, kTree, kAllToAll };
inline constexpr Pattern kAllPatterns[] = {Pattern::kTrivial, Pattern::kNoComm, Pattern::kStencil1d, Pattern::kNearest,
                                           Pattern::kFft,     Pattern::kTree,   Pattern::kAllToAll};

std::string_view name_of(Pattern pattern) noexcept;
// Throws std::invalid_argument for an unknown name.
Pattern parse_pattern(std::string_view name);

class TaskGraph {
 public:
  static constexpr int kFields = 2;
  static constexpr int kNearestRadix = 5;
  static constexpr int kMaxWidth = 64;  // tasks keep their dependency lists on the stack

  // Throws std::invalid_argument unless 1 <= width <= kMaxWidth, steps >= 1, and width is a power of two for fft.
  TaskGraph(Pattern pattern, int width, int steps);

  [[nodiscard]] Pattern pattern() const noexcept { return pattern_; }
  [[nodiscard]] int width() const noexcept { return width_; }
  [[nodiscard]] int steps() const noexcept { return steps_; }
  // The points of timestep t are 0 .. active(t) - 1: all W, except in the first steps of `tree`.
  [[nodiscard]] int active(int t) const noexcept;
  // Writes the points of timestep t - 1 that task (t, point) depends on to `out` (room for width()), ascending and
  // without duplicates, and returns how many. None at t = 0, nor ever for trivial.
  int dependencies(int t, int point, int* out) const noexcept;
  [[nodiscard]] std::size_t num_tasks() const noexcept { return num_tasks_; }
  [[nodiscard]] static int field_of(int t) noexcept { return t % kFields; }

 private:
  Pattern pattern_;
  int width_;
  int steps_;
  int log2_width_ = 0;
  std::size_t num_tasks_ = 0;
};

// One cell of a field: which task wrote it last, and the value it wrote. A cache line each, so that tasks on
// different points never share one.
struct alignas(64) Cell {
  std::int64_t step = -1;  // -1: not written in this run
  std::int64_t point = -1;
  double value = 0;
};

// The cells a run reads and writes, and the record of what its checks found.
class TaskData {
 public:
  explicit TaskData(const TaskGraph& graph);  // keeps a reference: `graph` must outlive this

  // Cell `point` of field `field`: the dependence object a runtime keys on.
  [[nodiscard]] Cell& cell(int field, int point) noexcept { return cells_[field * graph_.width() + point]; }

  // Runs task (t, point): checks its inputs and its output cell, runs the kernel for `iterations`, writes its cell
  // (trivial tasks write a private slot instead: they have no order to check). A failed check is recorded, not
  // thrown (this runs on a runtime's worker thread).
  void execute(int t, int point, std::int64_t iterations) noexcept;

  // Between runs: every cell back to "not written", errors cleared.
  void reset();
  // Throws std::runtime_error describing the first failed check since reset(), if any.
  void check() const;

 private:
  void fail(int t, int point, const char* what, std::int64_t got_step, std::int64_t got_point, std::int64_t want_step,
            std::int64_t want_point) noexcept;

  const TaskGraph& graph_;
  std::vector<Cell> cells_;
  std::vector<double> trivial_out_;  // trivial: one slot per task
  std::atomic<bool> failed_{false};  // set by the first failing task, which alone writes error_
  char error_[256] = {};             // a fixed buffer: fail() runs on a worker thread and must not throw
};

}  // namespace depengine::bench::taskbench
