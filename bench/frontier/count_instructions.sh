#!/usr/bin/env bash
# Instructions per frontier operation at 4 entries, counted by callgrind: a figure that, unlike ns/op, does not move
# from run to run or with the load on the machine.
#
#   bench/frontier/count_instructions.sh [BENCH_BINARY]
#     BENCH_BINARY defaults to build/release/bench/frontier/bench_frontier.
#
# For each op, `bench_frontier --count OP K` runs exactly K iterations inside run_iterations(), the only function
# callgrind collects (--toggle-collect). Two runs, K1 and K2 iterations, cancel everything that does not repeat (the
# call, the first-iteration cache misses): (I(K2) - I(K1)) / (K2 - K1) is the count per iteration. An iteration also
# pays the loop (index, sink, escape); the `loop` row is that cost alone, and the last column subtracts it.
set -euo pipefail

bench=${1:-build/release/bench/frontier/bench_frontier}
k1=1000
k2=11000
ops=(loop copy merge-same-axes merge-same-in-place merge-interleaved dominates compare undominated insert_or_raise)

source "$(dirname "$0")/../common/callgrind.sh"
require_bench count_instructions.sh "$bench"

printf '%-20s %12s %12s %12s %14s\n' op "Ir(K=$k1)" "Ir(K=$k2)" "Ir/iteration" "Ir/op - loop"
loop_cost=""
for op in "${ops[@]}"; do
  counts=$(per_step run_iterations "$k1" "$k2" "$bench" --count "$op")
  read -r i1 i2 per <<< "$counts"
  [[ -z $loop_cost ]] && loop_cost=$per
  net=$(awk -v p="$per" -v l="$loop_cost" 'BEGIN { printf "%.2f", p - l }')
  printf '%-20s %12s %12s %12s %14s\n' "$op" "$i1" "$i2" "$per" "$net"
done
