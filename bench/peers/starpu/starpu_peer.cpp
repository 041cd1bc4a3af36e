// StarPU 1.3 in the side-by-side comparison. Each variable is a data handle (starpu_variable_data_register on the
// 8-byte number of its Cell, common/op_body.h, registered before the clock starts and unregistered after it stops);
// each op is a task of a codelet whose CPU implementation is empty, with STARPU_R on what it reads and STARPU_RW on
// what it mutates, under StarPU's default sequential consistency (so the handles' access order is the submission order,
// as in depengine). Tasks are built with starpu_task_create and submitted with starpu_task_submit (the direct path;
// starpu_task_insert parses a variadic list on top of it); ops with more accesses than STARPU_NMAXBUFS get
// dyn_handles/dyn_modes arrays, which StarPU frees with the task. Timed from the first submission to the return of
// starpu_task_wait_for_all.
//
// randsum-work (bodies that compute): the tasks are of a second codelet, whose CPU function runs compute(workload, op,
// cells) with the op's index and the run's cells in its cl_arg (an array made before the clock starts). It reads and
// writes the cells directly: the handles are registered on them in main memory and there is no other memory node (no
// CUDA or OpenCL workers), so the buffers StarPU would hand the function are those cells. After the handles are
// unregistered, the cells are checked against a serial run.
//
// Settings, pinned and printed: STARPU_NCPU=2 CPU workers (the submitting main thread is a third, as depengine's
// pushing thread is), no CUDA/OpenCL workers, STARPU_CALIBRATE=0 (the codelet has no performance model, so nothing is
// calibrated anyway), STARPU_SCHED=lws (locality work stealing, StarPU 1.3's default; in an alternating comparison
// here neither eager, one central queue, nor ws was consistently faster), STARPU_SILENT=1 (no banner on stdout).
// STARPU_HOME=/tmp: StarPU caches its bus sampling under $STARPU_HOME/.starpu, not under the user's home.
#include <starpu.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/common/op_body.h"
#include "bench/peers/common/peer_env.h"
#include "bench/peers/common/peer_main.h"

