#!/usr/bin/env bash
# Instructions per op of the engine on the inline executor, counted by callgrind: the four standard workloads with
# empty bodies, so the count is the engine's own push, grant, run and complete path. Unlike ns/op it does not move from
# run to run or with the load on the machine, so it is the figure to compare before and after a change of the hot path.
#
#   bench/engine/count_instructions.sh [BENCH_BINARY]
#     BENCH_BINARY defaults to build/release/bench/engine/bench_engine.
#
# `bench_engine --count WORKLOAD K` runs WORKLOAD's first K ops once untimed (filling the record pool and the variable
# table), then again inside counted_run(), the only function callgrind collects (--toggle-collect). Two runs, K1 and
# K2 ops, cancel what does not repeat per op (making and deleting the variables, the final wait):
# (I(K2) - I(K1)) / (K2 - K1) is the count per op.
set -euo pipefail

bench=${1:-build/release/bench/engine/bench_engine}
k1=2000
k2=12000
workloads=(independent chain randsum fanout)

source "$(dirname "$0")/../common/callgrind.sh"
require_bench count_instructions.sh "$bench"

printf '%-12s %12s %12s %10s\n' workload "Ir(K=$k1)" "Ir(K=$k2)" "Ir/op"
for workload in "${workloads[@]}"; do
  counts=$(per_step counted_run "$k1" "$k2" "$bench" --count "$workload")
  read -r i1 i2 per <<< "$counts"
  printf '%-12s %12s %12s %10s\n' "$workload" "$i1" "$i2" "$per"
done
