#!/usr/bin/env bash
# A single-node development Slurm cluster (slurm-wlm 22.05, Debian) for the danlu Slurm backend.
#
#   tools/slurm-dev.sh [start]     start munged, slurmctld and slurmd (idempotent); prints the one line
#                                  of danlu flags on stdout: --backend slurm --slurm-conf ... --slurm-partition gpu
#   tools/slurm-dev.sh stop        stop slurmd, slurmctld, any leftover slurmstepd (and its processes); wipe the state
#                                  (logs are kept). munged is left running: it is shared and harmless.
#   tools/slurm-dev.sh status      print sinfo; exit 0 when the cluster answers, 1 otherwise
#   tools/slurm-dev.sh kill-slurmd kill -9 slurmd, every slurmstepd and their processes (a node that died)
#   tools/slurm-dev.sh start-slurmd
#                                  start slurmd again and wait until dev0 is back (resumed if it came back DOWN)
#
# Everything lives in ${DANLU_SLURM_DIR:-/var/tmp/danlu-slurm}: slurm.conf, gres.conf, spool, state, logs,
# pid files and four fake GPUs dev/gpu0..gpu3 (character devices, see write_config). /etc/slurm is never
# written; clients find the config through SLURM_CONF=<dir>/slurm.conf. One node dev0 (16 CPUs, 16000 MB,
# gres gpu:a100:4: more than the machine has, SlurmdParameters=config_overrides), partitions gpu (default)
# and spot. Needs root.
# Ports: DANLU_SLURMCTLD_PORT (6817) and DANLU_SLURMD_PORT (6818).
set -euo pipefail

DIR=${DANLU_SLURM_DIR:-/var/tmp/danlu-slurm}
CTLD_PORT=${DANLU_SLURMCTLD_PORT:-6817}
SLURMD_PORT=${DANLU_SLURMD_PORT:-6818}
NODE=dev0
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
  mkdir -p "$DIR"/{dev,log,run,state,spool/slurmd}
  # Fake GPUs. Slurm 22.05 drops a gres.conf File that is not a character/block device ("not a valid
  # character or block device") and then sets no CUDA_VISIBLE_DEVICES in jobs, so they are character
  # devices with /dev/null's numbers (1,3: harmless if opened); a plain file where mknod is refused.
  local i
  for i in 0 1 2 3; do
    [ -c "$DIR/dev/gpu$i" ] && continue
    rm -f "$DIR/dev/gpu$i"
    mknod -m 0666 "$DIR/dev/gpu$i" c 1 3 2>/dev/null || touch "$DIR/dev/gpu$i"
  done
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
SlurmdSpoolDir=$DIR/spool/slurmd
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=16 RealMemory=16000 Gres=gpu:a100:4 State=UNKNOWN
PartitionName=gpu Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
PartitionName=spot Nodes=$NODE Default=NO MaxTime=INFINITE State=UP
EOF
  write_if_changed "$DIR/gres.conf" <<EOF
AutoDetect=off
NodeName=$NODE Name=gpu Type=a100 File=$DIR/dev/gpu[0-3]
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
slurmd_up() { pid_alive "$DIR/run/slurmd.pid"; }
node_state() { sinfo -h -N -n "$NODE" -o %T 2>/dev/null | head -n1; }
# idle, mixed, allocated ... count as up; down/drain/not responding ("*" suffix) do not.
node_ready() {
  local s
  s=$(node_state) || return 1
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

start_slurmd() {
  slurmd_up && return 0
  rm -f "$DIR/run/slurmd.pid"
  log "starting slurmd -N $NODE (log: $DIR/log/slurmd.log)"
  /usr/sbin/slurmd -f "$SLURM_CONF" -N "$NODE" || die_log "$DIR/log/slurmd.log" "slurmd failed to start"
}

wait_node() {
  local deadline=$((SECONDS + TIMEOUT)) s resumed=0
  while :; do
    s=$(node_state || true)
    node_ready && return 0
    daemon_dead "$DIR/run/slurmd.pid" && die_log "$DIR/log/slurmd.log" "slurmd exited"
    # DOWN/DRAIN once slurmd registered (no "*" = responding): resume it.
    case "$s" in
      down|drained|draining|drain|fail|failing)
        if [ $resumed -eq 0 ]; then
          log "node $NODE is $s; resuming it"
          scontrol update nodename="$NODE" state=resume >/dev/null 2>&1 || true
          resumed=1
        fi ;;
    esac
    [ $SECONDS -lt $deadline ] \
      || die_log "$DIR/log/slurmd.log" "node $NODE not idle after ${TIMEOUT}s (state: ${s:-none}; also $DIR/log/slurmctld.log)"
    sleep 0.2
  done
}

