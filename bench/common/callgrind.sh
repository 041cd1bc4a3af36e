# Sourced by the count_instructions.sh scripts: instruction counts by callgrind, collected inside one function only.
#
#   require_bench NAME BINARY   exits with a message unless valgrind is installed and BINARY is executable
#   collected FUNCTION CMD...   prints the instructions CMD executes inside FUNCTION (callgrind --toggle-collect)
#   per_step FUNCTION K1 K2 CMD...
#                               runs `CMD... K1` and `CMD... K2` and prints "I1 I2 PER", PER = (I2 - I1) / (K2 - K1):
#                               the instructions per repetition, with what does not repeat cancelled; exits with a
#                               message if callgrind reported no count

require_bench() {
  if ! command -v valgrind > /dev/null; then
    echo "$1: valgrind is not installed" >&2
    exit 1
  fi
  if [[ ! -x $2 ]]; then
    echo "$1: no benchmark binary at $2 (build it first)" >&2
    exit 1
  fi
}

collected() {
  local toggle=$1 out
  shift
  out=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null --toggle-collect="*$toggle*" "$@" 2>&1)
  sed -n 's/.*Collected : \([0-9][0-9]*\).*/\1/p' <<< "$out"
}

per_step() {
  local toggle=$1 k1=$2 k2=$3 i1 i2
  shift 3
  i1=$(collected "$toggle" "$@" "$k1")
  i2=$(collected "$toggle" "$@" "$k2")
  if [[ -z $i1 || -z $i2 ]]; then
    echo "callgrind reported no count for: $*" >&2
    exit 1
  fi
  awk -v a="$i1" -v b="$i2" -v k1="$k1" -v k2="$k2" 'BEGIN { printf "%s %s %.2f\n", a, b, (b - a) / (k2 - k1) }'
}
