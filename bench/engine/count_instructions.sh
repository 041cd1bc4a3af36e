#!/usr/bin/env bash
# Instructions per op of the engine on the inline executor, counted by callgrind: the four standard workloads with
# empty bodies, pushed (the engine's own push, grant, run and complete path) and replayed (a replay's run and complete
# path). Unlike ns/op it does not move from run to run or with the load on the machine, so it is the figure to compare
# before and after a change of the hot path.
#
#   bench/engine/count_instructions.sh [BENCH_BINARY]
#     BENCH_BINARY defaults to build/release/bench/engine/bench_engine.
#
# `bench_engine --count WORKLOAD K` runs WORKLOAD's first K ops once untimed (filling the record pool and the variable
# table), then again inside counted_run(), the only function callgrind collects (--toggle-collect). Two runs, K1 and
# K2 ops, cancel what does not repeat per op (making and deleting the variables, the final wait):
# (I(K2) - I(K1)) / (K2 - K1) is the count per op. `bench_engine --count-replay WORKLOAD STEP K` captures WORKLOAD's
# first STEP ops, replays them twice untimed, then K times inside counted_replays(); the count per replay, from K1 and
# K2 replays, divided by STEP is the count per replayed op.
set -euo pipefail

bench=${1:-build/release/bench/engine/bench_engine}
k1=2000
k2=12000
workloads=(independent chain randsum fanout)

source "$(dirname "$0")/../common/callgrind.sh"
require_bench count_instructions.sh "$bench"

step=2000
replays1=2
replays2=12

printf '%-12s %12s %12s %10s %14s\n' workload "Ir(K=$k1)" "Ir(K=$k2)" "Ir/op" "replay Ir/op"
for workload in "${workloads[@]}"; do
  counts=$(per_step counted_run "$k1" "$k2" "$bench" --count "$workload")
  read -r i1 i2 per <<< "$counts"
  counts=$(per_step counted_replays "$replays1" "$replays2" "$bench" --count-replay "$workload" "$step")
  read -r _ _ per_replay <<< "$counts"
  replay_per_op=$(awk -v r="$per_replay" -v s="$step" 'BEGIN { printf "%.2f", r / s }')
  printf '%-12s %12s %12s %10s %14s\n' "$workload" "$i1" "$i2" "$per" "$replay_per_op"
done
