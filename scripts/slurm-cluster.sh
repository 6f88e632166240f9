#!/usr/bin/env bash
# Single-node SLURM cluster on this machine (Debian 12 packages, no systemd needed):
# slurmctld + slurmd, with accounting through slurmdbd + a local MariaDB so `sacct` works.
#
# Usage: bash scripts/slurm-cluster.sh up|down|status
#   up      install missing packages, write /etc/slurm/{slurm,slurmdbd}.conf, start
#           mariadb, munged, slurmdbd, slurmctld, slurmd; wait until the node is idle.
#           Safe to re-run: daemons already running with an unchanged config are left alone.
#   down    stop slurmd, slurmctld, slurmdbd, munged, mariadb (quiet if not running).
#   status  print sinfo / squeue / sacct health; exit 0 iff the node is usable.
#
# Environment overrides (optional):
#   SLURM_CLUSTER_NAME (default: local)   SLURM_PARTITION_NAME (default: debug)
#   SLURM_CPUS (default: nproc)           SLURM_MEM_MARGIN_MB (default: max(512, 10% of RAM))
#   SLURM_CRED_EXPIRE (default: 10; seconds a requeued job waits before it may start again)
#   SLURM_UP_TIMEOUT (default: 60; seconds to wait for the node to become idle)
set -euo pipefail

CLUSTER=${SLURM_CLUSTER_NAME:-local}
PARTITION=${SLURM_PARTITION_NAME:-debug}
# A second partition on the same node whose jobs preempt the default one's (PreemptMode=CANCEL):
# the tests use it to preempt a run the way a cluster's priority partitions do.
URGENT_PARTITION=${SLURM_URGENT_PARTITION_NAME:-urgent}
NODE=$(hostname -s)
CONF_DIR=/etc/slurm
SLURM_CONF=$CONF_DIR/slurm.conf
DBD_CONF=$CONF_DIR/slurmdbd.conf
LOG_DIR=/var/log/slurm
RUN_DIR=/run/slurm
CTLD_SPOOL=/var/spool/slurmctld
SLURMD_SPOOL=/var/spool/slurmd
DB_NAME=slurm_acct_db
DB_USER=slurm
UP_TIMEOUT=${SLURM_UP_TIMEOUT:-60}
PACKAGES=(slurmctld slurmd slurm-client slurmdbd munge mariadb-server)

log() { printf '[slurm-cluster] %s\n' "$*"; }
die() { printf '[slurm-cluster] ERROR: %s\n' "$*" >&2; exit 1; }

need_root() { [ "$(id -u)" -eq 0 ] || die "must run as root"; }

