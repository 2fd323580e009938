#!/usr/bin/env bash
# A private PostgreSQL for tests and benchmarks, started by hand (no systemd needed).
#
# Usage (as root):  scripts/services/postgres.sh [install|start|stop|url]...   (default: install start)
#   install  apt-get install postgresql if its server binaries are missing
#   start    initdb a fresh cluster in $DIR and start it on 127.0.0.1:$PGPORT (trust auth)
#   stop     stop that cluster (by the PID in its postmaster.pid)
#   url      print the connection URL
# Env: DIR (/tmp/drover-pg), PGPORT (54329), DB (drover), FSYNC (off; "on" for benchmarks
# that should pay for durability)
set -euo pipefail

DIR=${DIR:-/tmp/drover-pg}
PGPORT=${PGPORT:-54329}
DB=${DB:-drover}
FSYNC=${FSYNC:-off}
export DEBIAN_FRONTEND=noninteractive

. "$(dirname "$0")/steps.sh"
pgbin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1; }

do_install() {
  if [ -n "$(pgbin)" ] && [ -x "$(pgbin)/initdb" ]; then return 0; fi
  log "installing postgresql"
  # Its post-install script must not start a cluster of its own.
  apt_install postgresql
  return 0
}

do_stop() {
  local pidfile="$DIR/data/postmaster.pid" pid i
  [ -f "$pidfile" ] || return 0
  pid=$(head -1 "$pidfile")
  if kill -0 "$pid" 2>/dev/null && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = postgres ]; then
    kill -INT "$pid"
    for i in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    log "stopped postgres (pid $pid)"
  fi
}

do_start() {
  local bin; bin=$(pgbin)
  do_stop
  rm -rf "$DIR"; mkdir -p "$DIR"; chown postgres:postgres "$DIR"
  # initdb refuses to run as root.
  runuser -u postgres -- "$bin/initdb" -D "$DIR/data" -U postgres -E UTF8 --locale=C.UTF-8 \
    --auth-local=trust --auth-host=trust -N >"$DIR/initdb.log" 2>&1 || { cat "$DIR/initdb.log" >&2; exit 1; }
  local durability="-c fsync=$FSYNC"
  [ "$FSYNC" = off ] && durability="$durability -c synchronous_commit=off -c full_page_writes=off"
  runuser -u postgres -- "$bin/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w -t 60 -o \
    "-c listen_addresses=127.0.0.1 -p $PGPORT -k $DIR $durability" start >/dev/null \
    || { cat "$DIR/server.log" >&2; exit 1; }
  "$bin/psql" -h 127.0.0.1 -p "$PGPORT" -U postgres -qtA -c "CREATE DATABASE $DB" >/dev/null
  log "postgres up on 127.0.0.1:$PGPORT (fsync=$FSYNC)"
}

do_url() { echo "postgres://postgres@127.0.0.1:$PGPORT/$DB"; }

run_steps "$@"
