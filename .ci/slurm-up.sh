#!/usr/bin/env bash
# Start a one-node Slurm on this machine for the Slurm tests: munged + slurmctld + slurmd, as root,
# without systemd. Idempotent: installs Debian's packages only when missing, and does nothing when
# the cluster it started earlier still answers. Prints the slurm.conf path on its last line; the
# tests find the cluster through SLURM_CONF (default /etc/slurm/slurm.conf, which this writes).
# .ci/slurm-down.sh stops exactly what this started (pids recorded in $STATE/pids).
set -euo pipefail
STATE=${MINIMIND_SLURM_STATE:-/tmp/minimind-slurm}
CONF=/etc/slurm/slurm.conf

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v sbatch >/dev/null \
        || ! command -v munged >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null
fi

# A node busy with jobs (mixed, allocated) is up too: starting again (slurmctld -c) would drop their jobs.
if [ -f "$STATE/pids" ] && sinfo -h -o %T 2>/dev/null | grep -qxE 'idle|mixed|allocated|completing'; then
    echo "$CONF"
    exit 0  # already up
fi

host=$(hostname -s)
mkdir -p "$STATE"/{spool,state,log} /etc/slurm
touch "$STATE/pids"  # what an earlier run started stays listed, for slurm-down

# munge: a key, then the daemon as the munge user.
if [ ! -s /etc/munge/munge.key ]; then
    install -d -o munge -g munge -m 0700 /etc/munge
    dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
    chown munge:munge /etc/munge/munge.key
    chmod 0400 /etc/munge/munge.key
fi
install -d -o munge -g munge /run/munge /var/log/munge /var/lib/munge
if ! pgrep -u munge -x munged >/dev/null; then
    runuser -u munge -- /usr/sbin/munged
    for _ in $(seq 50); do [ -S /run/munge/munge.socket.2 ] && break; sleep 0.1; done
    for _ in $(seq 50); do [ -s /run/munge/munged.pid ] && break; sleep 0.1; done
    echo "munged $(cat /run/munge/munged.pid)" >> "$STATE/pids"
fi

cat > "$CONF" <<CONF
ClusterName=minimind
SlurmctldHost=${host}(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MailProg=/bin/true
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$STATE/log/jobcomp.txt
JobAcctGatherType=jobacct_gather/none
MinJobAge=3600
KillWait=30
ReturnToService=2
StateSaveLocation=$STATE/state
SlurmdSpoolDir=$STATE/spool
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
NodeName=${host} NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=debug Nodes=${host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF

slurmctld -c
slurmd
for _ in $(seq 100); do [ -s "$STATE/slurmctld.pid" ] && [ -s "$STATE/slurmd.pid" ] && break; sleep 0.1; done
echo "slurmctld $(cat "$STATE/slurmctld.pid")" >> "$STATE/pids"
echo "slurmd $(cat "$STATE/slurmd.pid")" >> "$STATE/pids"
for _ in $(seq 100); do
    if sinfo -h -o %T 2>/dev/null | grep -qx idle; then echo "$CONF"; exit 0; fi
    sleep 0.2
done
echo "slurm-up: the node did not become idle; see $STATE/log" >&2
sinfo >&2 || true
exit 1
