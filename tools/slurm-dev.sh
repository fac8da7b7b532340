#!/usr/bin/env bash
# A development Slurm cluster (slurm-wlm 22.05, Debian) for the danlu Slurm backend: one node dev0, or
# DANLU_SLURM_NODES=N nodes dev0..devN-1 (`make slurm-dev NODES=2`), each a slurmd of its own on this machine.
#
#   tools/slurm-dev.sh [start]     start munged, slurmctld and every node's slurmd (idempotent; a changed node
#                                  count restarts the cluster); prints the one line
#                                  of danlu flags on stdout: --backend slurm --slurm-conf ... --slurm-partition gpu
#   tools/slurm-dev.sh stop        stop slurmd, slurmctld, any leftover slurmstepd (and its processes); wipe the state
#                                  (logs are kept). munged is left running: it is shared and harmless.
#   tools/slurm-dev.sh status      print sinfo; exit 0 when the cluster answers, 1 otherwise
#   tools/slurm-dev.sh kill-slurmd [NODE]
#                                  kill -9 NODE's slurmd (dev0), its slurmstepds and their processes (a node that died)
#   tools/slurm-dev.sh start-slurmd [NODE]
#                                  start NODE's slurmd again and wait until it is back (resumed if it came back DOWN)
#
# Everything lives in ${DANLU_SLURM_DIR:-/var/tmp/danlu-slurm}: slurm.conf, gres.conf, spool, state, logs,
# pid files and four fake GPUs per node dev/<node>-gpu0..3 (character devices, see write_config). /etc/slurm is
# never written; clients find the config through SLURM_CONF=<dir>/slurm.conf. Each node: 16 CPUs, 16000 MB,
# gres gpu:a100:4 (more than the machine has, SlurmdParameters=config_overrides); partitions gpu (default)
# and spot over all nodes. Needs root.
# Ports: DANLU_SLURMCTLD_PORT (6817) and DANLU_SLURMD_PORT (6818, node devI listens on 6818+I).
set -euo pipefail

DIR=${DANLU_SLURM_DIR:-/var/tmp/danlu-slurm}
CTLD_PORT=${DANLU_SLURMCTLD_PORT:-6817}
SLURMD_PORT=${DANLU_SLURMD_PORT:-6818}
NODES=${DANLU_SLURM_NODES:-1}
case "$NODES" in ''|*[!0-9]*|0) echo "slurm-dev: DANLU_SLURM_NODES is a count of nodes, 1 or more" >&2; exit 2 ;; esac
NODE_LIST=$(seq -f 'dev%g' 0 $((NODES - 1)) | tr '\n' ' ')
NODE=dev0  # the node kill-slurmd and start-slurmd act on unless named
TIMEOUT=${DANLU_SLURM_TIMEOUT:-60}
export SLURM_CONF="$DIR/slurm.conf"

log() { echo "slurm-dev: $*" >&2; }
die() { log "error: $*"; exit 1; }

ensure_packages() {
  command -v slurmctld >/dev/null 2>&1 && command -v munged >/dev/null 2>&1 && return 0
  [ "$(id -u)" -eq 0 ] || die "slurm-wlm and munge are missing; install them as root: apt-get install slurm-wlm munge"
  log "installing slurm-wlm and munge (Debian packages) ..."
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq slurm-wlm munge >/dev/null 2>&1 \
    || { apt-get update -qq >/dev/null && apt-get install -y -qq slurm-wlm munge >/dev/null; } \
    || die "could not install slurm-wlm and munge"
}

munge_ok() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

ensure_munge() {
  if [ ! -s /etc/munge/munge.key ]; then
    log "creating /etc/munge/munge.key"
    install -d -o munge -g munge -m 0700 /etc/munge
    if command -v mungekey >/dev/null 2>&1; then
      mungekey --create --keyfile=/etc/munge/munge.key --force
    else
      dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
    fi
  fi
  chown munge:munge /etc/munge/munge.key
  chmod 0400 /etc/munge/munge.key
  install -d -o munge -g munge -m 0755 /run/munge
  install -d -o munge -g munge -m 0711 /var/lib/munge
  install -d -o munge -g munge -m 0700 /var/log/munge
  munge_ok && return 0
  log "starting munged"
  runuser -u munge -- /usr/sbin/munged
  for _ in $(seq 50); do munge_ok && return 0; sleep 0.1; done
  die "munged does not answer (see /var/log/munge/munged.log)"
}

