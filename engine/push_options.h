// Options of one push.
#pragma once

#include <cstdint>

#include <depengine/engine/cancel_scope.h>
#include <depengine/engine/executor_id.h>
#include <depengine/engine/fence.h>
#include <depengine/engine/op_name.h>
#include <depengine/engine/vocabulary/vocabulary.h>

namespace depengine {

// Where the op runs: which running policy (an ExecutorId from EngineOptions::add, or an index into
// EngineOptions::executors; 0, the first, is the default: executor_id.h) and, for a stream executor, on which device
// and kind of stream. CPU executors ignore the placement fields. A push whose id another engine's options issued throws
// Error.
struct Context {
  ExecutorRef executor = 0;
  std::uint32_t device = 0;  // a device index of the stream executor's backend
  StreamKind stream_kind = StreamKind::kCompute;
  // A stream among the device's streams of that kind (0-based), or -1 to let the executor choose: it prefers a
  // stream whose last op the new op depends on anyway (no false serialisation), and among those the one that already
  // knows most of what the op waits for (fewest device waits).
  std::int32_t stream = -1;
};

struct PushOptions {
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
