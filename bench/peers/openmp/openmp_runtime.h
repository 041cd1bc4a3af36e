// Which OpenMP runtime a build of an OpenMP peer runs on, checked rather than assumed. The same source is built by
// GCC against libgomp and by clang against LLVM's libomp (CMakeLists.txt), and DEPENGINE_OPENMP_RUNTIME names the one
// intended. libomp also implements libgomp's GOMP_* entry points, so a mislinked build would run quietly on the
// wrong runtime; its own __kmpc_* entry points tell them apart. Also the OMP_* defaults both builds pin.
//
// Include only from a translation unit compiled with OpenMP. Thread safety: call from main, before timing.
#pragma once

#include <omp.h>

#include <stdexcept>
#include <string>

#include "bench/peers/common/peer_env.h"

#ifndef DEPENGINE_OPENMP_RUNTIME
#error "DEPENGINE_OPENMP_RUNTIME must name the runtime this build links: \"libgomp\" or \"libomp\""
#endif

namespace depengine::bench::peers {

// Fixed thread count; idle threads spin (OMP_WAIT_POLICY=active), each runtime's fastest setting for streams of tiny
// tasks; no dynamic adjustment of the team size.
inline constexpr EnvDefault kOpenmpEnvironment[] = {
    {"OMP_NUM_THREADS", "2"},
    {"OMP_WAIT_POLICY", "active"},
    {"OMP_DYNAMIC", "false"},
};
inline constexpr const char* kOpenmpPrinted[] = {"OMP_NUM_THREADS", "OMP_WAIT_POLICY", "OMP_DYNAMIC",   "OMP_PROC_BIND",
                                                 "OMP_PLACES",      "GOMP_SPINCOUNT",  "KMP_BLOCKTIME", "KMP_AFFINITY"};

// "openmp-libgomp" or "openmp-libomp".
inline std::string openmp_system() { return std::string("openmp-") + DEPENGINE_OPENMP_RUNTIME; }

// The path of the runtime library this process runs on. Throws std::runtime_error if it is not the intended one.
inline std::string checked_openmp_runtime() {
  const std::string library = library_of(reinterpret_cast<const void*>(&omp_get_num_threads));
  const std::string running = has_symbol("__kmpc_global_thread_num") ? "libomp" : "libgomp";
  if (running != DEPENGINE_OPENMP_RUNTIME) {
    throw std::runtime_error(std::string("built for ") + DEPENGINE_OPENMP_RUNTIME + " but running on " + running +
                             " (" + library + ")");
  }
  return library;
}

}  // namespace depengine::bench::peers