# pid of a daemon from its pid file, if that process is alive
pid_from_file() {
  local f=$1 pid
  [ -s "$f" ] || return 1
  pid=$(tr -dc '0-9' <"$f")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

is_running() { pgrep -x "$1" >/dev/null 2>&1; }

# ---------------------------------------------------------------- install
install_packages() {
  local missing=() p
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing: ${missing[*]}"
  local t0=$SECONDS apt=(apt-get install -y -q --no-install-recommends "${missing[@]}")
  if ! DEBIAN_FRONTEND=noninteractive "${apt[@]}" >/tmp/slurm-cluster-apt.log 2>&1; then
    log "install failed; running apt-get update and retrying"
    DEBIAN_FRONTEND=noninteractive apt-get update -q >>/tmp/slurm-cluster-apt.log 2>&1 || true
    DEBIAN_FRONTEND=noninteractive "${apt[@]}" >>/tmp/slurm-cluster-apt.log 2>&1 \
      || { tail -n 30 /tmp/slurm-cluster-apt.log >&2; die "apt-get install failed (log: /tmp/slurm-cluster-apt.log)"; }
  fi
  log "packages installed in $((SECONDS - t0)) s"
}

# ---------------------------------------------------------------- config
make_dirs() {
  install -d -o slurm -g slurm -m 0755 "$CTLD_SPOOL" "$LOG_DIR" "$RUN_DIR"
  install -d -o root -g root -m 0755 "$SLURMD_SPOOL" "$CONF_DIR"
  install -d -o munge -g munge -m 0755 /run/munge
  install -d -o munge -g munge -m 0700 /var/log/munge /var/lib/munge /etc/munge
  install -d -o mysql -g mysql -m 0755 /run/mysqld
}

node_resources() {
  CPUS=${SLURM_CPUS:-$(nproc)}
  local total_mb margin
  total_mb=$(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo)
  margin=${SLURM_MEM_MARGIN_MB:-$(( total_mb / 10 > 512 ? total_mb / 10 : 512 ))}
  REAL_MEM=$(( total_mb - margin ))
  [ "$REAL_MEM" -gt 256 ] || REAL_MEM=$(( total_mb > 512 ? total_mb - 256 : total_mb ))
  # Jobs without --mem get an even per-CPU share instead of the whole node,
  # so several small jobs can run side by side.
  DEF_MEM_PER_CPU=$(( REAL_MEM / CPUS ))
}

render_slurm_conf() {
  cat <<EOF
# Written by scripts/slurm-cluster.sh -- single-node cluster. Re-run "up" to regenerate.
ClusterName=$CLUSTER
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=slurm
SlurmdUser=root
SlurmctldPort=6817
SlurmdPort=6818
AuthType=auth/munge
CryptoType=crypto/munge
# Step credential lifetime; also how long a requeued job waits before it may start again (default 120).
AuthInfo=cred_expire=${SLURM_CRED_EXPIRE:-10}
MpiDefault=none
MailProg=/bin/true

StateSaveLocation=$CTLD_SPOOL
SlurmdSpoolDir=$SLURMD_SPOOL
SlurmctldPidFile=$RUN_DIR/slurmctld.pid
SlurmdPidFile=$RUN_DIR/slurmd.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info

# No cgroups: plain process tracking, no task confinement.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30

SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
DefMemPerCPU=$DEF_MEM_PER_CPU
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,sched_min_interval=100000,bf_interval=2,bf_continue,default_queue_depth=1000
PreemptType=preempt/partition_prio
PreemptMode=CANCEL
JobCompType=jobcomp/none

MaxJobCount=20000
MaxArraySize=10001
MinJobAge=300
JobRequeue=1
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=60
InactiveLimit=0
KillWait=5
OverTimeLimit=1
MessageTimeout=20

AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=6819

NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$REAL_MEM State=UNKNOWN
PartitionName=$PARTITION Nodes=$NODE Default=YES MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=CANCEL GraceTime=0
PartitionName=$URGENT_PARTITION Nodes=$NODE Default=NO MaxTime=INFINITE State=UP PriorityTier=2 PreemptMode=OFF
EOF
}

render_dbd_conf() {
  cat <<EOF
# Written by scripts/slurm-cluster.sh
AuthType=auth/munge
DbdHost=$NODE
DbdAddr=127.0.0.1
DbdPort=6819
SlurmUser=slurm
DebugLevel=info
LogFile=$LOG_DIR/slurmdbd.log
PidFile=$RUN_DIR/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=$DB_USER
StoragePass=$DB_PASS
StorageLoc=$DB_NAME
EOF
}

# write $2 (content) to $1 if different; returns 0 if the file changed
write_if_changed() {
  local path=$1 content=$2 mode=$3 owner=$4
  if [ -f "$path" ] && [ "$(cat "$path")" = "$content" ]; then
    chmod "$mode" "$path"; chown "$owner" "$path"
    return 1
  fi
  local tmp
  tmp=$(mktemp "$path.XXXXXX")
  printf '%s\n' "$content" >"$tmp"
  chmod "$mode" "$tmp"; chown "$owner" "$tmp"
  mv -f "$tmp" "$path"
  return 0
}

# ---------------------------------------------------------------- daemons
start_mariadb() {
  if mysqladmin ping --silent >/dev/null 2>&1; then return 0; fi
  log "starting mariadb"
  if [ ! -d /var/lib/mysql/mysql ]; then
    mariadb-install-db --user=mysql --datadir=/var/lib/mysql >/tmp/slurm-cluster-mariadb-init.log 2>&1 \
      || die "mariadb-install-db failed (log: /tmp/slurm-cluster-mariadb-init.log)"
  fi
  setsid -f mysqld_safe --user=mysql --innodb-lock-wait-timeout=900 </dev/null >/dev/null 2>&1
  local i
  for i in $(seq 1 60); do
    mysqladmin ping --silent >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  tail -n 30 /var/log/mysql/error.log 2>/dev/null >&2 || true
  die "mariadb did not come up within 30 s"
}

setup_database() {
  # root connects through the unix socket (Debian's default auth for root@localhost)
  mysql -uroot <<EOF || die "could not create the accounting database/user in mariadb"
CREATE DATABASE IF NOT EXISTS $DB_NAME;
CREATE USER IF NOT EXISTS '$DB_USER'@'localhost' IDENTIFIED BY '$DB_PASS';
ALTER USER '$DB_USER'@'localhost' IDENTIFIED BY '$DB_PASS';
GRANT ALL PRIVILEGES ON $DB_NAME.* TO '$DB_USER'@'localhost';
FLUSH PRIVILEGES;
EOF
}

munge_ok() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

start_munge() {
  if [ ! -s /etc/munge/munge.key ]; then
    log "creating munge key"
    runuser -u munge -- mungekey --create --keyfile=/etc/munge/munge.key
  fi
  chown munge:munge /etc/munge/munge.key; chmod 0400 /etc/munge/munge.key
  if is_running munged && munge_ok; then return 0; fi
  log "starting munged"
  is_running munged && stop_daemon munged /run/munge/munged.pid
  rm -f /run/munge/munge.socket.2 /run/munge/munge.socket.2.lock
  # munged refuses to run as root when its dirs belong to munge: run it as munge.
  runuser -u munge -- /usr/sbin/munged </dev/null >/dev/null 2>&1 \
    || { tail -n 20 /var/log/munge/munged.log >&2 2>/dev/null || true; die "munged failed to start"; }
  local i
  for i in $(seq 1 20); do munge_ok && return 0; sleep 0.25; done
  die "munged started but munge/unmunge does not work"
}

# stop_daemon NAME PIDFILE: TERM via pid file (then exact-name fallback), KILL after 10 s
stop_daemon() {
  local name=$1 pidfile=$2 pids i
  pids=$(pid_from_file "$pidfile" || true)
  [ -n "$pids" ] || pids=$(pgrep -x "$name" || true)
  [ -n "$pids" ] || return 0
  log "stopping $name"
  # shellcheck disable=SC2086
  kill $pids 2>/dev/null || true
  for i in $(seq 1 40); do
    # shellcheck disable=SC2086
    kill -0 $pids 2>/dev/null || { rm -f "$pidfile"; return 0; }
    sleep 0.25
  done
  # shellcheck disable=SC2086
  kill -9 $pids 2>/dev/null || true
  rm -f "$pidfile"
}

dbd_ok() { sacctmgr -n -P show cluster format=cluster >/dev/null 2>&1; }

start_slurmdbd() {
  local restart=$1
  if is_running slurmdbd && [ "$restart" = 1 ]; then stop_daemon slurmdbd "$RUN_DIR/slurmdbd.pid"; fi
  if ! is_running slurmdbd; then
    log "starting slurmdbd"
    /usr/sbin/slurmdbd </dev/null >/dev/null 2>&1 || { show_logs; die "slurmdbd failed to start"; }
  fi
  local i
  for i in $(seq 1 60); do dbd_ok && return 0; sleep 0.5; done
  show_logs; die "slurmdbd is not answering (sacctmgr show cluster failed for 30 s)"
}

register_cluster() {
  if ! sacctmgr -n -P show cluster format=cluster | grep -qx "$CLUSTER"; then
    log "registering cluster '$CLUSTER' in accounting"
    sacctmgr -i add cluster "$CLUSTER" >/dev/null
  fi
  # Accounting is not enforced, but give root an association on this cluster anyway.
  if ! sacctmgr -n -P show assoc cluster="$CLUSTER" user=root format=user | grep -qx root; then
    sacctmgr -i add account root cluster="$CLUSTER" >/dev/null 2>&1 || true
    sacctmgr -i add user root account=root cluster="$CLUSTER" >/dev/null 2>&1 || true
  fi
}

start_slurmctld() {
  local restart=$1
  # slurmctld refuses to start on state saved by a differently named cluster
  if [ -f "$CTLD_SPOOL/clustername" ] && [ "$(cat "$CTLD_SPOOL/clustername")" != "$CLUSTER" ]; then
    log "state in $CTLD_SPOOL belongs to another cluster name; moving it aside"
    stop_daemon slurmctld "$RUN_DIR/slurmctld.pid"
    mv "$CTLD_SPOOL" "$CTLD_SPOOL.old.$(date +%s)"
    install -d -o slurm -g slurm -m 0755 "$CTLD_SPOOL"
  fi
  if is_running slurmctld && [ "$restart" = 1 ]; then stop_daemon slurmctld "$RUN_DIR/slurmctld.pid"; fi
  if ! is_running slurmctld; then
    log "starting slurmctld"
    /usr/sbin/slurmctld </dev/null >/dev/null 2>&1 || { show_logs; die "slurmctld failed to start"; }
  fi
}

start_slurmd() {
  local restart=$1
  if is_running slurmd && [ "$restart" = 1 ]; then stop_daemon slurmd "$RUN_DIR/slurmd.pid"; fi
  if ! is_running slurmd; then
    log "starting slurmd"
    /usr/sbin/slurmd </dev/null >/dev/null 2>&1 || { show_logs; die "slurmd failed to start"; }
  fi
}

node_state() { sinfo -h -N -n "$NODE" -o '%T' 2>/dev/null | head -n1; }

wait_node_idle() {
  local deadline=$((SECONDS + UP_TIMEOUT)) state="" resumed=0
  while [ $SECONDS -lt $deadline ]; do
    state=$(node_state || true)
    case "$state" in
      idle|mixed|allocated|completing) log "node $NODE is $state"; return 0 ;;
      down*|drain*|drained*|fail*)
        if [ $resumed -eq 0 ]; then
          log "node $NODE is $state; resuming it"
          scontrol update nodename="$NODE" state=resume >/dev/null 2>&1 || true
          resumed=1
        fi ;;
    esac
    sleep 1
  done
  log "node $NODE did not become idle within ${UP_TIMEOUT} s (state: '${state:-unknown}')"
  scontrol show node "$NODE" 2>/dev/null | grep -E 'State=|Reason=' >&2 || true
  show_logs
  return 1
}

