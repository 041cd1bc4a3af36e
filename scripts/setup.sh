#!/usr/bin/env bash
# Installs the Debian bookworm packages depengine needs to build, test and benchmark. Idempotent: packages already
# present are skipped, and nothing is fetched when all are. Run it as root, or as a user who may use sudo: it installs
# through sudo then.
set -euo pipefail

packages=(
  build-essential cmake ninja-build   # toolchain
  clang libclang-rt-14-dev            # ThreadSanitizer preset (clang's runtime, ignorelist support)
  libtbb-dev                          # the threadpool executor (oneTBB 2021.8)
  libboost-dev                        # header-only Lockfree and Asio
  catch2                              # tests (Catch2 v2)
  nlohmann-json3-dev                  # tests: parse the trace files the engine writes
  libbenchmark-dev                    # benchmarks
  valgrind                            # instruction counts in bench/
  libomp-dev libstarpu-dev pkgconf    # bench/peers: LLVM's OpenMP runtime (built with clang), StarPU 1.3 (pkg-config)
  openmpi-bin libopenmpi-dev          # executors/mpi and distributed/ (Open MPI 4.1); their tests run under mpirun
  hipcc libamdhip64-dev               # the HIP stream backend (HIP 5.2 runtime; hipcc turns DEPENGINE_WITH_HIP on)
  python3 python3-matplotlib          # scripts/trace_to_png.py: renders traces
  doxygen                             # the API reference (target docs; the api_reference test)
  graphviz                            # dot: renders the DOT that graphs and in-flight reports write (docs/pictures.md)
  python3-dev pybind11-dev python3-pybind11   # python/: the depengine module (pybind11 2.10, Python 3.11)
  python3-numpy python3-pytest        # python/: engine arrays; test/python/ (pytest, run by ctest)
  python3-tqdm python3-mpi4py         # examples/python/: progress bar, gradient aggregation under mpirun
  python3-dask                        # bench/python/: Dask's threaded scheduler, the peer measured
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
