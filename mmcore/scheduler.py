"""The queue: which waiting job starts next, decided by one detached scheduler process.

A job submitted through `mmcore.jobqueue` is a `queued` row with `waiting = 1`. It asks for a CPU
slot (`resources == {}`), any N GPUs (`{"gpus": N}`) or specific GPUs (`{"gpu_ids": [0, 2]}`).

`plan()` is the decision, a pure function: waiting jobs in order (priority first, then place in
the queue, i.e. first come first served), what active jobs hold, and what NVML shows. A GPU is free
when no job of ours holds it and no other process uses more than `foreign_memory_mib` of it. A job
that cannot start keeps the resources it waits for from later jobs (no starvation of big jobs), and
jobs that would write the same weight or resume file wait for each other. Pipeline stages wait
for the stage before them (`depends_on`).

`python -m mmcore.scheduler --db PATH` applies the plan every `POLL_S` seconds (and at once when a
job ends: the runner sends SIGUSR1). Only one scheduler runs per store: it holds an exclusive
`flock` on `<home>/scheduler.lock` (the kernel drops it when the process dies, so a killed
scheduler never blocks the next one). It runs detached like the job supervisors and exits when
there is nothing left to wait for; `ensure_running()` (called on submit, on every page run and by
every supervisor when its job ends) starts it again.
"""
import argparse
import fcntl
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass

from mmcore.paths import ROOT

LOCK_NAME = "scheduler.lock"
LOG_NAME = "scheduler.log"
POLL_S = 0.5
IDLE_EXIT_S = 20.0  # a scheduler with nothing to wait for exits after this long
MIB = 1 << 20


# -- the decision ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Decision:
    job_id: int
    start: bool
    gpus: tuple = ()  # GPU indexes the job gets when it starts
    reason: str = ""  # why it waits, with its place: "#2 in the queue · waiting for ..."


def wanted(job):
    """("cpu", None), ("any", n) or ("ids", [..]) from a job's `resources`."""
    res = job.resources or {}
    if res.get("gpu_ids"):
        return "ids", [int(g) for g in res["gpu_ids"]]
    if res.get("gpus"):
        return "any", int(res["gpus"])
    return "cpu", None


def who(job):
    return f"job {job.id} ({job.user})" if job.user else f"job {job.id}"


def _gib(nbytes):
    return f"{nbytes / (1 << 30):.1f} GiB"


def gpu_state(gpus, active, our_pids, foreign_memory_mib):
    """(free GPU indexes, {index: why it is busy}) from NVML's view and the jobs that hold GPUs."""
    busy = {}
    for job in active:
        for index in job.assigned_gpus or ():
            busy.setdefault(int(index), f"GPU {index} held by {who(job)}")
    limit = foreign_memory_mib * MIB
    for g in gpus:
        if g.index in busy:
            continue
        for proc in g.processes:
            if proc.pid in our_pids:
                continue
            if proc.used_memory is None or proc.used_memory > limit:
                used = "" if proc.used_memory is None else f", {_gib(proc.used_memory)}"
                busy[g.index] = f"GPU {g.index} used by another process (pid {proc.pid}{used})"
                break
    free = [g.index for g in gpus if g.index not in busy]
    return free, busy


