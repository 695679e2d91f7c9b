"""Runs that go to Slurm as one job array: the runs of a sweep on the Slurm backend.

The act that queues a sweep creates its Slurm runs held (`HELD`, a queue reason the scheduler passes over)
and `release`s them once all exist: one transaction writes each run's array task index (its place in the
sweep, from 0) in the `job_arrays` table of the job store's file and hands them all to the scheduler, so
they start in one round. The scheduler (`mmcore.queue.scheduler`) gives the runs of one array that start in
a round to `mmcore.queue.slurm.SlurmBackend.submit_array`: one `sbatch --array`, task i running run i. Each
run keeps its own job row, log and records; its `external_id` is its task, `ARRAYID_INDEX`, which `squeue`,
`scontrol` and `scancel` take as they take a job id (so stopping one run cancels only its task).
"""
import sqlite3
import time

from mmcore.base.i18n import message
from mmcore.jobs import scheduler_lock
from mmcore.queue import queuetext

SCHEMA = ("CREATE TABLE IF NOT EXISTS job_arrays (job_id INTEGER PRIMARY KEY, array_group INTEGER NOT NULL,"
          " task INTEGER NOT NULL)")
HELD = queuetext.stored([message("reason.array_held")])  # created, waiting for the rest of its array
HELD_MAX_S = 300.0  # a run still held this long (the act that queued it died) is released on its own


def release(store, job_ids):
    """Make the held runs `job_ids` one array (task i = `job_ids[i]`) and hand them to the scheduler at once."""
    ids = [int(j) for j in job_ids]
    if not ids:
        return
    with store._write() as conn:
        conn.execute(SCHEMA)
        conn.executemany("INSERT OR REPLACE INTO job_arrays (job_id, array_group, task) VALUES (?, ?, ?)",
                         [(job_id, ids[0], task) for task, job_id in enumerate(ids)])
        _unhold(conn, ids)
    scheduler_lock.wake(store)


def _unhold(conn, job_ids):
    """Hand the held runs `job_ids` to the scheduler (in the caller's transaction)."""
    conn.executemany("UPDATE jobs SET queue_reason = ? WHERE id = ? AND waiting = 1 AND queue_reason = ?",
                     [(queuetext.SCHEDULER, job_id, HELD) for job_id in job_ids])


def members(store, job_ids):
    """{job id: (array group, task index)} of those of `job_ids` that belong to an array."""
    ids = [int(j) for j in job_ids]
    found = {}
    for start in range(0, len(ids), 500):
        chunk = ids[start:start + 500]
        try:
            with store._connect() as conn:
                rows = conn.execute(f"SELECT job_id, array_group, task FROM job_arrays WHERE job_id IN "
                                    f"({', '.join('?' * len(chunk))})", chunk).fetchall()
        except sqlite3.OperationalError as exc:  # no array was ever made in this store
            if "no such table" in str(exc):
                return {}
            raise
        found.update({r[0]: (r[1], r[2]) for r in rows})
    return found


def release_stale(store, job_ids, max_age=HELD_MAX_S):
    """Let the scheduler take held runs among `job_ids` that were created over `max_age` seconds ago (the act
    that held them ended before releasing them): each then starts as a job of its own. Returns their ids."""
    ids = [int(j) for j in job_ids]
    if not ids:
        return []
    since = time.time() - max_age
    with store._write() as conn:
        stale = [r[0] for r in conn.execute(
            f"SELECT id FROM jobs WHERE id IN ({', '.join('?' * len(ids))}) AND waiting = 1 AND queue_reason = ?"
            " AND created_at < ?", [*ids, HELD, since]).fetchall()]
        _unhold(conn, stale)
    return stale


def index_ranges(tasks):
    """`sbatch --array`'s list for task indices: [0, 1, 2, 5] -> "0-2,5"."""
    tasks = sorted(set(int(t) for t in tasks))
    parts, start = [], None
    for i, task in enumerate(tasks):
        if start is None:
            start = task
        if i + 1 == len(tasks) or tasks[i + 1] != task + 1:
            parts.append(str(start) if start == task else f"{start}-{task}")
            start = None
    return ",".join(parts)


def expand_ranges(text):
    """Task indices of Slurm's array task list as squeue prints it for pending tasks: "0-2,5", "0-9:2", "0-15%4"."""
    tasks = []
    for part in text.split("%")[0].split(","):
        part = part.strip()
        if not part:
            continue
        span, _, step = part.partition(":")
        low, _, high = span.partition("-")
        if not low.isdigit() or (high and not high.isdigit()) or (step and not step.isdigit()):
            continue
        tasks.extend(range(int(low), int(high or low) + 1, int(step or 1) or 1))
    return tasks