show_logs() {
  local f
  for f in "$LOG_DIR/slurmctld.log" "$LOG_DIR/slurmd.log" "$LOG_DIR/slurmdbd.log" /var/log/munge/munged.log; do
    [ -f "$f" ] || continue
    printf '\n----- tail %s -----\n' "$f" >&2
    tail -n 25 "$f" >&2 || true
  done
}

# ---------------------------------------------------------------- commands
cmd_up() {
  need_root
  local t0=$SECONDS
  install_packages
  make_dirs
  node_resources

  # keep the DB password stable across runs
  DB_PASS=$(sed -n 's/^StoragePass=//p' "$DBD_CONF" 2>/dev/null | head -n1 || true)
  [ -n "$DB_PASS" ] || DB_PASS=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')

  local slurm_changed=0 dbd_changed=0
  write_if_changed "$SLURM_CONF" "$(render_slurm_conf)" 0644 root:root && slurm_changed=1
  write_if_changed "$DBD_CONF" "$(render_dbd_conf)" 0600 slurm:slurm && dbd_changed=1
  [ $slurm_changed -eq 1 ] && log "wrote $SLURM_CONF (node $NODE: CPUs=$CPUS RealMemory=${REAL_MEM}M, partition $PARTITION)"
  [ $dbd_changed -eq 1 ] && log "wrote $DBD_CONF"

  start_mariadb
  setup_database
  start_munge
  start_slurmdbd $dbd_changed
  register_cluster
  start_slurmctld $slurm_changed
  start_slurmd $slurm_changed
  wait_node_idle || die "cluster did not come up"
  log "cluster '$CLUSTER' is up in $((SECONDS - t0)) s (partition '$PARTITION', node $NODE)"
}

