#include <stdexcept>
#include <string>
#include <utility>

#include <depengine/executors/stream/stream_backend.h>

namespace depengine {
namespace {

[[noreturn]] void refuse_recording(const StreamBackend& backend, const char* call) {
  throw std::logic_error(std::string("StreamBackend::") + call + ": the " + backend.name() +
                         " backend does not record work (records_work() is false)");
}

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

void StreamBackend::begin_recording(StreamHandle /*stream*/) { refuse_recording(*this, "begin_recording"); }

RecordedWork StreamBackend::end_recording(StreamHandle /*stream*/) { refuse_recording(*this, "end_recording"); }

void StreamBackend::abandon_recording(StreamHandle /*stream*/) noexcept {}

void StreamBackend::launch(const RecordedWork& /*work*/, StreamHandle /*stream*/) { refuse_recording(*this, "launch"); }

}  // namespace depengine
