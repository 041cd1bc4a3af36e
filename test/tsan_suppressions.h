// The ThreadSanitizer suppressions of every test executable: included once per executable, by its main (test/main.cpp,
// test/mpi_main.cpp).
#pragma once

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
// ThreadSanitizer: Debian's oneTBB is not instrumented, so TSAN cannot see how it hands its task objects between
// threads, yet it still checks the memset and memcpy calls libtbb makes when it recycles them, and reports them racing
// with the previous user of that memory (a drainer's task object, read by our instrumented code). Those reports are
// about libtbb's own memory only: our data never travels through a TBB task (cmake/tsan-ignorelist.txt). The runtime
// reads this hook at start-up.
//
// libstdc++ is not instrumented either, and an exception_ptr's reference count is an atomic inside it. An op's record
// holds the op's error until the record is recycled, after the op has retired: a wait may meanwhile have rethrown
// that exception to the test, which reads it. Whichever thread drops the last reference frees the exception; when that
// is the executor's thread (a stream executor's completion thread, most often), TSAN sees the free but not the count
// that orders it after the test's read, and reports a race on the exception object. The same holds when two threads
// catch one exception object at once (a pusher's WaitForVar and another thread's WaitForAll rethrow the same error):
// the catch that ends last frees it. Those reports only: the release, the destructors of the standard exception types
// it runs, and the free() of the exception object (libstdc++ frees exceptions with free(); this project's code never
// calls it, and no function of its CPU code has "free" in its name). libstdc++'s frames often do not show in the stacks
// (no frame pointers), so the rules name what does.
extern "C" const char* __tsan_default_suppressions() {
  return "called_from_lib:libtbb.so.12\n"
         "race:std::__exception_ptr::exception_ptr::_M_release\n"
         "race:std::runtime_error::~runtime_error\n"
         "race:std::logic_error::~logic_error\n"
         "race:free\n";
}
#endif
#endif
