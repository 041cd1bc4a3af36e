// The bodies alone, in the side-by-side comparison: the ops of each workload whose bodies compute (randsum-work,
// common/op_body.h) run in push order on the main thread, with no runtime (run_serial). Its rows, system "serial" with
// 1 thread, are the floor a system's run of the same bodies is read against: on 2 threads, serial ÷ system is the
// speedup it got from its second thread. Workloads with empty bodies have no serial row (it would time an empty loop),
// so selecting one gives no records.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "bench/common/op_body.h"
#include "bench/peers/common/peer_main.h"

int main(int argc, char** argv) try {
  using namespace depengine::bench;
  using namespace depengine::bench::peers;
  const PeerOptions options = parse_peer_options(argc, argv);
  std::vector<Workload> computing;
  for (Workload& w : selected_workloads(options)) {
    if (w.body_iterations() > 0) computing.push_back(std::move(w));
  }
  const std::string system = "serial";
  print_setting(system, "the bodies alone, in push order on one thread, no runtime");
  report(options.common,
         measure(options, computing, system, 1, [](const Workload& w) { return RunTiming{run_serial(w)}; }));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_peer_serial: %s\n", e.what());
  return 1;
}
