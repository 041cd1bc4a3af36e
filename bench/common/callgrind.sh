# Sourced by the count_instructions.sh scripts: instruction counts by callgrind, collected inside one function only.
#
#   require_bench NAME BINARY   exits with a message unless valgrind is installed and BINARY is executable
#   collected FUNCTION CMD...   prints the instructions CMD executes inside FUNCTION (callgrind --toggle-collect)

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
