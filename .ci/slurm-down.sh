#!/usr/bin/env bash
# Stop the daemons .ci/slurm-up.sh started (and only those), by the pids it recorded.
set -uo pipefail
STATE=${MINIMIND_SLURM_STATE:-/tmp/minimind-slurm}
[ -f "$STATE/pids" ] || exit 0
# slurmd and slurmctld first, munged last (they talk through it).
for name in slurmd slurmctld munged; do
    for pid in $(awk -v n="$name" '$1 == n {print $2}' "$STATE/pids"); do
        kill "$pid" 2>/dev/null || continue
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
    done
done
rm -f "$STATE/pids"