def plan(waiting, active, gpus, cpu_slots, foreign_memory_mib=1024, our_pids=frozenset(),
         outputs=None, dependencies=None):
    """One decision per waiting job, in queue order.

    `waiting`: jobs in the queue, already in queue order. `active`: jobs of ours that hold
    resources (local jobs started and not ended). `gpus`: `mmcore.gpu.GpuInfo` list.
    `outputs(job) -> paths` it writes, most telling first (default: none). `dependencies`: {job id: (status,
    label)} of the jobs waiting jobs depend on.
    """
    outputs = outputs or (lambda job: ())
    dependencies = dependencies or {}
    free, busy = gpu_state(gpus, active, our_pids, foreign_memory_mib)
    free = list(free)
    present = {g.index for g in gpus}
    cpu_jobs = [j for j in active if j.backend == "local" and not j.assigned_gpus]
    cpu_used = len(cpu_jobs)
    writers = {}  # path -> (job, started or waiting ahead)
    for job in active:
        for path in outputs(job):
            writers.setdefault(path, (job, "running"))
    reserved = {}  # GPU index -> job ahead in the queue that waits for it
    decisions = []
    for job in waiting:
        files = outputs(job)
        if job.depends_on is not None:
            status, label = dependencies.get(job.depends_on, ("missing", f"job {job.depends_on}"))
            if status != "succeeded":
                decisions.append(Decision(job.id, False, reason=f"waiting for {label} to succeed"))
                _claim(writers, files, job)
                continue
        clash = next((p for p in files if p in writers), None)
        if clash is not None:
            other, how = writers[clash]
            ahead = "" if how == "running" else ", ahead in the queue"
            decisions.append(Decision(job.id, False, reason=f"waiting for {who(other)}{ahead}, "
                                                               f"which writes {clash}"))
            _claim(writers, files, job)
            continue
        kind, need = wanted(job)
        if job.backend != "local":
            decisions.append(Decision(job.id, True))  # the cluster's scheduler places it
            _claim(writers, files, job, "running")
            continue
        if kind == "cpu":
            if cpu_used < cpu_slots:
                cpu_used += 1
                cpu_jobs.append(job)
                decisions.append(Decision(job.id, True))
                _claim(writers, files, job, "running")
            else:
                holders = ", ".join(who(j) for j in cpu_jobs)
                decisions.append(Decision(job.id, False, reason=f"waiting for a CPU slot ({cpu_used} of "
                                                                   f"{cpu_slots} in use: {holders})"))
                _claim(writers, files, job)
            continue
        ids = need if kind == "ids" else None
        count = len(need) if kind == "ids" else need
        if kind == "ids":
            missing = [i for i in ids if i not in present]
            if missing:
                decisions.append(Decision(job.id, False, reason=f"GPU {missing[0]} does not exist on this "
                                                                   f"machine ({len(present)} GPUs)"))
                continue
            takeable = [i for i in ids if i in free and i not in reserved]
        else:
            if count > len(present):
                decisions.append(Decision(job.id, False, reason=f"asks for {count} GPUs; this machine "
                                                                   f"has {len(present)}"))
                continue
            takeable = [i for i in free if i not in reserved][:count]
        if len(takeable) == count:
            for i in takeable:
                free.remove(i)
                busy[i] = f"GPU {i} held by {who(job)}"
            decisions.append(Decision(job.id, True, gpus=tuple(takeable)))
            _claim(writers, files, job, "running")
            continue
        candidates = ids if ids is not None else sorted(present)
        why = [busy.get(i) or f"GPU {i} wanted by {who(reserved[i])}, ahead in the queue"
               for i in candidates if i not in takeable and (i in busy or i in reserved)]
        if ids is not None:
            head = f"waiting for GPU{'s' if count > 1 else ''} {', '.join(map(str, ids))}"
        else:
            head = f"waiting for {count} GPU{'s' if count > 1 else ''}"
        decisions.append(Decision(job.id, False, reason="; ".join([head] + why)))
        for i in takeable:
            reserved[i] = job
        _claim(writers, files, job)
    # Places count the jobs that stay in the queue, so the first that waits is #1.
    places = iter(range(1, len(decisions) + 1))
    return [d if d.start else Decision(d.job_id, False, reason=f"#{next(places)} in the queue · {d.reason}")
            for d in decisions]


def _claim(writers, files, job, how="waiting"):
    for path in files:
        writers.setdefault(path, (job, how))


# -- the process -------------------------------------------------------------------------------------

def lock_path(store):
    return store.home / LOCK_NAME


