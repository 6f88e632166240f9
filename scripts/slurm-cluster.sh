#!/usr/bin/env bash
# SLURM cluster on this machine (Debian 12 packages, no systemd needed): slurmctld + slurmd,
# with accounting through slurmdbd + a local MariaDB so `sacct` works. One node by default;
# with --nodes N, N nodes, each a slurmd in its own network and UTS namespace.
#
# Usage: bash scripts/slurm-cluster.sh up [--nodes N]|down|status
#   up      install missing packages, write /etc/slurm/{slurm,slurmdbd}.conf, start
#           mariadb, munged, slurmdbd, slurmctld, slurmd; wait until the node is idle.
#           Safe to re-run: daemons already running with an unchanged config are left alone.
#   up --nodes N   (N >= 2) the same with N nodes node1..nodeN, each a `slurmd -N nodeI` in
#           the network namespace slurm-nodeI (ip netns) with its own hostname (a UTS namespace,
#           so gethostname() there is nodeI, as on a real node) and its own address 10.213.0.(10+I)
#           on a veth pair whose other end is on the bridge slurmbr0 (10.213.0.1, where
#           slurmctld listens, in the root namespace). /etc/hosts gets "10.213.0.(10+I) nodeI"
#           lines (tagged, removed by down) so node names resolve everywhere (MASTER_ADDR,
#           gloo). Munge is shared: munged's socket is on the filesystem every namespace sees.
#           Per node: /var/spool/slurmd-nodeI, /var/log/slurm/slurmd-nodeI.log,
#           /run/slurm/slurmd-nodeI.pid. Every node claims all of this machine's CPUs (nproc)
#           and memory: nodes share the real cores, a job on one node sees the whole machine.
#           Partitions: the default one (debug) and urgent hold node1 only, as on the one-node
#           cluster (a job in urgent preempts a job in debug on the same node); multi holds
#           every node, for runs with executor.nodes > 1 (executor.partition: multi).
#           Switching between one node and N nodes restarts slurmctld and the slurmds.
#   down    stop every slurmd (and whatever still runs in the node namespaces), slurmctld,
#           slurmdbd, munged, mariadb; remove the namespaces, veths, bridge and /etc/hosts lines
#           (quiet if not there).
#   status  print sinfo / squeue / sacct health; exit 0 iff every node is usable.
#
# Environment overrides (optional):
#   SLURM_CLUSTER_NAME (default: local)   SLURM_PARTITION_NAME (default: debug)
#   SLURM_CPUS (default: nproc)           SLURM_MEM_MARGIN_MB (default: max(512, 10% of RAM))
#   SLURM_CRED_EXPIRE (default: 10; seconds a requeued job waits before it may start again)
#   SLURM_UP_TIMEOUT (default: 60; seconds to wait for the node to become idle)
#   SLURM_NET_PREFIX (default: 10.213.0; the /24 of the node namespaces)
#   SLURM_MULTI_PARTITION_NAME (default: multi)
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
# Multi-node layout (up --nodes N with N >= 2)
NODES=1
NET_PREFIX=${SLURM_NET_PREFIX:-10.213.0}
CTLD_ADDR=$NET_PREFIX.1
BRIDGE=slurmbr0
MULTI_PARTITION=${SLURM_MULTI_PARTITION_NAME:-multi}
HOSTS_TAG="# added by scripts/slurm-cluster.sh"

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

# What differs between the one-node cluster and N nodes in namespaces: the controller's address,
# the slurmd paths (per node: %n is the node's name), the nodes and partitions.
cluster_layout() {
  if [ "$NODES" -eq 1 ]; then
    KIND='single-node cluster. Re-run "up"'
    CTLD_HOST_ADDR=127.0.0.1
    SLURMD_SPOOL_CONF=$SLURMD_SPOOL
    SLURMD_PID_CONF=$RUN_DIR/slurmd.pid
    SLURMD_LOG_CONF=$LOG_DIR/slurmd.log
  else
    KIND="$NODES-node cluster (network namespaces). Re-run \"up --nodes $NODES\""
    CTLD_HOST_ADDR=$CTLD_ADDR
    SLURMD_SPOOL_CONF=$SLURMD_SPOOL-%n
    SLURMD_PID_CONF=$RUN_DIR/slurmd-%n.pid
    SLURMD_LOG_CONF=$LOG_DIR/slurmd-%n.log
  fi
}

