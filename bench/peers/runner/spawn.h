// Running one benchmark executable as a child process, for the runner (bench_peers.cpp): each peer runs alone in its
// own process, so no two runtimes ever share threads, spin policies or global settings.
//
// Thread safety: main thread only (the runner is single-threaded). Cost: a fork/exec per call; nothing here is timed.
#pragma once

#include <string>
#include <vector>

namespace depengine::bench::peers {

// Runs `executable` with `args`, its stdout and stderr both written to `log_path`, and waits for it. Returns normally
// if it exited with status 0; otherwise throws std::runtime_error with the command, how it ended, and the log.
void run_child(const std::string& executable, const std::vector<std::string>& args, const std::string& log_path);

// The directory holding the running executable (/proc/self/exe), where the peers are built.
std::string own_directory();

// A fresh private directory under $TMPDIR (or /tmp), removed by the destructor with everything in it.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  [[nodiscard]] const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
};

}  // namespace depengine::bench::peers
