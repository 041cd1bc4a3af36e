#!/usr/bin/env bash
# Step time of examples/gradient_aggregation with --skew (device d's backward d + 1 times slower), aggregating by
# accumulation against one op that sums after the last device. Each run of the example alternates the two epoch by
# epoch (--aggregate alternate), so that both see the same load, and prints each one's median step time over its
# epochs; this script runs it RUNS times and prints the medians of those medians, their ratio, and the median of the
# runs' own ratios (each run's two figures saw the same load; issue 47's target: accumulate at most 0.75 of sum).
#
#   bench/examples/gradient_aggregation_skew.sh [--runs N] [--binary PATH] [EXAMPLE OPTIONS...]
#     --runs N       runs of the example (default 5)
#     --binary PATH  default build/release/examples/gradient_aggregation/gradient_aggregation
#     EXAMPLE OPTIONS go to every run (default --devices 4 --epochs 21: 10 timed epochs of each aggregation, the first
#                    epoch filling the buffer pools); --skew and --aggregate are this script's.
#
# Wall-clock figures: the machine's load is printed before and after (uptime); compare the two aggregations only
# within one run of this script.
set -euo pipefail

runs=5
binary=build/release/examples/gradient_aggregation/gradient_aggregation
options=()
while (($# > 0)); do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --binary) binary=$2; shift 2 ;;
    --skew | --aggregate) echo "gradient_aggregation_skew.sh: $1 is set by the script" >&2; exit 2 ;;
    *) options+=("$1"); shift ;;
  esac
done
if ((${#options[@]} == 0)); then options=(--devices 4 --epochs 21); fi
if [[ ! -x $binary ]]; then
  echo "gradient_aggregation_skew.sh: no $binary (cmake --build --preset release --target gradient_aggregation)" >&2
  exit 2
fi
if ! [[ $runs =~ ^[1-9][0-9]*$ ]]; then
  echo "gradient_aggregation_skew.sh: --runs needs a positive integer, not '$runs'" >&2
  exit 2
fi

# The step time of `aggregation` ("accumulate" or "sum") in the example's output `report`.
step_us() {
  local line
  line=$(grep "^step time, aggregate $1, skewed:" <<< "$2" || true)
  [[ -n $line ]] || { echo "gradient_aggregation_skew.sh: no step time of $1 from $binary" >&2; exit 1; }
  sed -E 's/.*skewed: ([0-9.]+) us.*/\1/' <<< "$line"
}

median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

echo "options: ${options[*]} --skew --aggregate alternate; $runs runs"
echo "load before: $(uptime)"
accumulate=()
sum=()
ratios=()
printf '%-4s %16s %10s %8s\n' run accumulate_us sum_us ratio
for ((run = 1; run <= runs; ++run)); do
  report=$("$binary" "${options[@]}" --skew --aggregate alternate)
  a=$(step_us accumulate "$report")
  s=$(step_us sum "$report")
  accumulate+=("$a")
  sum+=("$s")
  ratios+=("$(awk -v a="$a" -v s="$s" 'BEGIN {printf "%.4f", a / s}')")
  awk -v r="$run" -v a="$a" -v s="$s" 'BEGIN {printf "%-4s %16s %10s %8.2f\n", r, a, s, a / s}'
done
echo "load after:  $(uptime)"
a=$(printf '%s\n' "${accumulate[@]}" | median)
s=$(printf '%s\n' "${sum[@]}" | median)
r=$(printf '%s\n' "${ratios[@]}" | median)
awk -v a="$a" -v s="$s" -v r="$r" 'BEGIN {
  printf "median step: accumulate %.0f us, sum %.0f us, ratio %.2f; median ratio of a run %.2f (target <= 0.75)\n",
         a, s, a / s, r
}'