write_if_changed() {  # path; content on stdin
  local tmp="$1.tmp.$$"
  cat >"$tmp"
  if cmp -s "$tmp" "$1"; then rm -f "$tmp"; else mv "$tmp" "$1"; CHANGED=1; fi
}

write_config() {
  CHANGED=0
  mkdir -p "$DIR"/{dev,log,run,state,spool}
  # Fake GPUs. Slurm 22.05 drops a gres.conf File that is not a character/block device ("not a valid
  # character or block device") and then sets no CUDA_VISIBLE_DEVICES in jobs, so they are character
  # devices with /dev/null's numbers (1,3: harmless if opened); a plain file where mknod is refused.
  local i n node_lines="" gres_lines=""
  for n in $NODE_LIST; do
    for i in 0 1 2 3; do
      [ -c "$DIR/dev/$n-gpu$i" ] && continue
      rm -f "$DIR/dev/$n-gpu$i"
      mknod -m 0666 "$DIR/dev/$n-gpu$i" c 1 3 2>/dev/null || touch "$DIR/dev/$n-gpu$i"
    done
    node_lines+="NodeName=$n NodeAddr=127.0.0.1 Port=$((SLURMD_PORT + ${n#dev})) CPUs=16 RealMemory=16000 Gres=gpu:a100:4 State=UNKNOWN"$'\n'
    gres_lines+="NodeName=$n Name=gpu Type=a100 File=$DIR/dev/$n-gpu[0-3]"$'\n'
  done
  local nodes="dev[0-$((NODES - 1))]"
  [ "$NODES" -eq 1 ] && nodes=dev0
  write_if_changed "$DIR/slurm.conf" <<EOF
# Written by tools/slurm-dev.sh; rewritten on every start.
ClusterName=danlu-dev
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
SlurmdParameters=config_overrides
# Finished jobs stay visible to squeue/scontrol for an hour.
MinJobAge=3600
KillWait=5
# A dead slurmd marks the node DOWN (and its jobs NODE_FAIL) fast; a slurmd that comes back is resumed.
SlurmdTimeout=10
# MessageTimeout=5 (default 10) brings that from ~27 s to ~19 s after the kill.
MessageTimeout=5
ReturnToService=2
# Batch jobs are not requeued by Slurm after a node failure: they end NODE_FAIL and danlu decides.
JobRequeue=0
# Event-driven scheduling at once (submit, release, job end) and a main pass every second.
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1,sched_min_interval=100000,bf_interval=1
StateSaveLocation=$DIR/state
# %n: the node's name, so several slurmd run on one machine (each with its own Port above).
SlurmdSpoolDir=$DIR/spool/slurmd.%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.%n.log
SlurmctldDebug=info
SlurmdDebug=info
${node_lines}PartitionName=gpu Nodes=$nodes Default=YES MaxTime=INFINITE State=UP
PartitionName=spot Nodes=$nodes Default=NO MaxTime=INFINITE State=UP
EOF
  write_if_changed "$DIR/gres.conf" <<EOF
AutoDetect=off
${gres_lines%$'\n'}
EOF
}

pid_alive() {  # pidfile
  local pid
  [ -s "$1" ] || return 1
  pid=$(cat "$1" 2>/dev/null) || return 1
  [ -n "$pid" ] && proc_alive "$pid"
}

proc_alive() { kill -0 "$1" 2>/dev/null && ! is_zombie "$1"; }

# A killed daemon stays a zombie until init reaps it (slowly in some containers): not alive.
is_zombie() { [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" = Z ]; }

ctld_up() { pid_alive "$DIR/run/slurmctld.pid" && sinfo -h -o %P >/dev/null 2>&1; }
slurmd_pid() { echo "$DIR/run/slurmd.$1.pid"; }  # node
slurmd_log() { echo "$DIR/log/slurmd.$1.log"; }  # node
slurmd_up() { pid_alive "$(slurmd_pid "$1")"; }  # node
node_state() { sinfo -h -N -n "$1" -o %T 2>/dev/null | head -n1; }  # node
# idle, mixed, allocated ... count as up; down/drain/not responding ("*" suffix) do not.
node_ready() {  # node
  local s
  s=$(node_state "$1") || return 1
  case "$s" in
    idle|mixed|allocated|completing|planned) return 0 ;;
    *) return 1 ;;
  esac
}