cmd_down() {
  need_root
  stop_daemon slurmd "$RUN_DIR/slurmd.pid"
  stop_daemon slurmctld "$RUN_DIR/slurmctld.pid"
  stop_daemon slurmdbd "$RUN_DIR/slurmdbd.pid"
  stop_daemon munged /run/munge/munged.pid
  if mysqladmin ping --silent >/dev/null 2>&1; then
    log "stopping mariadb"
    mysqladmin shutdown >/dev/null 2>&1 || true
    local i
    for i in $(seq 1 20); do is_running mysqld_safe || break; sleep 0.25; done
  fi
  stop_daemon mysqld_safe /nonexistent
  stop_daemon mariadbd /run/mysqld/mysqld.pid
  stop_daemon mysqld /run/mysqld/mysqld.pid
  log "down"
}

cmd_status() {
  local rc=0 state d
  for d in mysqld_safe mariadbd munged slurmdbd slurmctld slurmd; do
    if is_running "$d"; then printf '%-12s running\n' "$d"; else printf '%-12s not running\n' "$d"; fi
  done
  command -v sinfo >/dev/null 2>&1 || { echo "slurm is not installed"; return 1; }
  echo "--- sinfo"; sinfo 2>&1 || rc=1
  echo "--- squeue"; squeue 2>&1 || rc=1
  echo "--- sacct"
  if sacct -n -X -a -S now-1hours -o jobid >/dev/null 2>&1; then echo "sacct works"; else echo "sacct does NOT work"; fi
  state=$(node_state || true)
  case "$state" in
    idle|mixed|allocated|completing) echo "node $NODE: $state (up)" ;;
    *) echo "node $NODE: ${state:-unknown} (not usable)"; rc=1 ;;
  esac
  return $rc
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