namespace depengine::bench::peers {
namespace {

constexpr EnvDefault kEnvironment[] = {
    {"STARPU_NCPU", "2"},      {"STARPU_NCUDA", "0"},  {"STARPU_NOPENCL", "0"}, {"STARPU_SCHED", "lws"},
    {"STARPU_CALIBRATE", "0"}, {"STARPU_SILENT", "1"}, {"STARPU_HOME", "/tmp"}, {"HWLOC_HIDE_ERRORS", "1"},
};
constexpr const char* kPrinted[] = {
    "STARPU_NCPU",      "STARPU_NCUDA",  "STARPU_NOPENCL",        "STARPU_SCHED",
    "STARPU_CALIBRATE", "STARPU_SILENT", "STARPU_WORKERS_NOBIND", "STARPU_LIMIT_MAX_SUBMITTED_TASKS"};

void empty_body(void** /*buffers*/, void* /*arg*/) {}

// What a computing task's cl_arg points to.
struct ComputeArg {
  const Workload* workload;
  std::span<Cell> cells;
  std::size_t op;
};

void compute_body(void** /*buffers*/, void* arg) {
  const ComputeArg& a = *static_cast<const ComputeArg*>(arg);
  compute(*a.workload, a.op, a.cells);
}

struct Codelet {
  starpu_codelet cl{};
  Codelet(starpu_cpu_func_t body, const char* name) {
    starpu_codelet_init(&cl);
    cl.where = STARPU_CPU;
    cl.cpu_funcs[0] = body;
    cl.nbuffers = STARPU_VARIABLE_NBUFFERS;  // each task says how many it has
    cl.name = name;
  }
};

struct Codelets {
  Codelet empty{empty_body, "empty"};
  Codelet computing{compute_body, "compute"};
};

template <class T>
T* allocate(std::size_t n) {
  // malloc, not new: StarPU releases dyn_handles and dyn_modes with free() when it destroys the task.
  void* p = std::malloc(n * sizeof(T));
  if (p == nullptr) throw std::bad_alloc();
  return static_cast<T*>(p);
}

// `arg`: the task's cl_arg (not freed by StarPU), or nullptr.
void submit(starpu_codelet* cl, void* arg, std::span<const starpu_data_handle_t> handles,
            std::span<const std::uint32_t> reads, std::span<const std::uint32_t> mutates) {
  starpu_task* task = starpu_task_create();
  task->cl = cl;
  task->cl_arg = arg;
  const std::size_t n = reads.size() + mutates.size();
  task->nbuffers = static_cast<int>(n);
  starpu_data_handle_t* task_handles = task->handles;
  starpu_data_access_mode* modes = task->modes;
  if (n > STARPU_NMAXBUFS) {
    task->dyn_handles = task_handles = allocate<starpu_data_handle_t>(n);
    task->dyn_modes = modes = allocate<starpu_data_access_mode>(n);
  }
  std::size_t i = 0;
  for (const std::uint32_t v : reads) {
    task_handles[i] = handles[v];
    modes[i++] = STARPU_R;
  }
  for (const std::uint32_t v : mutates) {
    task_handles[i] = handles[v];
    modes[i++] = STARPU_RW;
  }
  const int ret = starpu_task_submit(task);
  if (ret != 0) throw std::runtime_error("starpu_task_submit failed: " + std::to_string(ret));
}

RunTiming run_once(Codelets& codelets, const std::string& system, const Workload& workload) {
  const bool computes = workload.body_iterations() > 0;
  std::vector<Cell> cells(workload.num_vars());
  std::vector<starpu_data_handle_t> handles(workload.num_vars());
  for (std::size_t v = 0; v < handles.size(); ++v) {
    starpu_variable_data_register(&handles[v], STARPU_MAIN_RAM, reinterpret_cast<std::uintptr_t>(&cells[v].value),
                                  sizeof(cells[v].value));
  }
  std::vector<ComputeArg> args;
  if (computes) {
    for (std::size_t op = 0; op < workload.size(); ++op) args.push_back({&workload, cells, op});
  }
  starpu_codelet* const cl = computes ? &codelets.computing.cl : &codelets.empty.cl;
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t op = 0; op < workload.size(); ++op) {
    submit(cl, computes ? &args[op] : nullptr, handles, workload.reads(op), workload.mutates(op));
  }
  const int ret = starpu_task_wait_for_all();
  const auto stop = std::chrono::steady_clock::now();
  if (ret != 0) throw std::runtime_error("starpu_task_wait_for_all failed: " + std::to_string(ret));
  for (starpu_data_handle_t h : handles) starpu_data_unregister(h);
  if (computes) check_against_serial(system, workload, cells);
  return {std::chrono::duration<double, std::nano>(stop - start).count() / static_cast<double>(workload.size())};
}

// starpu_init / starpu_shutdown as a scope, so that an exception still shuts the workers down.
struct StarpuRuntime {
  StarpuRuntime() {
    const int ret = starpu_init(nullptr);  // configured by the pinned environment above
    if (ret != 0) throw std::runtime_error("starpu_init failed: " + std::to_string(ret));
  }
  ~StarpuRuntime() { starpu_shutdown(); }
  StarpuRuntime(const StarpuRuntime&) = delete;
  StarpuRuntime& operator=(const StarpuRuntime&) = delete;
};

}  // namespace
}  // namespace depengine::bench::peers

int main(int argc, char** argv) try {
  using namespace depengine::bench;
  using namespace depengine::bench::peers;
  pin_environment(argv, kEnvironment);
  const PeerOptions options = parse_peer_options(argc, argv);
  const std::vector<Workload> workloads = selected_workloads(options);
  const StarpuRuntime runtime;
  Codelets codelets;
  int major = 0, minor = 0, release = 0;
  starpu_get_version(&major, &minor, &release);
  const int threads = static_cast<int>(starpu_cpu_worker_get_count());
  const std::string system = "starpu";
  print_setting(system, "StarPU " + std::to_string(major) + "." + std::to_string(minor) + "." +
                            std::to_string(release) + ", " + std::to_string(threads) + " CPU workers, " +
                            std::to_string(starpu_worker_get_count()) + " workers in all, scheduler " +
                            starpu_sched_ctx_get_sched_policy(0)->policy_name);
  print_setting(system, describe_environment(kPrinted));
  report(options.common, measure(options, workloads, system, threads,
                                 [&](const Workload& w) { return run_once(codelets, system, w); }));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_peer_starpu: %s\n", e.what());
  return 1;
}
