// PushOptions: everything about one push besides its function and its variables: where the op runs (Context: which
// executor, and on a stream executor which device and stream), its priority and name, whether it runs despite an input
// error (no_skip), the fences it waits for and signals (fence.h), and the CancelScope it belongs to (cancel_scope.h).
//
// Used by Engine::Push, PushAsync and DeleteVariable (engine.h), which take it as their last argument; a push that
// names none uses detail::default_push_options(). Engine::Capture keeps each captured op's placement, priority, name,
// no_skip and scope, so every replay of the op runs with them (graph.h; fences are refused inside a capture).
// Designated initializers read best: `{.context = {.executor = 1}, .name = "copy"}`.
//
// Contract:
// - Checked at the push, which throws Error and pushes nothing for a Context naming an executor the engine lacks or a
//   placement its stream executor refuses, a fence with a null timeline, or PushAsync to a stream executor. A FenceList
//   of more than FenceList::kCapacity fences throws when it is built.
// - Lifetime: the options are read during the push only. The op keeps copies of the name and of both fence lists, and a
//   reference of its own to the scope's state, so the options (and the CancelScope handle) may die as soon as the push
//   returns. The timelines the fences point to are borrowed: they must outlive every op that names them (fence.h).
// - Thread safety: a plain value. One PushOptions may be read by pushes from any number of threads at once (built once
//   and reused is the intended use); writing it while a push reads it is a data race.
// - Cost: a value of 240 bytes on x86-64 that allocates nothing, unless the name is longer than OpName::kInlineChars
//   (one allocation to build it, one when the op copies it). A push copies only the fields that are set.
#pragma once

#include <cstdint>

#include <depengine/engine/cancel_scope.h>
#include <depengine/engine/executor_id.h>
#include <depengine/engine/fence.h>
#include <depengine/engine/op_name.h>
#include <depengine/frontier/vocabulary.h>

namespace depengine {

// Where the op runs: which running policy (an ExecutorId from EngineOptions::add, or an index into
// EngineOptions::executors; 0, the first, is the default: executor_id.h) and, for a stream executor, on which device
// and kind of stream. CPU executors ignore the placement fields. A push whose id another engine's options issued throws
// Error.
struct Context {
  // The executor that runs the op.
  ExecutorRef executor = 0;
  std::uint32_t device = 0;  // a device index of the stream executor's backend
  // The kind of stream, on a stream executor: compute, copy, or a collective channel.
  StreamKind stream_kind = StreamKind::kCompute;
  // A stream among the device's streams of that kind (0-based), or -1 to let the executor choose: it prefers a
  // stream whose last op the new op depends on anyway (no false serialisation), and among those the one that already
  // knows most of what the op waits for (fewest device waits).
  std::int32_t stream = -1;
};

struct PushOptions {
  // Where the op runs.
  Context context{};
  // A hint: among ops ready at the same time, a higher priority runs first. 0 is normal.
  std::int32_t priority = 0;
  // A name for traces, RunContext and error messages. Owned (op_name.h), and copied into the op: a name built at run
  // time is safe, and one of at most OpName::kInlineChars characters allocates nothing.
  OpName name{};
  // Run the op even if a variable it uses carries an error (normally such an op is skipped and passes the error on);
  // RunContext::input_error tells it the error it runs despite.
  bool no_skip = false;
  // The op runs only once every timeline here has reached its value (>=), besides what its variables order. A stream
  // op may be issued earlier, as soon as the op that will reach the value has been issued by a stream executor of the
  // same engine: its stream then waits on the device for that op's work only (see engine/fence.h). A failed timeline
  // is an input error: the op is skipped with it (unless no_skip).
  FenceList wait_fences{};
  // When the op completes, it raises every timeline here to its value, attaching what it knew had happened (its wait
  // frontier and, for a stream op, its own (axis, epoch)). A timeline already at or past the value is left alone
  // (>= semantics: signallers that the engine orders may complete out of order). An op that fails or is skipped fails
  // these timelines with its error instead, so that no waiter waits for ever.
  FenceList signal_fences{};
  // The CancelScope the op belongs to (cancel_scope.h); null: none. Borrowed for the call: the op keeps the scope's
  // state alive itself.
  const CancelScope* scope = nullptr;
};

namespace detail {

// The options of a push that names none: made once, and never destroyed (a push during static destruction still finds
// them), so such a push constructs no PushOptions of its own.
[[nodiscard]] inline const PushOptions& default_push_options() noexcept {
  static const PushOptions* const options = new PushOptions();
  return *options;
}

}  // namespace detail
}  // namespace depengine
