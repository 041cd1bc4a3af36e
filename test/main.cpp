// The one Catch2 main shared by every test executable.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
// ThreadSanitizer: Debian's oneTBB is not instrumented, so TSAN cannot see how it hands its task objects between
// threads, yet it still checks the memset and memcpy calls libtbb makes when it recycles them, and reports them racing
// with the previous user of that memory (a drainer's task object, read by our instrumented code). Those reports are
// about libtbb's own memory only: our data never travels through a TBB task (cmake/tsan-ignorelist.txt). The runtime
// reads this hook at start-up.
extern "C" const char* __tsan_default_suppressions() { return "called_from_lib:libtbb.so.12\n"; }
#endif
#endif
