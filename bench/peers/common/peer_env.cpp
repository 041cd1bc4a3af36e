#include "bench/peers/common/peer_env.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>

namespace depengine::bench::peers {
namespace {
// Set in the re-executed image: if the exec'd program still found a default unset (it cannot, setenv is inherited),
// a second exec would loop forever; this marker turns that into an error instead.
constexpr const char* kPinnedMarker = "DEPENGINE_PEER_ENV_PINNED";
}  // namespace

void pin_environment(char** argv, std::span<const EnvDefault> defaults) {
  bool changed = false;
  for (const EnvDefault& d : defaults) {
    if (std::getenv(d.name) == nullptr) {
      if (setenv(d.name, d.value, 0) != 0) throw std::runtime_error(std::string("setenv ") + d.name + " failed");
      changed = true;
    }
  }
  if (!changed) return;
  if (std::getenv(kPinnedMarker) != nullptr) {
    throw std::runtime_error("pin_environment: defaults still unset after re-executing");
  }
  setenv(kPinnedMarker, "1", 1);
  // The resolved path rather than /proc/self/exe itself, so that the new image keeps its name (ps, top, perf).
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  execv(self.c_str(), argv);
  throw std::runtime_error("pin_environment: exec " + self + " failed: " + std::strerror(errno));
}

std::string describe_environment(std::span<const char* const> names) {
  std::string out;
  for (const char* name : names) {
    const char* value = std::getenv(name);
    if (!out.empty()) out += ' ';
    out += name;
    out += '=';
    out += value != nullptr ? value : "(unset)";
  }
  return out;
}

std::string library_of(const void* address) {
  Dl_info info{};
  if (dladdr(address, &info) == 0 || info.dli_fname == nullptr) return "(unknown)";
  return info.dli_fname;
}

bool has_symbol(const char* name) { return dlsym(RTLD_DEFAULT, name) != nullptr; }

int depengine_pool_workers(int cores) {
  const char* env = std::getenv("DEPENGINE_CPU_WORKERS");
  return env != nullptr && *env != '\0' ? 0 : cores;
}

bool depengine_waiters_work() {
  const char* env = std::getenv("DEPENGINE_BENCH_WAITERS_WORK");
  if (env == nullptr || std::string_view(env).empty() || std::string_view(env) == "0") return false;
  if (std::string_view(env) == "1") return true;
  throw std::invalid_argument(std::string("DEPENGINE_BENCH_WAITERS_WORK='") + env + "': expected 0 or 1");
}

}  // namespace depengine::bench::peers
