#!/usr/bin/env bash
# The one command of the side-by-side comparison (bench/README.md): builds bench_peers and everything it runs (every
# peer, the METG harness), then runs it: the comparison table, the METG table, and with --json FILE the records.
#
#   bench/peers/run.sh [--build-dir DIR] [--runs N] [--json FILE] [--smoke] [--part peers|metg|all]
#                      [--only SYSTEM,...] [--workload NAME] [--curves] [--metg-steps T] [--metg-max-us U]
#
# DIR defaults to build/release (configured with the release preset if it is not yet). Everything after the build
# directory goes to bench_peers.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build/release
if [ "${1:-}" = "--build-dir" ]; then
  build=$2
  shift 2
fi
[ -f "$build/build.ninja" ] || cmake --preset release -B "$build"
cmake --build "$build" --target bench_peers
exec "$build/bench/peers/bench_peers" "$@"
