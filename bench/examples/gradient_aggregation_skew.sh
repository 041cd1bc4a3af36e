#!/usr/bin/env bash
# Step time of examples/gradient_aggregation with --skew (device d's backward d + 1 times slower), aggregating by
# accumulation against one op that sums after the last device (--aggregate accumulate | sum), in one run of this
# script: the two alternate, run after run, so that both see the same load; medians of RUNS runs each, and their ratio
# (issue 47's target: accumulate at most 0.75 of sum). Each run prints its own step time, the median over its epochs
# after the first (the example's "step time:" line).
#
#   bench/examples/gradient_aggregation_skew.sh [--runs N] [--binary PATH] [EXAMPLE OPTIONS...]
#     --runs N       runs of each mode (default 5)
#     --binary PATH  default build/release/examples/gradient_aggregation/gradient_aggregation
#     EXAMPLE OPTIONS go to every run (default --devices 4 --epochs 6); --skew and --aggregate are this script's.
#
# Wall-clock figures: the machine's load is printed before and after (uptime); compare the two modes only within one
# run of this script.
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
if ((${#options[@]} == 0)); then options=(--devices 4 --epochs 6); fi
if [[ ! -x $binary ]]; then
  echo "gradient_aggregation_skew.sh: no $binary (cmake --build --preset release --target gradient_aggregation)" >&2
  exit 2
fi
if ! [[ $runs =~ ^[1-9][0-9]*$ ]]; then
  echo "gradient_aggregation_skew.sh: --runs needs a positive integer, not '$runs'" >&2
  exit 2
fi

# The "step time: N us" of one run of the example with the given aggregation.
step_us() {
  local line
  line=$("$binary" "${options[@]}" --skew --aggregate "$1" | grep '^step time:')
  [[ -n $line ]] || { echo "gradient_aggregation_skew.sh: no step time from $binary" >&2; exit 1; }
  awk '{print $3}' <<< "$line"
}

median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

echo "options: ${options[*]} --skew; $runs runs of each, alternating"
echo "load before: $(uptime)"
accumulate=()
sum=()
printf '%-4s %16s %10s\n' run accumulate_us sum_us
for ((run = 1; run <= runs; ++run)); do
  # Alternate which mode goes first, so that neither always runs right after the other.
  if ((run % 2 == 1)); then
    a=$(step_us accumulate)
    s=$(step_us sum)
  else
    s=$(step_us sum)
    a=$(step_us accumulate)
  fi
  accumulate+=("$a")
  sum+=("$s")
  printf '%-4s %16s %10s\n' "$run" "$a" "$s"
done
echo "load after:  $(uptime)"
a=$(printf '%s\n' "${accumulate[@]}" | median)
s=$(printf '%s\n' "${sum[@]}" | median)
awk -v a="$a" -v s="$s" 'BEGIN {printf "median step: accumulate %.0f us, sum %.0f us, ratio %.2f (target <= 0.75)\n", a, s, a / s}'
