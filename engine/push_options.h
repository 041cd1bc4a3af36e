// Options of one push.
#pragma once

#include <cstdint>
#include <string_view>

#include "executors/executor.h"  // StreamKind

namespace depengine {

// Where the op runs: which running policy (an index into EngineOptions::executors; 0, the first, is the default) and,
// for a stream executor, on which device and kind of stream. CPU executors ignore the placement fields.
struct Context {
  std::uint32_t executor = 0;
  std::uint32_t device = 0;  // a device index of the stream executor's backend
  StreamKind stream_kind = StreamKind::kCompute;
  // A stream among the device's streams of that kind (0-based), or -1 to let the executor choose: it prefers a
  // stream whose last op the new op depends on anyway (no false serialisation), and among those the one that already
  // knows most of what the op waits for (fewest device waits).
  std::int32_t stream = -1;
};

struct PushOptions {
  Context context;
  // A hint: among ops ready at the same time, a higher priority runs first. 0 is normal.
  std::int32_t priority = 0;
  // A name for traces, RunContext and error messages. Not copied: it must outlive the op (a string literal does).
  std::string_view name;
  // Run the op even if a variable it uses carries an error (normally such an op is skipped and passes the error on).
  bool no_skip = false;
};

}  // namespace depengine
