#!/usr/bin/env bash
# One-node Slurm on localhost for the deploy tests (tests/deploy/test_real_slurm.py), for CI and developers.
# The scheduler cross-check (tests/sched/test_crosscheck_real_slurm.py, `clustertwin sched crosscheck`)
# needs only the packages and munged from here: it starts its own multi-node instance with its own
# configuration, ports and directories, and stops it afterwards.
#
# Installs Debian's munge, slurmctld, slurmd and slurm-client if they are missing, writes a cgroup-free
# slurm.conf for this host, starts munged, slurmctld and slurmd, and waits until the node is idle.
# Idempotent: a second run finds the daemons answering and changes nothing. Needs root.
#
# Job records for `sacct` without a database: JobCompType=jobcomp/filetxt writes one line per finished job
# to JobCompLoc, and `sacct --completion` (-c) reads that file (Slurm <= 22.05, Debian 12). With
# AccountingStorageType=accounting_storage/none plain `sacct` has nothing to show; the tests use
# `sacct -c --parsable2`.
#
# Environment: SLURM_CONF (default /etc/slurm/slurm.conf), SLURM_SETUP_TIMEOUT_S (default 60).
set -euo pipefail

CONF="${SLURM_CONF:-/etc/slurm/slurm.conf}"
TIMEOUT_S="${SLURM_SETUP_TIMEOUT_S:-60}"
MARKER="# written by clustertwin ci/slurm-setup.sh"
LOGDIR=/var/log/slurm
JOBCOMP="$LOGDIR/jobcomp.log"

log() { printf 'slurm-setup: %s\n' "$*" >&2; }

if [ "$(id -u)" -ne 0 ]; then
    log "must run as root (installs packages and starts daemons)"
    exit 1
fi

# 1. packages
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v sbatch >/dev/null \
    || ! command -v munged >/dev/null; then
    log "installing munge, slurmctld, slurmd, slurm-client"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq munge slurmctld slurmd slurm-client >/dev/null
fi

# 2. munge: key and daemon
if [ ! -s /etc/munge/munge.key ]; then
    log "creating /etc/munge/munge.key"
    if command -v mungekey >/dev/null; then
        mungekey --create --keyfile=/etc/munge/munge.key
    else
        dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    fi
fi
chown munge:munge /etc/munge/munge.key
chmod 0400 /etc/munge/munge.key
install -d -o munge -g munge -m 0755 /run/munge
install -d -o munge -g munge -m 0700 /var/log/munge /var/lib/munge
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    log "starting munged"
    runuser -u munge -- /usr/sbin/munged
    for _ in $(seq 1 20); do
        munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break
        sleep 0.5
    done
    munge -n | unmunge >/dev/null
fi

# 3. slurm.conf (never overwrite a configuration this script did not write)
HOST="$(hostname -s)"
if [ -e "$CONF" ] && ! grep -qF "$MARKER" "$CONF"; then
    log "$CONF exists and was not written by this script; leaving it alone"
else
    NODELINE="$(slurmd -C | head -n 1)"
    case "$NODELINE" in
        NodeName=*) ;;
        *) log "unexpected 'slurmd -C' output: $NODELINE"; exit 1 ;;
    esac
    install -d -m 0755 "$(dirname "$CONF")" "$LOGDIR" /var/spool/slurmctld /var/spool/slurmd
    NEW="$(mktemp)"
    cat >"$NEW" <<EOF
$MARKER
# One node on localhost, cgroup-free (works in containers): linuxproc process tracking, no task plugin.
ClusterName=clustertwin-ci
SlurmctldHost=$HOST
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOGDIR/slurmctld.log
SlurmdLogFile=$LOGDIR/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
# sacct --completion reads this file (no slurmdbd needed)
JobCompType=jobcomp/filetxt
JobCompLoc=$JOBCOMP
ReturnToService=2
KillWait=30
MinJobAge=300
$NODELINE NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
    # the uptime line of `slurmd -C` is not configuration
    sed -i '/^UpTime=/d' "$NEW"
    if [ -e "$CONF" ] && cmp -s "$NEW" "$CONF"; then
        rm -f "$NEW"
    else
        log "writing $CONF"
        install -m 0644 "$NEW" "$CONF"
        rm -f "$NEW"
        # a running controller must re-read a changed file
        if scontrol ping >/dev/null 2>&1; then scontrol reconfigure; fi
    fi
fi
touch "$JOBCOMP"

# 4. daemons
if ! scontrol ping 2>/dev/null | grep -q "is UP"; then
    log "starting slurmctld"
    /usr/sbin/slurmctld
fi
if ! pgrep -x slurmd >/dev/null; then
    log "starting slurmd"
    /usr/sbin/slurmd
fi

# 5. wait for an idle node (resume it if an earlier run left it down or drained)
deadline=$((SECONDS + TIMEOUT_S))
while :; do
    state="$(sinfo -h -n "$HOST" -o '%T' 2>/dev/null | head -n 1 || true)"
    case "$state" in
        idle|mixed|allocated|completing) break ;;
        down*|drain*|drained*)
            scontrol update NodeName="$HOST" State=RESUME >/dev/null 2>&1 || true ;;
    esac
    if [ "$SECONDS" -ge "$deadline" ]; then
        log "node $HOST not ready after ${TIMEOUT_S}s (state: '${state:-unknown}'); see $LOGDIR/slurmctld.log and $LOGDIR/slurmd.log"
        exit 1
    fi
    sleep 1
done
log "ready: node $HOST is $state"
