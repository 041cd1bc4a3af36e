#!/usr/bin/env python3
"""depengine from Python beside Dask's threaded scheduler and concurrent.futures, on the same graphs, in one run.

    bench_python.py [--runs N] [--ops N] [--json FILE] [--smoke]

Two workloads, each defined once (below) and run on every system, alternating systems within each round; the median
of --runs rounds is printed:

- `empty`: --ops pushes of an empty Python function on independent variables, then one wait for all (the cost of one
  push-and-run, us per op). Dask gets the same graph as a dict of independent tasks to dask.threaded.get;
  concurrent.futures one submit per task and a wait. depengine also runs it inline (every op on the pushing thread:
  the binding's own cost without any thread hand-off).
- `stencil`: a blocked 1-D stencil over NumPy blocks whose bodies release the GIL: STEPS steps of BLOCKS blocks, block
  i of step t reading blocks i-1, i, i+1 of step t-1 (a few ms each, compute-bound: sines and cosines).
  A reference row, `independent-bodies`, runs as many bodies with no dependencies on 2 plain threads: the speedup the
  machine allows at that moment (on a shared machine, less than 2). Serial (a plain loop), depengine on 2 workers
  and Dask threaded on 2 workers; the speedup over serial. Every system's result is checked against the serial one.

Speeds are measured here, never asserted in tests. --json FILE writes one record per row.
"""
import argparse
import concurrent.futures
import json
import statistics
import sys
import time

import numpy as np

import dask
import dask.threaded

import depengine

BLOCKS = 8
BLOCK = 1 << 18  # float64 values per block: 2 MiB
STEPS = 24


def nothing():
    pass


def empty_depengine(ops, executor="threads"):
    with depengine.Engine(workers=2, executor=executor) as engine:
        vars_ = [engine.variable() for _ in range(ops)]
        start = time.perf_counter()
        for v in vars_:
            engine.push(nothing, mutates=[v])
        engine.wait_all()
        return time.perf_counter() - start


def empty_dask(ops):
    graph = {f"t{i}": (nothing,) for i in range(ops)}
    keys = list(graph)
    start = time.perf_counter()
    dask.threaded.get(graph, keys, num_workers=2)
    return time.perf_counter() - start


def empty_futures(ops):
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        start = time.perf_counter()
        futures = [pool.submit(nothing) for _ in range(ops)]
        concurrent.futures.wait(futures)
        return time.perf_counter() - start


def stencil_body(left, centre, right, out=None):
    """One block of one step, into `out` (a new array if None): transcendental ufuncs, compute-bound rather than
    memory-bound, which release the GIL in NumPy's loops (a few ms)."""
    out = np.sin(centre, out=out)
    out *= 0.5
    out += 0.25 * np.cos(left)
    out += 0.25 * np.cos(right)
    return out


def initial_blocks():
    rng = np.random.default_rng(0)
    return [rng.random(BLOCK) for _ in range(BLOCKS)]


def stencil_serial(blocks):
    """A plain loop over the same double buffer as depengine's (Dask's tasks return new arrays instead)."""
    gens = [blocks, [np.empty(BLOCK) for _ in range(BLOCKS)]]
    start = time.perf_counter()
    for t in range(STEPS):
        src, dst = gens[t % 2], gens[(t + 1) % 2]
        for i in range(BLOCKS):
            stencil_body(src[i - 1], src[i], src[(i + 1) % BLOCKS], dst[i])
    return time.perf_counter() - start, gens[STEPS % 2]


def stencil_depengine(blocks):
    with depengine.Engine(workers=2) as engine:
        # Two generations of arrays, as a double buffer: step t reads generation t % 2 and writes the other.
        gens = [[engine.array(b) for b in blocks], [engine.empty(BLOCK) for _ in range(BLOCKS)]]

        def body(left, centre, right, out):
            stencil_body(left, centre, right, out)

        start = time.perf_counter()
        for t in range(STEPS):
            src, dst = gens[t % 2], gens[(t + 1) % 2]
            for i in range(BLOCKS):
                engine.push(body, reads=[src[i - 1], src[i], src[(i + 1) % BLOCKS]], mutates=[dst[i]])
        engine.wait_all()
        elapsed = time.perf_counter() - start
        return elapsed, [a.numpy() for a in gens[STEPS % 2]]