node_name() { echo "node$1"; }                  # node I (1-based)
node_addr() { echo "$NET_PREFIX.$((10 + $1))"; }
node_netns() { echo "slurm-$1"; }                # of a node name
node_veth() { echo "vsl-$1"; }                   # the root namespace's end of its veth pair
node_names() { local i; for i in $(seq 1 "$NODES"); do node_name "$i"; done; }

render_nodes() {
  if [ "$NODES" -eq 1 ]; then
    cat <<EOF
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$REAL_MEM State=UNKNOWN
PartitionName=$PARTITION Nodes=$NODE Default=YES MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=CANCEL GraceTime=0
PartitionName=$URGENT_PARTITION Nodes=$NODE Default=NO MaxTime=INFINITE State=UP PriorityTier=2 PreemptMode=OFF
EOF
    return
  fi
  local i all first
  first=$(node_name 1)
  all=$(node_names | paste -sd, -)
  for i in $(seq 1 "$NODES"); do
    echo "NodeName=$(node_name "$i") NodeAddr=$(node_addr "$i") CPUs=$CPUS RealMemory=$REAL_MEM State=UNKNOWN"
  done
  # debug and urgent on the first node alone: a job in urgent finds the debug job it preempts there
  # (were they on every node, it would start on an idle one instead)
  cat <<EOF
PartitionName=$PARTITION Nodes=$first Default=YES MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=CANCEL GraceTime=0
PartitionName=$URGENT_PARTITION Nodes=$first Default=NO MaxTime=INFINITE State=UP PriorityTier=2 PreemptMode=OFF
PartitionName=$MULTI_PARTITION Nodes=$all Default=NO MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=CANCEL GraceTime=0
EOF
}

render_slurm_conf() {
  cat <<EOF
# Written by scripts/slurm-cluster.sh -- $KIND to regenerate.
ClusterName=$CLUSTER
SlurmctldHost=$NODE($CTLD_HOST_ADDR)
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
SlurmdSpoolDir=$SLURMD_SPOOL_CONF
SlurmctldPidFile=$RUN_DIR/slurmctld.pid
SlurmdPidFile=$SLURMD_PID_CONF
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$SLURMD_LOG_CONF
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
OverTimeLimit=0
MessageTimeout=20

AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=6819

$(render_nodes)
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

# ---------------------------------------------------------------- nodes in namespaces
hosts_without_ours() { grep -vF "$HOSTS_TAG" /etc/hosts || true; }

# write_hosts CONTENT: /etc/hosts, if it changes; renamed into place (atomic), but rewritten in
# place when it is a mount point (a container's bind mount cannot be renamed over)
write_hosts() {
  [ "$(cat /etc/hosts)" = "$1" ] && return 0
  local tmp=/etc/.hosts.slurm-cluster.$$
  printf '%s\n' "$1" >"$tmp"
  chmod 0644 "$tmp"
  if mountpoint -q /etc/hosts 2>/dev/null; then cat "$tmp" >/etc/hosts; rm -f "$tmp"; else mv -f "$tmp" /etc/hosts; fi
}

net_up() {
  if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip link add "$BRIDGE" type bridge || die "could not create bridge $BRIDGE (ip link add ... type bridge)"
  fi
  ip addr replace "$CTLD_ADDR/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  local i node ns veth hosts
  hosts=$(hosts_without_ours)
  for i in $(seq 1 "$NODES"); do
    node=$(node_name "$i"); ns=$(node_netns "$node"); veth=$(node_veth "$node")
    [ -e "/run/netns/$ns" ] || ip netns add "$ns" || die "could not create network namespace $ns (ip netns add)"
    if ! ip link show "$veth" >/dev/null 2>&1; then
      ip link add "$veth" type veth peer name eth0 netns "$ns" || die "could not create veth $veth"
    fi
    ip link set "$veth" master "$BRIDGE"
    ip link set "$veth" up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr replace "$(node_addr "$i")/24" dev eth0
    ip -n "$ns" link set eth0 up
    hosts+=$'\n'"$(node_addr "$i") $node $HOSTS_TAG"
  done
  write_hosts "$hosts"
}

# every node namespace there is (also those of an earlier, larger --nodes)
our_namespaces() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^slurm-node[0-9]+$' || true; }

net_down() {
  local ns veth
  for ns in $(our_namespaces); do
    veth=$(node_veth "${ns#slurm-}")
    ip link del "$veth" 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  ip link del "$BRIDGE" 2>/dev/null || true
  if grep -qF "$HOSTS_TAG" /etc/hosts 2>/dev/null; then write_hosts "$(hosts_without_ours)"; fi
}

# pids of the slurmd daemons in a node namespace (from `ip netns pids`; not their children)
netns_slurmd_pids() {
  local pid
  for pid in $(ip netns pids "$1" 2>/dev/null); do
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = slurmd ] && echo "$pid"
  done
  return 0
}

