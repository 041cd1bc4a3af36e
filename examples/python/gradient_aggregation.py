#!/usr/bin/env python3
"""Data-parallel training across processes: each MPI rank computes the gradients of its shard of every batch with
engine ops, an op sums them across ranks with mpi4py, and every rank applies the same update
(examples/gradient_aggregation/, in NumPy).

The network is a 2 -> 64 -> 3 ReLU perceptron on the interleaved spirals (training_loop.py's data). Per step, on each
rank: forward and backward over the rank's shard (engine ops on engine arrays), then per layer an all-reduce op that
mutates the layer's gradient and a communicator variable (so the all-reduces of one rank are issued in push order, the
same order on every rank, whichever worker runs them), then the layer's update, which runs while the next layer's
all-reduce is on the wire.

    mpirun -np 2 python3 gradient_aggregation.py [--steps N] [--batch N] [--workers N] [--check]

--check: rank 0 also trains the same network in one process, on whole batches, in plain NumPy, and exits with status
1 unless every weight agrees within TOLERANCE (float64; the sums differ only in their order of addition).
"""
import argparse
import os
import sys

import numpy as np
from mpi4py import MPI

import depengine

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from training_loop import spirals  # noqa: E402

HIDDEN = 64
CLASSES = 3
LEARNING_RATE = 0.5
TOLERANCE = 1e-9


def initial_weights():
    rng = np.random.default_rng(3)
    return [rng.standard_normal((2, HIDDEN)) * np.sqrt(1.0), np.zeros(HIDDEN),
            rng.standard_normal((HIDDEN, CLASSES)) * np.sqrt(2.0 / HIDDEN), np.zeros(CLASSES)]


def gradients(w1, b1, w2, b2, x, y, total):
    """The gradients of the mean cross-entropy over `total` samples, summed over this shard (x, y)."""
    h = np.maximum(x @ w1 + b1, 0)
    logits = h @ w2 + b2
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    p[np.arange(len(y)), y] -= 1.0
    d_logits = p / total
    d_h = (d_logits @ w2.T) * (h > 0)
    return [x.T @ d_h, d_h.sum(axis=0), h.T @ d_logits, d_logits.sum(axis=0)]


def train_distributed(comm, x_all, y_all, steps, batch, workers):
    rank, size = comm.Get_rank(), comm.Get_size()
    shard = batch // size
    with depengine.Engine(workers=workers) as engine:
        params = [engine.array(w) for w in initial_weights()]
        grads = [engine.zeros(w.shape) for w in params]
        comm_var = engine.variable()  # orders this rank's all-reduces
        for step in range(steps):
            lo = (step * batch) % (len(y_all) - batch + 1) + rank * shard
            x, y = x_all[lo:lo + shard], y_all[lo:lo + shard]

            def backward(w1, b1, w2, b2, g1, gb1, g2, gb2, x=x, y=y):
                for out, g in zip((g1, gb1, g2, gb2), gradients(w1, b1, w2, b2, x, y, batch)):
                    out[:] = g

            engine.push(backward, reads=params, mutates=grads, name="backward")
            for k in reversed(range(4)):
                def all_reduce(g):
                    comm.Allreduce(MPI.IN_PLACE, g, op=MPI.SUM)

                engine.push(all_reduce, mutates=[grads[k], comm_var], name=f"all-reduce {k}")

                def update(g, w):
                    w -= LEARNING_RATE * g

                engine.push(update, reads=[grads[k]], mutates=[params[k]], name=f"update {k}")
        return [p.numpy() for p in params]


def train_serial(x_all, y_all, steps, batch):
    params = initial_weights()
    for step in range(steps):
        lo = (step * batch) % (len(y_all) - batch + 1)
        for w, g in zip(params, gradients(*params, x_all[lo:lo + batch], y_all[lo:lo + batch], batch)):
            w -= LEARNING_RATE * g
    return params


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch", type=int, default=120)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    if args.steps < 1 or args.batch < 1 or args.batch % comm.Get_size() != 0 or args.workers < 0:
        parser.error("--steps positive; --batch positive and a multiple of the number of ranks")
    x_all, y_all = spirals(400)
    x_all = x_all.astype(np.float64)
    params = train_distributed(comm, x_all, y_all, args.steps, args.batch, args.workers)
    status = 0
    if comm.Get_rank() == 0:
        reference = train_serial(x_all, y_all, args.steps, args.batch)
        error = max(float(np.abs(p - r).max()) for p, r in zip(params, reference))
        print(f"{comm.Get_size()} ranks, {args.steps} steps: largest difference from one process {error:.3g} "
              f"(tolerance {TOLERANCE:g})")
        if args.check and not error <= TOLERANCE:
            print("check failed: the ranks' weights differ from one process's", file=sys.stderr)
            status = 1
    return comm.bcast(status, root=0)


if __name__ == "__main__":
    sys.exit(main())