def _try_lock(path):
    """An open file holding the exclusive lock, or None when another process holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def running_pid(store):
    """The pid of the scheduler that holds the lock, or None when none does."""
    path = lock_path(store)
    fd = _try_lock(path)
    if fd is not None:
        os.close(fd)  # closing drops the lock
        return None
    try:
        text = path.read_text().strip()
        return int(text) if text.isdigit() else None
    except OSError:
        return None


def has_work(store):
    """True while jobs wait in the queue or Slurm jobs are active (they need reconciling)."""
    with store._connect() as conn:
        return conn.execute(
            "SELECT 1 FROM jobs WHERE status = 'queued' AND (waiting = 1 OR backend != 'local')"
            " OR (status = 'running' AND backend != 'local') LIMIT 1").fetchone() is not None


def ensure_running(store):
    """Start the scheduler of `store` when there is work and none runs; return its pid or None."""
    if not has_work(store):
        return None
    pid = running_pid(store)
    if pid is not None:
        return pid
    log = open(store.home / LOG_NAME, "ab")
    try:
        proc = subprocess.Popen([sys.executable, "-m", "mmcore.scheduler", "--db", store.path], cwd=ROOT,
                                start_new_session=True, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    finally:
        log.close()
    threading.Thread(target=proc.wait, name=f"reap-scheduler-{proc.pid}", daemon=True).start()
    return proc.pid


def wake(store):
    """Make a running scheduler decide now instead of at its next poll (a job just ended)."""
    pid = running_pid(store)
    if pid is not None:
        try:
            os.kill(pid, signal.SIGUSR1)
        except (ProcessLookupError, PermissionError):
            pass
    else:
        ensure_running(store)


def serve(store, poll=POLL_S, idle_exit=IDLE_EXIT_S):
    """Hold the lock and run the queue until it has been idle for `idle_exit` seconds.

    Returns 0 when done, 3 when another scheduler already holds the lock.
    """
    from mmcore import jobqueue  # the queue's store operations; imported here, they import this module

    path = lock_path(store)
    fd = _try_lock(path)
    if fd is None:
        return 3
    woken = threading.Event()
    signal.signal(signal.SIGUSR1, lambda *_: woken.set())
    stopping = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: (stopping.set(), woken.set()))
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    idle_since = None
    queue = jobqueue.Queue(store)
    while not stopping.is_set():
        try:
            queue.tick()
        except Exception:  # a bad row or a busy database must not end the queue
            print(f"{time.strftime('%F %T')} scheduler tick failed:\n{traceback.format_exc()}", flush=True)
        if has_work(store):
            idle_since = None
        else:
            idle_since = idle_since or time.monotonic()
            if time.monotonic() - idle_since >= idle_exit:
                # Release, then look once more: a job submitted while we released sees no
                # lock holder and starts a new scheduler; one submitted before is seen here.
                os.close(fd)
                if not has_work(store):
                    return 0
                fd = _try_lock(path)
                if fd is None:
                    return 0  # a new scheduler took over
                os.ftruncate(fd, 0)
                os.pwrite(fd, str(os.getpid()).encode(), 0)
                idle_since = None
        woken.wait(poll)
        woken.clear()
    os.close(fd)
    return 0


def main(argv=None):
    """Command line: run the queue of the store at --db until nothing is left to wait for."""
    from mmcore.store import JobStore

    parser = argparse.ArgumentParser(prog="python -m mmcore.scheduler", description=main.__doc__)
    parser.add_argument("--db", default=None, help="jobs.db path (default: the dashboard's)")
    parser.add_argument("--poll", type=float, default=POLL_S, help="seconds between decisions")
    parser.add_argument("--idle-exit", type=float, default=IDLE_EXIT_S, help="exit after this long with nothing queued")
    args = parser.parse_args(argv)
    return serve(JobStore(args.db), args.poll, args.idle_exit)


if __name__ == "__main__":
    sys.exit(main())