# kill PIDS... : TERM, KILL after 10 s
kill_pids() {
  [ $# -gt 0 ] || return 0
  kill "$@" 2>/dev/null || true
  local i
  for i in $(seq 1 40); do
    kill -0 "$@" 2>/dev/null || return 0
    sleep 0.25
  done
  kill -9 "$@" 2>/dev/null || true
}

stop_node_slurmd() {
  local node=$1 pids
  pids=$(pid_from_file "$RUN_DIR/slurmd-$node.pid" || true)
  [ -n "$pids" ] || pids=$(netns_slurmd_pids "$(node_netns "$node")")
  [ -n "$pids" ] || return 0
  log "stopping slurmd of $node"
  # shellcheck disable=SC2086
  kill_pids $pids
  rm -f "$RUN_DIR/slurmd-$node.pid"
}

# every process left in the node namespaces (job steps of a node that is going away), then slurmd
stop_nodes() {
  local ns pids
  for ns in $(our_namespaces); do
    stop_node_slurmd "${ns#slurm-}"
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    # shellcheck disable=SC2086
    [ -z "$pids" ] || { log "stopping what still runs in $ns"; kill_pids $pids; }
  done
}

# slurmd -N NODE in the node's network namespace, with a UTS namespace whose hostname is NODE
start_node_slurmd() {
  local node=$1 restart=$2 ns
  ns=$(node_netns "$node")
  if [ "$restart" = 1 ]; then stop_node_slurmd "$node"; fi
  pid_from_file "$RUN_DIR/slurmd-$node.pid" >/dev/null && return 0
  [ -z "$(netns_slurmd_pids "$ns")" ] || stop_node_slurmd "$node"  # one without its pid file
  log "starting slurmd of $node (namespace $ns, $(getent hosts "$node" | awk '{print $1}'))"
  install -d -o root -g root -m 0755 "$SLURMD_SPOOL-$node"
  nsenter --net="/run/netns/$ns" -- unshare --uts -- \
    sh -c 'hostname "$1" && exec /usr/sbin/slurmd -N "$1"' sh "$node" </dev/null >/dev/null 2>&1 \
    || { show_logs; die "slurmd of $node failed to start"; }
}

node_state() { sinfo -h -N -n "${1:-$NODE}" -o '%T' 2>/dev/null | head -n1; }

# the nodes slurm.conf declares (status and down need no --nodes)
conf_nodes() { sed -n 's/^NodeName=\([^ ]*\).*/\1/p' "$SLURM_CONF" 2>/dev/null; }

wait_node_idle() {
  local node=${1:-$NODE} deadline=$((SECONDS + UP_TIMEOUT)) state="" resumed=0
  while [ $SECONDS -lt $deadline ]; do
    state=$(node_state "$node" || true)
    case "$state" in
      idle|mixed|allocated|completing) log "node $node is $state"; return 0 ;;
      down*|drain*|drained*|fail*)
        if [ $resumed -eq 0 ]; then
          log "node $node is $state; resuming it"
          scontrol update nodename="$node" state=resume >/dev/null 2>&1 || true
          resumed=1
        fi ;;
    esac
    sleep 1
  done
  log "node $node did not become idle within ${UP_TIMEOUT} s (state: '${state:-unknown}')"
  scontrol show node "$node" 2>/dev/null | grep -E 'State=|Reason=' >&2 || true
  show_logs
  return 1
}