die_log() {  # log message: the message and the log's last lines
  log "error: $2; see $1"
  tail -n 5 "$1" 2>/dev/null | sed 's/^/  /' >&2 || true
  exit 1
}

daemon_dead() {  # pidfile: true when a started daemon has exited
  local pid
  [ -s "$1" ] || return 1
  pid=$(cat "$1" 2>/dev/null) || return 1
  ! kill -0 "$pid" 2>/dev/null || is_zombie "$pid"
}

start_ctld() {
  ctld_up && return 0
  pid_alive "$DIR/run/slurmctld.pid" || rm -f "$DIR/run/slurmctld.pid"
  local logf="$DIR/log/slurmctld.log"
  log "starting slurmctld (log: $logf)"
  /usr/sbin/slurmctld -f "$SLURM_CONF" || die_log "$logf" "slurmctld failed to start"
  local deadline=$((SECONDS + TIMEOUT))
  until ctld_up; do
    daemon_dead "$DIR/run/slurmctld.pid" && die_log "$logf" "slurmctld exited"
    [ $SECONDS -lt $deadline ] || die_log "$logf" "slurmctld does not answer after ${TIMEOUT}s"
    sleep 0.2
  done
}

start_slurmd() {  # node
  slurmd_up "$1" && return 0
  rm -f "$(slurmd_pid "$1")"
  mkdir -p "$DIR/spool/slurmd.$1"
  log "starting slurmd -N $1 (log: $(slurmd_log "$1"))"
  /usr/sbin/slurmd -f "$SLURM_CONF" -N "$1" || die_log "$(slurmd_log "$1")" "slurmd $1 failed to start"
}

wait_node() {  # node
  local deadline=$((SECONDS + TIMEOUT)) s resumed=0
  while :; do
    s=$(node_state "$1" || true)
    node_ready "$1" && return 0
    daemon_dead "$(slurmd_pid "$1")" && die_log "$(slurmd_log "$1")" "slurmd $1 exited"
    # DOWN/DRAIN once slurmd registered (no "*" = responding): resume it.
    case "$s" in
      down|drained|draining|drain|fail|failing)
        if [ $resumed -eq 0 ]; then
          log "node $1 is $s; resuming it"
          scontrol update nodename="$1" state=resume >/dev/null 2>&1 || true
          resumed=1
        fi ;;
    esac
    [ $SECONDS -lt $deadline ] \
      || die_log "$(slurmd_log "$1")" "node $1 not idle after ${TIMEOUT}s (state: ${s:-none}; also $DIR/log/slurmctld.log)"
    sleep 0.2
  done
}

all_nodes_up() {
  local n
  for n in $NODE_LIST; do slurmd_up "$n" && node_ready "$n" || return 1; done
}

# The GRES are not real GPUs: danlu lists them simulated; a100 is named as a catalog model.
flags() {
  echo "--backend slurm --slurm-conf $SLURM_CONF --slurm-partition gpu --slurm-spot-partition spot" \
    "--slurm-gpu-model a100=A100-80GB --slurm-fake-gpus"
}

cmd_start() {
  ensure_packages
  ensure_munge
  if [ "$(cat "$DIR/nodes" 2>/dev/null || echo "$NODE_LIST")" != "$NODE_LIST" ] || [ -e "$DIR/run/slurmd.pid" ]; then
    # Slurm 22.05 adds or removes nodes only with a restart (a reconfigure keeps its node table); an
    # older one-node layout (slurmd.pid) is replaced the same way.
    log "nodes change to: $NODE_LIST; restarting the cluster"
    cmd_stop
  fi
  write_config
  echo "$NODE_LIST" >"$DIR/nodes"
  if [ "$CHANGED" -eq 1 ] && ctld_up; then
    log "configuration changed; scontrol reconfigure"
    scontrol reconfigure >/dev/null || true
  fi
  if ctld_up && all_nodes_up; then
    flags
    return 0
  fi
  start_ctld
  local n
  for n in $NODE_LIST; do start_slurmd "$n"; done
  for n in $NODE_LIST; do wait_node "$n"; done
  log "up: $(sinfo -h -N -o '%N %G %T' | tr '\n' ';')"
  flags
}