# The GRES are not real GPUs: danlu lists them simulated; a100 is named as a catalog model.
flags() {
  echo "--backend slurm --slurm-conf $SLURM_CONF --slurm-partition gpu --slurm-spot-partition spot" \
    "--slurm-gpu-model a100=A100-80GB --slurm-fake-gpus"
}

cmd_start() {
  ensure_packages
  ensure_munge
  write_config
  if [ "$CHANGED" -eq 1 ] && ctld_up; then
    log "configuration changed; scontrol reconfigure"
    scontrol reconfigure >/dev/null || true
  fi
  if ctld_up && slurmd_up && node_ready; then
    flags
    return 0
  fi
  start_ctld
  start_slurmd
  wait_node
  log "up: $(sinfo -h -N -o '%N %G %T' | head -n1)"
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

# slurmstepd processes of this cluster: those holding our slurmd log open (they inherit it from slurmd).
stepd_pids() {
  local p fd
  for p in $(pgrep -x slurmstepd 2>/dev/null || true); do
    for fd in /proc/"$p"/fd/*; do
      if [ "$(readlink "$fd" 2>/dev/null)" = "$DIR/log/slurmd.log" ]; then echo "$p"; break; fi
    done
  done
}

# The slurmstepd processes and everything they started (the jobs' processes): collected before any is
# killed, since a job's processes outlive a killed slurmstepd (reparented to init, still running).
stepd_trees() {
  local roots
  roots=$(stepd_pids | tr '\n' ' ')
  [ -z "$roots" ] && return 0
  ps -e -o pid=,ppid= | awk -v roots="$roots" '
    { parent[$1] = $2 }
    END {
      n = split(roots, r, " "); for (i = 1; i <= n; i++) keep[r[i]] = 1
      do { added = 0; for (p in parent) if (!(p in keep) && (parent[p] in keep)) { keep[p] = 1; added = 1 } } while (added)
      for (p in keep) print p
    }'
}

kill_stepds() {  # signal
  local pids
  pids=$(stepd_trees)
  [ -z "$pids" ] && return 0
  # shellcheck disable=SC2086
  kill -"$1" $pids 2>/dev/null || true
}

cmd_stop() {
  stop_pidfile slurmd "$DIR/run/slurmd.pid"
  stop_pidfile slurmctld "$DIR/run/slurmctld.pid"
  kill_stepds KILL
  rm -rf "$DIR/state" "$DIR/spool"
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

cmd_kill_slurmd() {
  local pid=""
  pid_alive "$DIR/run/slurmd.pid" && pid=$(cat "$DIR/run/slurmd.pid")
  [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null || true
  kill_stepds KILL
  rm -f "$DIR/run/slurmd.pid"
  log "killed slurmd${pid:+ ($pid)}, every slurmstepd and the jobs' processes"
}

cmd_start_slurmd() {
  ensure_munge
  ctld_up || die "slurmctld is not running; run tools/slurm-dev.sh start"
  start_slurmd
  wait_node
  log "up: $(sinfo -h -N -o '%N %G %T' | head -n1)"
}

# The controller alone goes away and comes back with its saved state (jobs keep running on the node).
cmd_stop_slurmctld() { stop_pidfile slurmctld "$DIR/run/slurmctld.pid"; }
cmd_start_slurmctld() {
  ensure_munge
  start_ctld
  wait_node
}

case "${1:-start}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  kill-slurmd) cmd_kill_slurmd ;;
  start-slurmd) cmd_start_slurmd ;;
  stop-slurmctld) cmd_stop_slurmctld ;;
  start-slurmctld) cmd_start_slurmctld ;;
  *) echo "usage: $0 [start|stop|status|kill-slurmd|start-slurmd|stop-slurmctld|start-slurmctld]" >&2; exit 2 ;;
esac
