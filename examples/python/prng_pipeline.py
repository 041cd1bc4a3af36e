#!/usr/bin/env python3
"""A data pipeline with random augmentation whose output is bitwise identical for any number of workers
(examples/prng_pipeline/prng_pipeline.cpp, in NumPy).

Each sample is loaded, augmented (a random flip, shift and noise) and normalised by engine ops. One
numpy.random.Generator is itself an engine variable that every augmentation mutates, so the augmentations draw from
it in push order, one after another, whatever thread runs them; loading and normalising, which touch only their own
sample, run in parallel around them. No lock and no per-thread generator: the engine's ordering is the determinism.

    prng_pipeline.py [--samples N] [--workers W] [--check]

Without --workers it runs the pipeline on 1, 2 and 4 workers and prints each run's checksum (SHA-256 over every
output value's bytes, in sample order); --check exits with status 1 if they differ.
"""
import argparse
import hashlib
import sys
import time

import numpy as np

import depengine

VALUES = 256  # per sample


def run(count, workers):
    generator = np.random.Generator(np.random.PCG64(20261122))
    with depengine.Engine(workers=workers) as engine:
        rng_var = engine.variable()  # orders every draw from `generator`
        samples = [engine.empty(VALUES, dtype=np.float32) for _ in range(count)]
        for i, sample in enumerate(samples):
            def load(s, i=i):
                s[:] = np.sin(0.01 * (i * VALUES + np.arange(VALUES)))

            def augment(s):
                if generator.integers(2) == 0:
                    s[:] = s[::-1].copy()
                s[:] = np.roll(s, int(generator.integers(VALUES)))
                s += generator.normal(0.0, 0.1, VALUES).astype(np.float32)

            def normalise(s):
                s -= s.mean()
                s /= np.sqrt((s * s).mean() + np.float32(1e-6))

            engine.push(load, mutates=[sample], name="load")
            engine.push(augment, mutates=[sample, rng_var], name="augment")
            engine.push(normalise, mutates=[sample], name="normalise")
        digest = hashlib.sha256()
        for sample in samples:
            digest.update(sample.numpy().tobytes())
    return digest.hexdigest()[:16]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=4000)
    parser.add_argument("--workers", type=int, help="one run on this many workers (default: 1, 2 and 4)")
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    if args.samples < 1 or (args.workers is not None and args.workers < 1):
        parser.error("--samples and --workers must be positive")
    checksums = []
    for workers in [args.workers] if args.workers else [1, 2, 4]:
        start = time.perf_counter()
        checksums.append(run(args.samples, workers))
        print(f"{workers} workers: checksum {checksums[-1]} in {1e3 * (time.perf_counter() - start):.0f} ms")
    if args.check and len(set(checksums)) != 1:
        print("check failed: the checksums differ", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