stop_pidfile() {  # name pidfile
  local pid
  pid_alive "$2" || { rm -f "$2"; return 0; }
  pid=$(cat "$2")
  log "stopping $1 ($pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 100); do proc_alive "$pid" || break; sleep 0.1; done
  if proc_alive "$pid"; then kill -KILL "$pid" 2>/dev/null || true; fi
  rm -f "$2"
}

# slurmstepd processes of this cluster's node(s): those holding a node's slurmd log open (inherited from
# its slurmd). With no node named: every node's.
stepd_pids() {  # [node]
  local p fd target
  for p in $(pgrep -x slurmstepd 2>/dev/null || true); do
    for fd in /proc/"$p"/fd/*; do
      target=$(readlink "$fd" 2>/dev/null || true)
      if [ -n "${1:-}" ]; then
        [ "$target" = "$DIR/log/slurmd.$1.log" ] && { echo "$p"; break; }
      else
        case "$target" in "$DIR"/log/slurmd.*log) echo "$p"; break ;; esac
      fi
    done
  done
}

# The slurmstepd processes and everything they started (the jobs' processes): collected before any is
# killed, since a job's processes outlive a killed slurmstepd (reparented to init, still running).
stepd_trees() {  # [node]
  local roots
  roots=$(stepd_pids "${1:-}" | tr '\n' ' ')
  [ -z "$roots" ] && return 0
  ps -e -o pid=,ppid= | awk -v roots="$roots" '
    { parent[$1] = $2 }
    END {
      n = split(roots, r, " "); for (i = 1; i <= n; i++) keep[r[i]] = 1
      do { added = 0; for (p in parent) if (!(p in keep) && (parent[p] in keep)) { keep[p] = 1; added = 1 } } while (added)
      for (p in keep) print p
    }'
}

kill_stepds() {  # signal [node]
  local pids
  pids=$(stepd_trees "${2:-}")
  [ -z "$pids" ] && return 0
  # shellcheck disable=SC2086
  kill -"$1" $pids 2>/dev/null || true
}

cmd_stop() {
  local pidfile
  for pidfile in "$DIR"/run/slurmd*.pid; do
    [ -e "$pidfile" ] && stop_pidfile "slurmd ($(basename "$pidfile"))" "$pidfile"
  done
  stop_pidfile slurmctld "$DIR/run/slurmctld.pid"
  kill_stepds KILL
  rm -rf "$DIR/state" "$DIR/spool" "$DIR/nodes"
  log "stopped (state wiped; logs kept in $DIR/log; munged left running)"
}

cmd_status() {
  if ctld_up; then
    sinfo
    return 0
  fi
  echo "slurm-dev: down" >&2
  return 1
}

cmd_kill_slurmd() {  # [node]
  local node=${1:-$NODE} pid=""
  pid_alive "$(slurmd_pid "$node")" && pid=$(cat "$(slurmd_pid "$node")")
  [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null || true
  kill_stepds KILL "$node"
  rm -f "$(slurmd_pid "$node")"
  log "killed $node's slurmd${pid:+ ($pid)}, its slurmstepds and the jobs' processes"
}

cmd_start_slurmd() {  # [node]
  local node=${1:-$NODE}
  ensure_munge
  ctld_up || die "slurmctld is not running; run tools/slurm-dev.sh start"
  start_slurmd "$node"
  wait_node "$node"
  log "up: $(sinfo -h -N -n "$node" -o '%N %G %T' | head -n1)"
}

# The controller alone goes away and comes back with its saved state (jobs keep running on the node).
cmd_stop_slurmctld() { stop_pidfile slurmctld "$DIR/run/slurmctld.pid"; }
cmd_start_slurmctld() {
  ensure_munge
  start_ctld
  local n
  for n in $NODE_LIST; do wait_node "$n"; done
}

# Every command but start acts on the nodes the cluster was started with.
[ "${1:-start}" != start ] && [ -s "$DIR/nodes" ] && NODE_LIST=$(cat "$DIR/nodes")

case "${1:-start}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  kill-slurmd) cmd_kill_slurmd "${2:-}" ;;
  start-slurmd) cmd_start_slurmd "${2:-}" ;;
  stop-slurmctld) cmd_stop_slurmctld ;;
  start-slurmctld) cmd_start_slurmctld ;;
  *) echo "usage: $0 [start|stop|status|kill-slurmd|start-slurmd|stop-slurmctld|start-slurmctld]" >&2; exit 2 ;;
esac
