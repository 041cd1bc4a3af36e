#!/usr/bin/env python3
"""A training loop written as engine ops, in NumPy: the C++ example's 2 -> 64 -> 64 -> 3 ReLU perceptron learns the
interleaved-spirals problem with minibatch SGD (examples/training_loop/training_loop.cpp).

Every weight and gradient is an engine array. Each step pushes, in plain program order, the forward pass, the loss,
and per layer, top down, the backward op followed at once by that layer's SGD update. The engine runs each as soon as
its arrays allow: a layer's update runs while the backward pass of the layers below is still going, and the next
step's forward starts as soon as the updates it reads are done. NumPy's matrix products release the GIL, so two
workers overlap them. Nothing here synchronises by hand; the only wait is for an epoch's statistics, one epoch behind.

    training_loop.py [--epochs N] [--batch N] [--rows N] [--workers N] [--check]

--check exits with status 1 unless the last epoch's mean loss is at most a quarter of the first's and its accuracy
is at least 90% (the same self-test as the C++ example's; CI runs it). The time per step is printed at the end.
"""
import argparse
import sys
import time

import numpy as np
from tqdm import tqdm

import depengine

CLASSES = 3
HIDDEN = 64
LEARNING_RATE = 0.5


def spirals(rows, seed=7):
    """`rows` points per class on three interleaved spirals, shuffled: (x float32 [n, 2], labels int64 [n])."""
    rng = np.random.default_rng(seed)
    xs, labels = [], []
    for c in range(CLASSES):
        r = np.linspace(0.0, 1.0, rows)
        t = np.linspace(c * 4.0, (c + 1) * 4.0, rows) + rng.standard_normal(rows) * 0.2
        xs.append(np.stack([r * np.sin(t), r * np.cos(t)], axis=1))
        labels.append(np.full(rows, c))
    x = np.concatenate(xs).astype(np.float32)
    y = np.concatenate(labels)
    order = rng.permutation(len(y))
    return x[order], y[order]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--rows", type=int, default=400, help="points per class")
    parser.add_argument("--workers", type=int, default=0, help="0: the hardware threads")
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    if min(args.epochs, args.batch, args.rows) < 1 or args.workers < 0:
        parser.error("--epochs, --batch and --rows must be positive, --workers at least 0")

    x_all, y_all = spirals(args.rows)
    steps = len(y_all) // args.batch
    rng = np.random.default_rng(1)
    sizes = [2, HIDDEN, HIDDEN, CLASSES]

    with depengine.Engine(workers=args.workers) as engine:
        weights = [engine.array(rng.standard_normal((sizes[k], sizes[k + 1])) * np.sqrt(2.0 / sizes[k]),
                                dtype=np.float32) for k in range(3)]
        biases = [engine.zeros(sizes[k + 1], dtype=np.float32) for k in range(3)]
        grad_w = [engine.zeros(w.shape, dtype=np.float32) for w in weights]
        grad_b = [engine.zeros(b.shape, dtype=np.float32) for b in biases]
        # Activations: the batch's input, then each layer's output; the gradient of each layer's output.
        acts = [engine.zeros((args.batch, s), dtype=np.float32) for s in sizes]
        grads = [engine.zeros((args.batch, s), dtype=np.float32) for s in sizes[1:]]
        stats = [engine.zeros((steps, 2)) for _ in range(2)]  # per epoch parity: (loss sum, hits) per step

        def step(epoch, s):
            lo = s * args.batch
            x, y = x_all[lo:lo + args.batch], y_all[lo:lo + args.batch]

            def load(a0):
                a0[:] = x

            engine.push(load, mutates=[acts[0]], name="load")
            for k in range(3):
                def forward(w, b, a_in, a_out, relu=k < 2):
                    np.matmul(a_in, w, out=a_out)
                    a_out += b
                    if relu:
                        np.maximum(a_out, 0, out=a_out)

                engine.push(forward, reads=[weights[k], biases[k], acts[k]], mutates=[acts[k + 1]],
                            name=f"forward {k}")

            def loss(logits, d_logits, st):
                shifted = logits - logits.max(axis=1, keepdims=True)
                p = np.exp(shifted)
                p /= p.sum(axis=1, keepdims=True)
                st[s, 0] = -np.log(p[np.arange(len(y)), y] + 1e-12).sum()
                st[s, 1] = (logits.argmax(axis=1) == y).sum()
                p[np.arange(len(y)), y] -= 1.0
                d_logits[:] = p / len(y)

            engine.push(loss, reads=[acts[3]], mutates=[grads[2], stats[epoch % 2]], name="loss")
            for k in reversed(range(3)):
                def backward(w, a_in, a_out, d_out, gw, gb, *d_in, k=k):
                    if k < 2:
                        d_out = d_out * (a_out > 0)
                    np.matmul(a_in.T, d_out, out=gw)
                    gb[:] = d_out.sum(axis=0)
                    if d_in:
                        np.matmul(d_out, w.T, out=d_in[0])

                mutated = [grad_w[k], grad_b[k]] + ([grads[k - 1]] if k > 0 else [])
                engine.push(backward, reads=[weights[k], acts[k], acts[k + 1], grads[k]], mutates=mutated,
                            name=f"backward {k}")

                def update(gw, gb, w, b):
                    w -= LEARNING_RATE * gw
                    b -= LEARNING_RATE * gb

                engine.push(update, reads=[grad_w[k], grad_b[k]], mutates=[weights[k], biases[k]], name=f"update {k}")

        history = []

        def report(epoch):
            st = stats[epoch % 2].numpy()  # waits for that epoch's losses only
            history.append((st[:, 0].sum() / (steps * args.batch), st[:, 1].sum() / (steps * args.batch)))

        start = time.perf_counter()
        bar = tqdm(range(args.epochs), unit="epoch", file=sys.stdout, mininterval=0.5)
        for epoch in bar:
            for s in range(steps):
                step(epoch, s)
            if epoch > 0:
                report(epoch - 1)  # one epoch behind: the engine keeps running this epoch meanwhile
                bar.set_postfix(loss=f"{history[-1][0]:.4f}", accuracy=f"{100 * history[-1][1]:.1f}%")
        report(args.epochs - 1)
        engine.wait_all()
        elapsed = time.perf_counter() - start

    first, last = history[0], history[-1]
    print(f"epoch 1: loss {first[0]:.4f} accuracy {100 * first[1]:.1f}%; epoch {args.epochs}: loss {last[0]:.4f} "
          f"accuracy {100 * last[1]:.1f}%")
    print(f"{1e6 * elapsed / (args.epochs * steps):.1f} us per step (batch {args.batch}, {steps} steps per epoch)")
    if args.check and not (last[0] <= first[0] / 4 and last[1] >= 0.9):
        print("check failed: the loss must fall fourfold and the accuracy reach 90%", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
