// The log of unreported errors (engine/detail/error_log.h) on its own: a failed stream's error that a wait reported is
// not reported again when the op whose device work failed raises it late, while an error that reaches a new op after
// a report (a failed timeline's, as fences_test.cpp checks through the engine) is reported again.
#include <catch2/catch.hpp>
#include <exception>
#include <stdexcept>
#include <vector>

#include <depengine/engine/detail/error_log.h>
#include <depengine/engine/engine.h>

#include "test/executors/executor_factories.h"

namespace depengine::detail {
namespace {

std::exception_ptr error_named(const char* what) { return std::make_exception_ptr(std::runtime_error(what)); }

TEST_CASE("ErrorLog: a late raise of a reported error by an op issued before it is dropped; a new op's is not",
          "[engine][errors]") {
  std::vector<UnreportedError> sunk;
  ErrorLog log([&](const UnreportedError& error) { sunk.push_back(error); });
  Engine engine(test::inline_factory().options());  // for a variable handle only
  const Var var = engine.NewVariable();
  constexpr std::uint64_t kOwner = 1;
  const std::exception_ptr fault = error_named("stream fault");
  log.raise(fault, "skipped behind it", kOwner);
  log.reported(fault, var);  // a WaitForVar rethrew it from the variable the skipped op passed it to
  log.raise(fault, "failed on the device", kOwner, /*issued=*/true);  // the stream reports its op late
  CHECK(log.take(kOwner).first == nullptr);
  log.raise(fault, "pushed after the report", kOwner);  // a new op that met the failed stream: reported again
  CHECK(log.take(kOwner).first == fault);
  log.raise(fault, "issued before that report", kOwner, /*issued=*/true);  // WaitForAll's report counts too
  CHECK(log.take(kOwner).first == nullptr);
  const std::exception_ptr other = error_named("another fault");
  log.raise(other, "another op", kOwner, /*issued=*/true);  // an error no wait reported is never dropped
  CHECK(log.take(kOwner).first == other);
  log.sink_unreported();
  CHECK(sunk.empty());
}

}  // namespace
}  // namespace depengine::detail
