"""A randomized DAG of NumPy ops pushed from 1-4 Python threads equals a serial run; 10^5 pushes keep memory bounded.

The seed is printed, and DEPENGINE_TEST_SEED reruns one."""
import os
import random
import resource
import threading

import numpy as np
import pytest

import depengine

ARRAYS = 8
OPS_PER_THREAD = 150


def plan(seed, threads):
    """Per thread, a list of ops (reads, writes, k): each writes to its outputs a function of its inputs and k. Each
    thread works on its own arrays plus two shared ones it only reads, so that the result cannot depend on how the
    threads interleave."""
    rng = random.Random(seed)
    plans = []
    for t in range(threads):
        own = list(range(2 + t * ARRAYS, 2 + (t + 1) * ARRAYS))
        ops = []
        for k in range(OPS_PER_THREAD):
            reads = rng.sample(own + [0, 1], rng.randint(0, 3))
            writes = rng.sample([i for i in own if i not in reads], rng.randint(1, 2))
            ops.append((reads, writes, k))
        plans.append(ops)
    return plans


def apply(views_in, views_out, k):
    acc = np.full_like(views_out[0], float(k % 7))
    for v in views_in:
        acc = acc + 0.5 * v
    for out in views_out:
        out[:] = np.tanh(0.9 * out + acc)


def serial(plans, initial):
    data = [x.copy() for x in initial]
    for ops in plans:
        for reads, writes, k in ops:
            apply([data[i] for i in reads], [data[i] for i in writes], k)
    return data


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_random_dag_equals_serial(threads, executor):
    seed = int(os.environ.get("DEPENGINE_TEST_SEED", random.randrange(1 << 30)))
    print(f"seed {seed} (rerun: DEPENGINE_TEST_SEED={seed})")
    plans = plan(seed, threads)
    rng = np.random.default_rng(seed)
    initial = [rng.standard_normal(64) for _ in range(2 + threads * ARRAYS)]
    expected = serial(plans, initial)
    with depengine.Engine(workers=2, executor=executor) as engine:
        arrays = [engine.array(x) for x in initial]

        def pusher(ops):
            for reads, writes, k in ops:
                n = len(reads)
                engine.push(lambda *views, n=n, k=k: apply(views[:n], views[n:], k),
                            reads=[arrays[i] for i in reads], mutates=[arrays[i] for i in writes])

        workers = [threading.Thread(target=pusher, args=(ops,)) for ops in plans]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        for got, want in zip(arrays, expected):
            assert np.array_equal(got.numpy(), want)


def rss_kib():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def test_many_pushes_keep_memory_bounded():
    # 10^5 pushes of an empty function: memory after the first 10^4 may not keep growing. The engine keeps the op
    # records it has needed (at most max_in_flight of them), so the bound is reached during the warm-up.
    with depengine.Engine(workers=2, max_in_flight=1024) as engine:
        v = engine.variable()

        def nothing():
            pass

        def burst(n):
            for _ in range(n):
                engine.push(nothing, mutates=[v])
            engine.wait_all()

        burst(10_000)
        warmed = rss_kib()
        burst(90_000)
        grown = rss_kib() - warmed
        print(f"RSS grew {grown} KiB over 9e4 pushes after warm-up")
        assert grown < 8 * 1024  # a leak of even 100 bytes per push would be 8.6 MiB
