"""The queue's scheduler: `python -m mmcore.queue.scheduler --db PATH` runs the queue of one job store.

Every `POLL_S` seconds (and at once when a supervisor reports a job's end with SIGUSR1) it runs
one round (`Queue.tick`): reconcile what ended (local supervisors, Slurm), hold pipeline stages
behind failed ones, decide with `mmcore.queue.queueplan.plan`, hand starting jobs to their backend (the runs
of one job array that start together as one array, `mmcore.queue.job_arrays`), and store each waiting job's
place and reason. It runs detached like the job supervisors, holds the
store's scheduler lock (`mmcore.jobs.scheduler_lock`: one at a time), and exits when nothing is left to wait
for; `queuelock.ensure_running()` starts it again.
"""
import argparse
import json
import os
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from types import SimpleNamespace

import psutil

from mmcore.base import gpu, proctree
from mmcore.base.i18n import message
from mmcore.jobs import jobnote, scheduler_lock
from mmcore.queue import backends, job_arrays, queueconf, queueplan, queuetext
from mmcore.queue.resources import output_paths
from mmcore.train import file_owners

POLL_S = 0.5
IDLE_EXIT_S = 20.0  # a scheduler with nothing to wait for exits after this long
BLOCKING = ("failed", "stopped", "lost", "blocked")
LINGER_S = 3600.0  # a lost job's trainer still running after this long is left to the operator


@dataclass
class Entry:
    """The columns of a job the decision reads (its params and command are read only to start it)."""
    id: int
    user: str
    backend: str
    resources: dict
    priority: int
    queue_pos: float
    queue_reason: str | None
    depends_on: int | None
    assigned_gpus: list | None
    trainer_pid: int | None


_ENTRY_SQL = ("SELECT id, user, backend, resources, priority, queue_pos, queue_reason, depends_on, assigned_gpus,"
              " trainer_pid FROM jobs WHERE ")


def _entries(store, where, order=""):
    with store._connect() as conn:
        rows = conn.execute(_ENTRY_SQL + where + order).fetchall()
    return [Entry(r["id"], r["user"], r["backend"], json.loads(r["resources"]) if r["resources"] not in (None, "{}") else {},
                  r["priority"], r["queue_pos"], r["queue_reason"], r["depends_on"],
                  json.loads(r["assigned_gpus"]) if r["assigned_gpus"] else None, r["trainer_pid"]) for r in rows]


def waiting_jobs(store):
    """Jobs in the queue (as `Entry`), in the order the scheduler considers them."""
    return _entries(store, "status = 'queued' AND waiting = 1", " ORDER BY priority DESC, queue_pos, id")


def _lingering(store):
    """Lost jobs (their supervisor died) whose trainer's process group still runs: they hold their files,
    CPU slot and GPUs until it is gone, so the next job never writes beside a trainer still saving."""
    since = time.time() - LINGER_S
    return [j for j in _entries(store, f"status = 'lost' AND trainer_pid IS NOT NULL AND ended_at > {since:.3f}")
            if _group_runs(j.trainer_pid)]  # the trainer leads its own group


def _group_runs(pgid):
    try:
        os.killpg(pgid, 0)  # cheap, and enough to tell a group that is gone
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return proctree.group_alive(pgid)  # only zombies left counts as gone


def _our_pids(active):
    """Pids of our jobs' trainers and their children (NVML lists them as GPU users too)."""
    pids = set()
    for job in active:
        if job.trainer_pid is None:
            continue
        try:
            proc = psutil.Process(job.trainer_pid)
            pids.add(proc.pid)
            pids.update(c.pid for c in proc.children(recursive=True))
        except psutil.Error:
            continue
    return frozenset(pids)


