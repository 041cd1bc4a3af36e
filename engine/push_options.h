// Options of one push.
#pragma once

#include <cstdint>
#include <string_view>

namespace depengine {

// Which running policy runs the op: an index into EngineOptions::executors (0, the first, is the default).
struct Context {
  std::uint32_t executor = 0;
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
