// The errors the engine itself raises, and what it does with an op's error that no wait reports. An op's own exception
// is never wrapped: it reaches WaitForVar/WaitForAll as the very std::exception_ptr the op threw or passed to its
// completion.
#pragma once

#include <exception>
#include <functional>
#include <stdexcept>
#include <string_view>

namespace depengine {

// Misuse of the engine API: a dead or foreign variable, a completion called twice, a wait that would deadlock, bad
// options. The message says what was wrong. Raised where the misuse happens; the engine's state is unchanged.
class Error : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

// The error of an op cancelled before it ran: its CancelScope was cancelled (cancel_scope.h), or the engine was
// destroyed with EngineOptions::cancel_on_destruction. An Error, though not a misuse: catch Cancelled before Error.
class Cancelled : public Error {
 public:
  using Error::Error;
};

// An op's error that the engine stops keeping although no wait rethrew it (engine.h, "Errors"): a WaitForAll cleared
// it while rethrowing another error, or the engine was destroyed. EngineOptions::error_sink receives each one, once.
struct UnreportedError {
  // Why the engine stopped keeping the error.
  enum class When { kClearedByWaitForAll, kAtShutdown };

  std::string_view op;       // the name of the op that raised it; empty when it had none
  std::exception_ptr error;  // the op's own exception
  std::string_view what;     // its what(), or a note saying it is not a std::exception
  // Why the engine stopped keeping it: a WaitForAll cleared it, or the engine was destroyed.
  When when;
};

// Called on the thread of the WaitForAll or of ~Engine() that drops the error, never concurrently for one engine, with
// no lock of the engine held. What it throws is swallowed (and noted on stderr).
using ErrorSink = std::function<void(const UnreportedError&)>;

}  // namespace depengine
