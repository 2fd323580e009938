#!/usr/bin/env bash
# A private single-host Slurm for tests (no systemd): munged, slurmctld, and $NODES slurmd
# "nodes" (node1..N, all on 127.0.0.1, each slurmd on its own port, each claiming $CPUS
# processors and $MEMORY MB whatever the hardware), and an accounting database: slurmdbd
# on a private MariaDB (127.0.0.1:$DB_PORT, data in $DB_DIR), so that `sacct` knows every
# job after slurmctld forgets it. Adapted from ../shared/services/slurm.sh.
#
# Usage (as root):  scripts/services/slurm.sh [install|start|stop|status|nodes|conf]...
#                   (default: install start)
#   install  apt-get install munge, slurmctld, slurmd, the clients, slurmdbd and
#            mariadb-server if missing
#   start    write /etc/slurm/slurm.conf (and slurmdbd.conf), start the daemons (stopping
#            ours first) and wait until every node is idle; Slurm's saved state (jobs) and
#            the accounting database are kept across restarts
#   stop     stop those daemons (by the PIDs in $RUN, checking each PID's program)
#   status   exit 0 when slurmctld answers and every node is up; print sinfo
#   nodes    print the node names, one a line
#   conf     print the path of slurm.conf (the clients' SLURM_CONF)
# Env: NODES (3), CPUS (4), MEMORY (2000), CTLD_PORT (6817), SLURMD_BASE_PORT (17001),
#      RUN (/tmp/drover-slurm: PID files and daemon logs), ACCOUNTING (1; 0: no slurmdbd,
#      `sacct` unavailable, as at a site without accounting), DBD_PORT (6819), DB_PORT
#      (13306), DB_DIR (/var/lib/drover-slurm-db)
#
# Slurm needs the job's user known with the same uid on every node: here the nodes are
# this host, so any local account works. Ended jobs stay visible to `squeue`/`scontrol`
# for MinJobAge (1 h), then only to `sacct` (through slurmdbd).
set -euo pipefail

NODES=${NODES:-3}
CPUS=${CPUS:-4}
MEMORY=${MEMORY:-2000}
CTLD_PORT=${CTLD_PORT:-6817}
SLURMD_BASE_PORT=${SLURMD_BASE_PORT:-17001}
RUN=${RUN:-/tmp/drover-slurm}
ACCOUNTING=${ACCOUNTING:-1}
DBD_PORT=${DBD_PORT:-6819}
DB_PORT=${DB_PORT:-13306}
DB_DIR=${DB_DIR:-/var/lib/drover-slurm-db}
CONF=/etc/slurm/slurm.conf
DBD_CONF=/etc/slurm/slurmdbd.conf
export SLURM_CONF=$CONF
export DEBIAN_FRONTEND=noninteractive

. "$(dirname "$0")/steps.sh"

# alive <pid> <comm>: running, not a zombie, and the program we started (a stale PID file
# may name a PID reused by something else)
alive() {
  local s
  s=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
  [[ $s != Z* ]] && [ "$(cat "/proc/$1/comm" 2>/dev/null)" = "$2" ]
}

wait_for() {  # wait_for <timeout_s> <command...>
  local end=$(( $(date +%s) + $1 )); shift
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$end" ] || return 1
    sleep 0.2
  done
}

do_install() {
  if [ -x /usr/sbin/slurmctld ] && [ -x /usr/sbin/slurmd ] && [ -x /usr/bin/sbatch ] \
     && [ -x /usr/sbin/munged ] && [ -x /usr/bin/socat ] && { [ "$ACCOUNTING" = 0 ] ||
       { [ -x /usr/sbin/slurmdbd ] && [ -x /usr/sbin/mariadbd ]; }; }; then
    return 0
  fi
  # socat: the relays to VM guests on the nodes (docs/vms.md)
  local packages=(munge slurmctld slurmd slurm-client socat)
  [ "$ACCOUNTING" = 0 ] || packages+=(slurmdbd mariadb-server)
  log "installing ${packages[*]}"
  apt_install --no-install-recommends "${packages[@]}"
  log "installed slurm $(dpkg-query -W -f='${Version}' slurmctld)"
}

# $RUN holds logs root writes: one another user made first (with links planted in it)
# is refused.
own_run_dir() {
  mkdir -p "$RUN"
  if [ -L "$RUN" ] || [ "$(stat -c %u "$RUN")" != 0 ] || [ $(( 0$(stat -c %a "$RUN") & 022 )) -ne 0 ]; then
    log "$RUN must be a directory of root's that no one else may write to"
    exit 1
  fi
}