class Queue:
    """The scheduler's state between rounds (output paths are cached per job)."""

    def __init__(self, store, list_gpus=gpu.list_gpus):
        self.store = store
        self.list_gpus = list_gpus
        self._outputs = {}

    def outputs(self, job):
        return self._outputs.get(job.id, ())

    def _load_outputs(self, jobs):
        """Work out the files of jobs not seen before (one query for all of them)."""
        missing = [j.id for j in jobs if j.id not in self._outputs]
        for start in range(0, len(missing), 500):
            chunk = missing[start:start + 500]
            with self.store._connect() as conn:
                rows = conn.execute(f"SELECT id, train_type, params, cwd FROM jobs WHERE id IN "
                                    f"({', '.join('?' * len(chunk))})", chunk).fetchall()
            for r in rows:
                job = SimpleNamespace(train_type=r["train_type"], params=json.loads(r["params"]), cwd=r["cwd"])
                self._outputs[r["id"]] = output_paths(job)

    def block_after_failures(self):
        """Hold (`blocked`) every waiting stage whose stage before failed, was stopped or is blocked."""
        blocked = []
        while True:
            with self.store._connect() as conn:
                rows = conn.execute(
                    "SELECT w.id, d.id AS dep, d.status AS dep_status, d.stage AS dep_stage FROM jobs w"
                    " JOIN jobs d ON d.id = w.depends_on WHERE w.status = 'queued' AND w.waiting = 1"
                    " AND d.status IN (%s)" % ", ".join("?" * len(BLOCKING)), BLOCKING).fetchall()
            if not rows:
                return blocked
            for row in rows:
                before = {"id": row["dep"], "status": message(f"status.{row['dep_status']}")}
                note = (jobnote.stored("note.held", **before) if row["dep_stage"] is None
                        else jobnote.stored("note.held_stage", n=row["dep_stage"] + 1, **before))
                if self.store.update_waiting(row["id"], status="blocked", waiting=0, queue_reason=None,
                                             ended_at=time.time(), note=note):
                    blocked.append(row["id"])

    def decide(self, settings):
        """(waiting jobs, decisions) for the store as it is now."""
        store = self.store
        waiting = waiting_jobs(store)
        held = [j.id for j in waiting if j.queue_reason == job_arrays.HELD]  # their array is being queued
        if held:
            job_arrays.release_stale(store, held)  # (taken next round)
            waiting = [j for j in waiting if j.queue_reason != job_arrays.HELD]
        if not waiting:
            self._outputs.clear()
            return [], []
        active = _entries(store, "status IN ('queued', 'running') AND waiting = 0") + _lingering(store)
        with store._connect() as conn:
            deps = {r["id"]: (r["status"], r["stage"]) for r in conn.execute(
                "SELECT id, status, stage FROM jobs WHERE id IN (SELECT depends_on FROM jobs"
                " WHERE status = 'queued' AND waiting = 1 AND depends_on IS NOT NULL)")}
        self._load_outputs(waiting + active)
        local_active = [j for j in active if j.backend == "local"]
        wants_gpus = any(queueplan.wanted(j)[0] in ("any", "ids") and j.backend == "local" for j in waiting)
        gpus = self.list_gpus() if wants_gpus else []
        our = _our_pids(local_active) if any(g.processes for g in gpus) else frozenset()
        dependencies = {i: (status, queuetext.stage(i, stage)) for i, (status, stage) in deps.items()}
        decisions = queueplan.plan(waiting, active, gpus, settings.effective_cpu_slots(),
                                   settings.foreign_memory_mib, our, self.outputs, dependencies)
        live = {j.id for j in waiting} | {j.id for j in active}
        for job_id in [i for i in self._outputs if i not in live]:
            del self._outputs[job_id]
        return waiting, decisions

    def _files_taken(self, job):
        """End `job` as failed when another user's job wrote its files while it waited (True), rather
        than start it over them: its owner chooses another save_weight, or an admin launches it again."""
        taken = file_owners.taken_since(self.store, job)
        if not taken:
            return False
        files = "; ".join(f"{f.path} ({f.user}, job {f.job})" for f in taken)
        self.store.update_waiting(job.id, status="failed", waiting=0, queue_reason=None, ended_at=time.time(),
                                  note=jobnote.stored("note.files_taken", files=files))
        return True

    def tick(self):
        """One round: reconcile, block, decide, start, and store the reasons of those that wait."""
        store = self.store
        backends.refresh(store)  # reconciles local jobs too
        self.block_after_failures()
        settings = queueconf.load(store.home)
        waiting, decisions = self.decide(settings)
        by_id = {j.id: j for j in waiting}
        starting_slurm = [d.job_id for d in decisions if d.start and by_id[d.job_id].backend == "slurm"]
        in_arrays = job_arrays.members(store, starting_slurm) if starting_slurm else {}
        arrays = {}  # array group -> [(job, task)] starting this round: submitted together
        reasons = []
        for d in decisions:
            job = by_id[d.job_id]
            if d.start:
                full = store.get(d.job_id)
                if full is not None and full.in_queue and not self._files_taken(full):
                    if d.job_id in in_arrays:
                        group, task = in_arrays[d.job_id]
                        arrays.setdefault(group, []).append((full, task))
                    else:
                        backends.dispatch(store, full, list(d.gpus), settings)
            elif (why := d.stored) != job.queue_reason:
                reasons.append((why, d.job_id))
        for runs in arrays.values():
            backends.dispatch_array(store, [job for job, _ in runs], [task for _, task in runs], settings)
        if reasons:
            with store._write() as conn:
                conn.executemany("UPDATE jobs SET queue_reason = ? WHERE id = ? AND waiting = 1", reasons)
        return decisions


def serve(store, poll=POLL_S, idle_exit=IDLE_EXIT_S):
    """Hold the lock and run the queue until it has been idle for `idle_exit` seconds.

    Returns 0 when done, 3 when another scheduler already holds the lock.
    """
    path = scheduler_lock.lock_path(store)
    fd = scheduler_lock.try_lock(path)
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
    queue = Queue(store)
    while not stopping.is_set():
        try:
            queue.tick()
        except Exception:  # a bad row or a busy database must not end the queue
            print(f"{time.strftime('%F %T')} scheduler tick failed:\n{traceback.format_exc()}", flush=True)
        if scheduler_lock.has_work(store):
            idle_since = None
        else:
            idle_since = idle_since or time.monotonic()
            if time.monotonic() - idle_since >= idle_exit:
                # Release, then look once more: a job submitted while we released sees no
                # lock holder and starts a new scheduler; one submitted before is seen here.
                os.close(fd)
                if not scheduler_lock.has_work(store):
                    return 0
                fd = scheduler_lock.try_lock(path)
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
    from mmcore.jobs.jobstore import JobStore

    parser = argparse.ArgumentParser(prog="python -m mmcore.queue.scheduler", description=main.__doc__)
    parser.add_argument("--db", default=None, help="jobs.db path (default: the dashboard's)")
    parser.add_argument("--poll", type=float, default=POLL_S, help="seconds between decisions")
    parser.add_argument("--idle-exit", type=float, default=IDLE_EXIT_S, help="exit after this long with nothing queued")
    args = parser.parse_args(argv)
    return serve(JobStore(args.db), args.poll, args.idle_exit)


if __name__ == "__main__":
    sys.exit(main())