def stencil_ceiling(blocks):
    """The machine's ceiling for 2 threads: the same number of bodies on blocks that do not depend on each other,
    through a pool of 2 threads (the result is not the stencil's, so it is not checked)."""
    outs = [np.empty(BLOCK) for _ in range(BLOCKS)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        start = time.perf_counter()
        for _ in range(STEPS):
            list(pool.map(lambda i: stencil_body(blocks[i - 1], blocks[i], blocks[(i + 1) % BLOCKS], outs[i]),
                          range(BLOCKS)))
        return time.perf_counter() - start, None


def stencil_dask(blocks):
    graph = {("b", 0, i): blocks[i] for i in range(BLOCKS)}
    for t in range(1, STEPS + 1):
        for i in range(BLOCKS):
            graph[("b", t, i)] = (stencil_body, ("b", t - 1, i - 1 if i else BLOCKS - 1), ("b", t - 1, i),
                                  ("b", t - 1, (i + 1) % BLOCKS))
    keys = [("b", STEPS, i) for i in range(BLOCKS)]
    start = time.perf_counter()
    result = dask.threaded.get(graph, keys, num_workers=2)
    return time.perf_counter() - start, list(result)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--ops", type=int, default=20000)
    parser.add_argument("--json")
    parser.add_argument("--smoke", action="store_true", help="one small round, for CI: checks, measures nothing")
    args = parser.parse_args()
    if args.smoke:
        args.runs, args.ops = 1, 200
    records = []

    empty = {"depengine": lambda: empty_depengine(args.ops), "depengine-inline":
             lambda: empty_depengine(args.ops, "inline"), "dask-threaded": lambda: empty_dask(args.ops),
             "concurrent.futures": lambda: empty_futures(args.ops)}
    times = {name: [] for name in empty}
    for _ in range(args.runs):
        for name, run in empty.items():
            times[name].append(run())
    print(f"empty: {args.ops} pushes of an empty Python function, 2 workers; median of {args.runs} rounds")
    dask_us = 1e6 * statistics.median(times["dask-threaded"]) / args.ops
    for name, samples in times.items():
        us = 1e6 * statistics.median(samples) / args.ops
        print(f"  {name:20s} {us:8.2f} us/op   ({us / dask_us:.2f} x dask-threaded)")
        records.append({"workload": "empty", "system": name, "threads": 2, "us_per_op": us, "runs": args.runs})

    reference_time, reference = stencil_serial(initial_blocks())
    stencil = {"serial": lambda: stencil_serial(initial_blocks()), "depengine": lambda: stencil_depengine(
        initial_blocks()), "dask-threaded": lambda: stencil_dask(initial_blocks()),
               "independent-bodies": lambda: stencil_ceiling(initial_blocks())}
    times = {name: [] for name in stencil}
    for _ in range(1 if args.smoke else args.runs):
        for name, run in stencil.items():
            elapsed, result = run()
            if result is not None and not all(np.array_equal(a, b) for a, b in zip(result, reference)):
                print(f"stencil: {name} differs from the serial result", file=sys.stderr)
                return 1
            times[name].append(elapsed)
    serial = statistics.median(times["serial"])
    print(f"stencil: {STEPS} steps x {BLOCKS} blocks of {BLOCK} float64, "
          f"{1e3 * serial / (STEPS * BLOCKS):.1f} ms per task serial; 2 workers")
    for name, samples in times.items():
        t = statistics.median(samples)
        print(f"  {name:20s} {1e3 * t:8.1f} ms   speedup over serial {serial / t:.2f}")
        records.append({"workload": "stencil", "system": name, "threads": 1 if name == "serial" else 2,
                        "ms": 1e3 * t, "speedup": serial / t, "runs": len(samples)})
    if args.json:
        with open(args.json, "w") as out:
            json.dump(records, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