write_conf() {
  own_run_dir
  mkdir -p "$RUN" /run/munge /run/slurm /var/lib/slurm/slurmctld /var/log/slurm /etc/slurm
  chown munge:munge /run/munge; chmod 0755 /run/munge
  chown slurm:slurm /run/slurm /var/lib/slurm/slurmctld /var/log/slurm
  # munge's post-install makes the key; make one if it did not.
  if [ ! -s /etc/munge/munge.key ]; then
    mungekey --create --keyfile=/etc/munge/munge.key
    chown munge:munge /etc/munge/munge.key; chmod 0400 /etc/munge/munge.key
  fi
  local last=$(( SLURMD_BASE_PORT + NODES - 1 )) n
  for n in $(seq 1 "$NODES"); do mkdir -p "/var/lib/slurm/slurmd/node$n"; done
  # Written before any client runs: without it they try DNS SRV records ("configless").
  cat > "$CONF.new" <<EOF
# Written by drover's scripts/services/slurm.sh: a single-host test cluster.
ClusterName=drover
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmUser=slurm
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd/%n
SlurmctldPidFile=/run/slurm/slurmctld.pid
SlurmdPidFile=/run/slurm/slurmd-%n.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups, no systemd: job processes tracked through /proc, no binding, no usage
# gathered; jobs recorded by slurmdbd (or not, with ACCOUNTING=0).
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
$(accounting_conf)
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
MailProg=/bin/true
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# A job that asks no memory gets 100 MB per CPU, not the whole node's memory (Slurm's
# default with CR_Core_Memory): else two such jobs Drover places on one node run one
# after the other in Slurm.
DefMemPerCPU=100
ReturnToService=2
# slurmd reports the configured (fake) processors and memory, not the hardware's.
SlurmdParameters=config_overrides
# An ended job is known to squeue for an hour; to sacct (slurmdbd) after that.
MinJobAge=3600
KillWait=5
# Room for nodes made while it runs (`scontrol create nodename=...`, dynamic nodes).
MaxNodeCount=16
NodeName=node[1-$NODES] NodeHostname=localhost NodeAddr=127.0.0.1 Port=[$SLURMD_BASE_PORT-$last] CPUs=$CPUS RealMemory=$MEMORY State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
  mv "$CONF.new" "$CONF"
}

# slurm.conf's lines for accounting: slurmdbd's, or none.
accounting_conf() {
  if [ "$ACCOUNTING" = 0 ]; then
    echo "AccountingStorageType=accounting_storage/none"
  else
    printf '%s\n' "AccountingStorageType=accounting_storage/slurmdbd" \
      "AccountingStorageHost=localhost" "AccountingStoragePort=$DBD_PORT"
  fi
}

# The database's own client, as root over its socket (root logs in by unix_socket).
db() { mariadb --no-defaults --socket="$DB_DIR/mariadb.sock" -u root "$@"; }

