#include "executors/stream/stream_backend.h"

#include <string>
#include <utility>

namespace depengine {
namespace {

std::string describe(const char* backend, const char* call, std::string_view message) {
  std::string text(backend);
  text += ' ';
  text += call;
  text += ": ";
  text += message;
  return text;
}

}  // namespace

StreamError::StreamError(const char* backend, const char* call, int code, std::string_view message,
                         std::exception_ptr cause)
    : std::runtime_error(describe(backend, call, message)),
      backend_(backend),
      call_(call),
      code_(code),
      cause_(std::move(cause)) {}

}  // namespace depengine
