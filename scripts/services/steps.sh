# Sourced by the service scripts: each names its steps as functions `do_<step>` and
# ends with `run_steps "$@"`.

log() { echo "[$(basename "$0")] $*" >&2; }

# Reads the package lists unless there are some.
apt_lists() {
  ls /var/lib/apt/lists/*_Packages >/dev/null 2>&1 || apt-get update -q >/dev/null
}

# apt-get install with the given arguments, quietly, without letting the packages'
# post-install scripts start daemons (a policy-rc.d that exits 101, removed after unless
# one was there already).
apt_install() {
  apt_lists
  local made_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; made_policy=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null
  [ "$made_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d
  return 0
}

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
