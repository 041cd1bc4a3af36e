// The environment a peer runtime starts in, fixed and printed so that a comparison states what it compared.
//
// Runtimes configure themselves from environment variables, and some read them before main: libgomp parses OMP_* in
// a constructor that runs when the library is loaded. So a setenv() in main is too late, and pin_environment()
// re-executes the program instead, once, with the defaults added. A variable the user already set is kept (and
// printed), so `OMP_WAIT_POLICY=passive bench_peer_openmp_libgomp` measures what it says.
//
// Thread safety: call pin_environment() first thing in main, before any thread exists (it may exec). The other
// functions only read. Allocation: freely; none of this is on a timed path.
#pragma once

#include <span>
#include <string>

namespace depengine::bench::peers {

struct EnvDefault {
  const char* name;
  const char* value;
};

// Sets every variable of `defaults` that is unset, and if any was, re-executes this program with `argv` so that
// the runtime loads with them. Returns (without exec) when all are already set. Throws std::runtime_error if the
// exec fails.
void pin_environment(char** argv, std::span<const EnvDefault> defaults);

// "NAME=value NAME=value ..." for `names`, as this process sees them; an unset one reads NAME=(unset).
std::string describe_environment(std::span<const char* const> names);

// The path of the shared object that defines the function or object at `address` (dladdr), or "(unknown)".
std::string library_of(const void* address);

// Whether the dynamic symbol `name` is defined anywhere in this process (dlsym(RTLD_DEFAULT)).
bool has_symbol(const char* name);

// The ThreadPoolOptions::workers of depengine's pool in the comparisons: `cores` (the cores every system gets; the
// pushing thread runs besides), or 0 when DEPENGINE_CPU_WORKERS is set, so that the pool reads and checks that
// instead (`DEPENGINE_CPU_WORKERS=1` measures 1 worker plus the pushing thread, two threads as every peer runs).
int depengine_pool_workers(int cores);

// ThreadPoolOptions::waiters_work of that pool: true when DEPENGINE_BENCH_WAITERS_WORK is 1, false when it is unset or
// 0 (`DEPENGINE_CPU_WORKERS=1 DEPENGINE_BENCH_WAITERS_WORK=1` measures 1 worker with the main thread working while it
// waits). Throws std::invalid_argument for any other value.
bool depengine_waiters_work();

}  // namespace depengine::bench::peers