# Starts MariaDB (a data directory of its own, made the first time; 127.0.0.1:$DB_PORT,
# small buffers) and makes slurmdbd's database and user, whose password is made once.
start_db() {
  mkdir -p "$DB_DIR"; chown mysql:mysql "$DB_DIR"; chmod 0700 "$DB_DIR"
  if [ ! -d "$DB_DIR/data/mysql" ]; then
    mariadb-install-db --no-defaults --user=mysql --datadir="$DB_DIR/data" \
      --auth-root-authentication-method=socket --skip-test-db >"$RUN/mariadb-install.log" 2>&1 \
      || { log "mariadb-install-db failed: $(tail -5 "$RUN/mariadb-install.log")"; exit 1; }
  fi
  [ -s "$DB_DIR/slurm.pass" ] || (umask 077; head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$DB_DIR/slurm.pass")
  start_bg mariadbd mariadbd /usr/sbin/mariadbd --no-defaults --user=mysql --datadir="$DB_DIR/data" \
    --socket="$DB_DIR/mariadb.sock" --pid-file="$DB_DIR/mariadbd.pid" --bind-address=127.0.0.1 \
    --port="$DB_PORT" --innodb-buffer-pool-size=32M --innodb-log-file-size=16M \
    --innodb-flush-log-at-trx-commit=2 --skip-name-resolve
  wait_for 60 db -e 'select 1' || { log "mariadbd did not start: $(tail -20 "$RUN/mariadbd.log")"; exit 1; }
  local pass; pass=$(cat "$DB_DIR/slurm.pass")
  # On standard input, never in an argument: any local user reads a process's arguments.
  db <<SQL
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$pass';
ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$pass';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
SQL
}

# slurmdbd.conf: readable by SlurmUser only (it holds the database's password).
write_dbd_conf() {
  (umask 077; cat > "$DBD_CONF.new" <<EOF
# Written by drover's scripts/services/slurm.sh: the test cluster's accounting.
DbdHost=localhost
DbdPort=$DBD_PORT
SlurmUser=slurm
AuthType=auth/munge
PidFile=/run/slurm/slurmdbd.pid
LogFile=/var/log/slurm/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=$(cat "$DB_DIR/slurm.pass")
StorageLoc=slurm_acct_db
EOF
  )
  chown slurm:slurm "$DBD_CONF.new"; chmod 0600 "$DBD_CONF.new"
  mv "$DBD_CONF.new" "$DBD_CONF"
}

# MariaDB, then slurmdbd; the cluster registered (before slurmctld starts).
start_accounting() {
  start_db
  write_dbd_conf
  start_bg slurmdbd slurmdbd /usr/sbin/slurmdbd -D
  wait_for 60 sacctmgr -n list cluster || { log "slurmdbd did not start: $(tail -20 "$RUN/slurmdbd.log")"; exit 1; }
  if [ -z "$(sacctmgr -n -P list cluster drover format=cluster)" ]; then
    sacctmgr -i add cluster drover >/dev/null
  fi
}

start_bg() {  # start_bg <name> <comm> <command...>: in the background, its PID in $RUN
  local name=$1 comm=$2; shift 2
  if [ -f "$RUN/$name.pid" ] && alive "$(cat "$RUN/$name.pid")" "$comm"; then return 0; fi
  "$@" >"$RUN/$name.log" 2>&1 </dev/null &
  echo $! >"$RUN/$name.pid"
}

nodes_idle() { [ "$(sinfo -h -t idle -o %D 2>/dev/null)" = "$NODES" ]; }

do_start() {
  do_stop
  write_conf
  # munged runs as munge, the key's owner; setpriv execs, so $! is munged itself.
  start_bg munged munged setpriv --reuid=munge --regid=munge --init-groups /usr/sbin/munged -F
  wait_for 10 test -S /run/munge/munge.socket.2 || { log "munged did not start: $(cat "$RUN/munged.log")"; exit 1; }
  [ "$ACCOUNTING" = 0 ] || start_accounting
  # -D: in the foreground (we keep its PID). No -c: jobs saved before a stop are recovered.
  start_bg slurmctld slurmctld /usr/sbin/slurmctld -D
  wait_for 30 scontrol ping || { log "slurmctld did not start: $(tail -20 "$RUN/slurmctld.log")"; exit 1; }
  local n
  for n in $(seq 1 "$NODES"); do
    start_bg "slurmd-node$n" slurmd /usr/sbin/slurmd -D -N "node$n"
  done
  wait_for 60 nodes_idle || { log "nodes not idle: $(sinfo 2>&1)"; exit 1; }
  local dbd="no accounting"
  [ "$ACCOUNTING" = 0 ] || dbd="slurmdbd on :$DBD_PORT, MariaDB on 127.0.0.1:$DB_PORT"
  log "slurm up: slurmctld on 127.0.0.1:$CTLD_PORT, $NODES nodes of $CPUS CPUs, $dbd"
}

do_stop() {
  local name pid comm i
  [ -d "$RUN" ] || return 0
  for name in $(for n in $(seq "$NODES" -1 1); do echo "slurmd-node$n"; done) slurmctld slurmdbd mariadbd munged; do
    [ -f "$RUN/$name.pid" ] || continue
    pid=$(cat "$RUN/$name.pid"); comm=${name%%-*}
    if alive "$pid" "$comm"; then
      kill "$pid"
      for i in $(seq 1 100); do alive "$pid" "$comm" || break; sleep 0.1; done
      alive "$pid" "$comm" && kill -9 "$pid"
      log "stopped $comm (pid $pid)"
    fi
    rm -f "$RUN/$name.pid"
  done
}

do_status() {
  scontrol ping >/dev/null 2>&1 || { log "slurmctld is not answering"; return 1; }
  sinfo
  # up: every node idle, allocated or mixed (none down, drained or not responding)
  [ "$(sinfo -h -N -t idle,alloc,mix,comp -o %N | sort -u | wc -l)" = "$NODES" ]
}

do_nodes() { seq 1 "$NODES" | sed 's/^/node/'; }
do_conf() { echo "$CONF"; }

run_steps "$@"
