// oneTBB flow graph in the side-by-side comparison. A flow graph is static: it is built whole, then run. So each run
// builds one continue_node per op with edges from EdgeShim (edge_shim.h: last writer plus readers since the last
// write, per variable), then puts a message into every node without predecessors and waits for the graph. The two
// phases are timed separately ("tbb-flow/build", "tbb-flow/run"); "tbb-flow" is their sum, the figure comparable
// with systems that find dependencies as ops are pushed. Destroying the graph is not timed.
//
// randsum-work (bodies that compute, common/op_body.h): each node's body is compute(workload, op, cells), on cells
// made before the clock starts and checked against a serial run after it stops.
//
// Concurrency 2, as every system here: a task_arena of 2 slots under global_control(max_allowed_parallelism, 2); the
// main thread builds the graph inside the arena and joins the work in wait_for_all.
//
// Nodes use the default policy (queueing: every body runs as a task). The `lightweight` policy, which runs a tiny
// body directly in the thread that completed its last predecessor, is not usable here: along a chain each node runs
// the next inside its own call, and the 10^6-deep recursion of the chain workload overflows the stack.
#include <oneapi/tbb/flow_graph.h>
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/task_arena.h>
#include <oneapi/tbb/version.h>

#include <chrono>
#include <cstdio>
#include <deque>
#include <exception>
#include <span>
#include <string>
#include <vector>

#include "bench/common/op_body.h"
#include "bench/peers/common/peer_main.h"
#include "bench/peers/tbb_flow/edge_shim.h"

namespace depengine::bench::peers {
namespace {

constexpr int kConcurrency = 2;

using Node = tbb::flow::continue_node<tbb::flow::continue_msg>;

RunTiming run_once(tbb::task_arena& arena, const std::string& system, const Workload& workload) {
  using Clock = std::chrono::steady_clock;
  Clock::time_point start, built, done;
  const bool computes = workload.body_iterations() > 0;
  std::vector<Cell> storage(computes ? workload.num_vars() : 0);
  const std::span<Cell> cells(storage);
  arena.execute([&] {
    start = Clock::now();
    tbb::flow::graph graph;
    std::deque<Node> nodes;  // never relocates: nodes are neither copyable nor movable
    std::vector<Node*> roots;
    EdgeShim shim(workload.num_vars());
    for (std::size_t op = 0; op < workload.size(); ++op) {
      Node& node = computes ? nodes.emplace_back(graph,
                                                 [&workload, cells, op](const tbb::flow::continue_msg&) {
                                                   compute(workload, op, cells);
                                                   return tbb::flow::continue_msg();
                                                 })
                            : nodes.emplace_back(
                                  graph, [](const tbb::flow::continue_msg&) { return tbb::flow::continue_msg(); });
      const std::span<const std::uint32_t> preds =
          shim.add(static_cast<std::uint32_t>(op), workload.reads(op), workload.mutates(op));
      for (const std::uint32_t p : preds) tbb::flow::make_edge(nodes[p], node);
      if (preds.empty()) roots.push_back(&node);
    }
    built = Clock::now();
    for (Node* root : roots) root->try_put(tbb::flow::continue_msg());
    graph.wait_for_all();
    done = Clock::now();
    nodes.clear();  // before the graph they belong to
  });
  if (computes) check_against_serial(system, workload, storage);
  const double ops = static_cast<double>(workload.size());
  const double build_ns = std::chrono::duration<double, std::nano>(built - start).count() / ops;
  const double run_ns = std::chrono::duration<double, std::nano>(done - built).count() / ops;
  return {build_ns + run_ns, build_ns, run_ns};
}

}  // namespace
}  // namespace depengine::bench::peers

int main(int argc, char** argv) try {
  using namespace depengine::bench;
  using namespace depengine::bench::peers;
  const PeerOptions options = parse_peer_options(argc, argv);
  const std::vector<Workload> workloads = selected_workloads(options);
  const tbb::global_control limit(tbb::global_control::max_allowed_parallelism, kConcurrency);
  tbb::task_arena arena(kConcurrency);
  const std::string system = "tbb-flow";
  print_setting(system, std::string("oneTBB ") + TBB_runtime_version() + ", task_arena(" +
                            std::to_string(kConcurrency) + "), continue_node, edges by EdgeShim");
  report(options.common, measure(options, workloads, system, kConcurrency,
                                 [&](const Workload& w) { return run_once(arena, system, w); }));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_peer_tbb_flow: %s\n", e.what());
  return 1;
}
