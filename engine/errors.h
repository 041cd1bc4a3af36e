// The errors the engine itself raises. An op's own exception is never wrapped: it reaches WaitForVar/WaitForAll as
// the very std::exception_ptr the op threw or passed to its completion.
#pragma once

#include <stdexcept>

namespace depengine {

// Misuse of the engine API: a dead or foreign variable, a completion called twice, a wait that would deadlock, bad
// options. The message says what was wrong. Raised where the misuse happens; the engine's state is unchanged.
class Error : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

}  // namespace depengine
