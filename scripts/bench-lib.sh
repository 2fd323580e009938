# Shared by the HTTP benchmarks (bench-jobs, bench-events); sourced, not run.
# Builds the release binary, makes a work directory cleaned up on exit, and defines:
#   start_server [store location] [TOML]  starts drover on a free port, sets $url, $server
#                                  (under $launcher when set, e.g. valgrind)
#   stop_server, rss_kib           stop it; its resident memory in KiB
#   report <wrk output> <label> <target req/s, 0 for none>
#   cpu_ticks, cpu_report <ticks before> <ticks after> <wrk output>
#                                  the server's CPU time (user, system) per request: a figure
#                                  that moves far less than req/s on a shared machine
#   fsync_probe                    prints the disk's fsync latency
# DROVER_BIN=path measures that binary instead of building this tree's (to compare two
# builds in alternating runs, the only fair comparison on a machine whose speed drifts).
# $auth is the Authorization header of the admin user "bench".
# Benchmarks measure the service, not a first start's guest image (built as root).
export DROVER_PREPARE_GUEST_IMAGE=false
command -v wrk >/dev/null || apt-get install -y wrk >/dev/null
if [ -n "${DROVER_BIN:-}" ]; then
  bin=$DROVER_BIN
else
  cargo build --release -p drover
  bin=target/release/drover
fi
work=$(mktemp -d)
server=
cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null || true
  wait 2>/dev/null || true
  if [ -n "${PG_STARTED:-}" ]; then DIR=/tmp/drover-pg-bench PGPORT=54330 scripts/services/postgres.sh stop || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
hash=$(echo bench-password | "$bin" hash-password)
auth="Authorization: Basic $(printf bench:bench-password | base64)"

start_server() { # $1: store location ("" for SQLite); $2: more TOML (optional)
  local data="$work/data-$RANDOM"
  {
    echo 'listen = "127.0.0.1:0"'
    echo "data_dir = \"$data\""
    [ -n "$1" ] && echo "store = \"$1\""
    echo '[[users]]'
    echo 'name = "bench"'
    echo "password_hash = \"$hash\""
    echo 'admin = true'
    [ -n "${2:-}" ] && echo "$2"
  } >"$work/drover.toml"
  # shellcheck disable=SC2086 # $launcher is a command line (e.g. valgrind's) or empty
  ${launcher:-} "$bin" serve --config "$work/drover.toml" >"$work/out" 2>&1 &
  server=$!
  for _ in $(seq 600); do grep -q "listening on http" "$work/out" && break; sleep 0.1; done
  url=$(grep -o 'http://[^ ]*' "$work/out" | head -1)
  curl -sf -H "$auth" "$url/rest/diag/about" >/dev/null
}

stop_server() { kill "$server"; wait "$server" 2>/dev/null || true; server=; }

report() { # $1: wrk output, $2: label, $3: target req/s
  python3 - "$1" "$2" "$3" <<'PY'
import re, sys
text, label, target = open(sys.argv[1]).read(), sys.argv[2], float(sys.argv[3])
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
def pct(p):
    value, unit = re.search(rf"\s{p}%\s+([\d.]+)(us|ms|s)", text).groups()
    return float(value) * {"us": 1e-3, "ms": 1, "s": 1e3}[unit]
errors = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
goal = f" (target {target:,.0f}: ratio {rps / target:.2f})" if target > 0 else ""
print(f"{label}: {rps:,.0f} req/s{goal}; "
      f"latency p50 {pct(50):.2f} ms, p90 {pct(90):.2f} ms, p99 {pct(99):.2f} ms "
      f"(p99 target 20 ms: ratio {pct(99) / 20:.2f}); non-2xx: {errors.group(1) if errors else 0}")
PY
}

rss_kib() { awk '/VmRSS/ {print $2}' "/proc/$server/status"; }

# The server's CPU time so far (user and system clock ticks: fields 14 and 15 of its
# stat), and the ticks the hypervisor has taken from this machine (steal, in /proc/stat).
cpu_ticks() { echo "$(awk '{print $14, $15}' "/proc/$server/stat") $(awk '/^cpu /{print $9}' /proc/stat)"; }

cpu_report() { # $1, $2: cpu_ticks before and after a wrk run; $3: its output
  python3 - "$1" "$2" "$3" "$(getconf CLK_TCK)" "$(nproc)" <<'PY'
import re, sys
(u0, s0, t0), (u1, s1, t1) = (map(int, t.split()) for t in sys.argv[1:3])
wrk = open(sys.argv[3]).read()
requests, seconds = re.search(r"(\d+) requests in ([\d.]+)s", wrk).groups()
requests, seconds = int(requests), float(seconds)
tick, cores = 1e6 / int(sys.argv[4]), int(sys.argv[5])
user, system = (u1 - u0) * tick / requests, (s1 - s0) * tick / requests
steal = (t1 - t0) * tick / 1e6 / (cores * seconds)
print(f"  server CPU per request: {user:.1f} us user + {system:.1f} us system; "
      f"{cores} cores would serve at most {cores * 1e6 / (user + system):,.0f}/s with nothing else running; "
      f"the hypervisor took {steal:.0%} of the machine meanwhile")
PY
}

# How fast this disk makes data durable now: durable writes can only be as fast as
# the group commits' fsyncs allow, and shared machines vary a lot.
fsync_probe() {
python3 - "$work" <<'PY'
import os, sys, time
path = os.path.join(sys.argv[1], "fsync-probe")
fd = os.open(path, os.O_WRONLY | os.O_CREAT)
times = []
for _ in range(200):
    os.write(fd, b"x" * 4096)
    start = time.perf_counter()
    os.fsync(fd)
    times.append(time.perf_counter() - start)
os.close(fd)
os.unlink(path)
times.sort()
print(f"fsync of 4 KiB on this disk: p50 {times[100] * 1e3:.2f} ms, p99 {times[198] * 1e3:.2f} ms")
PY
}

# Starts the benchmark PostgreSQL server (fsync on) if needed and sets $location to a
# fresh schema in it.
start_postgres() {
  export DIR=/tmp/drover-pg-bench PGPORT=54330 FSYNC=on
  scripts/services/postgres.sh install start >/dev/null
  PG_STARTED=1
  location="$(scripts/services/postgres.sh url)?schema=bench$RANDOM"
}