show_logs() {
  local f
  for f in "$LOG_DIR/slurmctld.log" "$LOG_DIR"/slurmd*.log "$LOG_DIR/slurmdbd.log" /var/log/munge/munged.log; do
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
  cluster_layout

  # keep the DB password stable across runs
  DB_PASS=$(sed -n 's/^StoragePass=//p' "$DBD_CONF" 2>/dev/null | head -n1 || true)
  [ -n "$DB_PASS" ] || DB_PASS=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')

  local slurm_changed=0 dbd_changed=0
  write_if_changed "$SLURM_CONF" "$(render_slurm_conf)" 0644 root:root && slurm_changed=1
  write_if_changed "$DBD_CONF" "$(render_dbd_conf)" 0600 slurm:slurm && dbd_changed=1
  if [ $slurm_changed -eq 1 ] && [ "$NODES" -eq 1 ]; then
    log "wrote $SLURM_CONF (node $NODE: CPUs=$CPUS RealMemory=${REAL_MEM}M, partition $PARTITION)"
  elif [ $slurm_changed -eq 1 ]; then
    log "wrote $SLURM_CONF (nodes $(node_names | paste -sd' ' -): CPUs=$CPUS RealMemory=${REAL_MEM}M each; partitions $PARTITION, $URGENT_PARTITION on $(node_name 1), $MULTI_PARTITION on all)"
  fi
  [ $dbd_changed -eq 1 ] && log "wrote $DBD_CONF"

  start_mariadb
  setup_database
  start_munge
  start_slurmdbd $dbd_changed
  register_cluster
  if [ "$NODES" -eq 1 ]; then
    stop_nodes; net_down  # what an earlier `up --nodes N` left
    start_slurmctld $slurm_changed
    start_slurmd $slurm_changed
    wait_node_idle || die "cluster did not come up"
    log "cluster '$CLUSTER' is up in $((SECONDS - t0)) s (partition '$PARTITION', node $NODE)"
    return
  fi
  up_nodes $slurm_changed
  log "cluster '$CLUSTER' is up in $((SECONDS - t0)) s ($NODES nodes $(node_names | paste -sd' ' -); partitions '$PARTITION' and '$URGENT_PARTITION' on $(node_name 1), '$MULTI_PARTITION' on all)"
}

# slurmds of a root namespace (the one-node cluster's), not those in the node namespaces
root_slurmd_pids() {
  local pid own
  own=$(readlink /proc/self/ns/net)
  for pid in $(pgrep -x slurmd || true); do
    [ "$(readlink "/proc/$pid/ns/net" 2>/dev/null)" = "$own" ] && echo "$pid"
  done
  return 0
}

# the network, slurmctld and one slurmd per node; a changed slurm.conf starts the nodes afresh
up_nodes() {
  local changed=$1 node pids
  pids=$(root_slurmd_pids)
  # shellcheck disable=SC2086
  [ -z "$pids" ] || { log "stopping the one-node cluster's slurmd"; kill_pids $pids; rm -f "$RUN_DIR/slurmd.pid"; }
  if [ "$changed" = 1 ]; then stop_nodes; net_down; fi
  net_up
  start_slurmctld "$changed"
  for node in $(node_names); do start_node_slurmd "$node" "$changed"; done
  for node in $(node_names); do wait_node_idle "$node" || die "cluster did not come up"; done
}

cmd_down() {
  need_root
  stop_nodes
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
  net_down
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
  local node nodes
  nodes=$(conf_nodes)
  for node in ${nodes:-$NODE}; do
    state=$(node_state "$node" || true)
    case "$state" in
      idle|mixed|allocated|completing) echo "node $node: $state (up)" ;;
      *) echo "node $node: ${state:-unknown} (not usable)"; rc=1 ;;
    esac
  done
  return $rc
}

usage() { echo "usage: $0 up [--nodes N]|down|status" >&2; exit 2; }

cmd=${1:-}
[ $# -gt 0 ] && shift
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes) [ $# -ge 2 ] || usage; NODES=$2; shift 2 ;;
    --nodes=*) NODES=${1#--nodes=}; shift ;;
    *) usage ;;
  esac
done
case "$NODES" in ''|*[!0-9]*) die "--nodes takes a number of nodes (1 to 200), not '$NODES'" ;; esac
[ "$NODES" -ge 1 ] && [ "$NODES" -le 200 ] || die "--nodes takes a number of nodes (1 to 200), not '$NODES'"

case "$cmd" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  *) usage ;;
esac
