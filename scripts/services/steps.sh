# Sourced by the service scripts: each names its steps as functions `do_<step>` and
# ends with `run_steps "$@"`.

log() { echo "[$(basename "$0")] $*" >&2; }

# Runs each step named on the command line (`ldaps-address` runs `do_ldaps_address`);
# with none, `install start`. An unknown step prints the usage and exits 2.
run_steps() {
  [ $# -gt 0 ] || set -- install start
  local step steps
  steps=$(declare -F | sed -n 's/^declare -f do_//p' | tr _ - | paste -sd'|')
  for step in "$@"; do
    if declare -F "do_${step//-/_}" >/dev/null; then
      "do_${step//-/_}"
    else
      echo "usage: $0 [$steps]..." >&2
      exit 2
    fi
  done
}
