"""A restored job database meets what really happened since its backup: live supervisors and job logs.

A backup is taken when jobs are created, so it holds a job that has run since, or runs now, as `queued`:
put back as it is, the queue would start it a second time. `live_supervisors` finds the supervisors of a
store that run now (`python -m mmcore.jobs.runner JOB --db PATH`: its command line names the store), and
`reconcile` corrects the restored rows before the file is put in place: a job whose supervisor runs is
adopted (running, that supervisor recorded; never started again), a job whose log says it started is
marked with the end its log records (or `lost` when the log has none), and only a job that never
started stays in the queue.
"""
import os
import re
import time

import psutil

from mmcore.base.i18n import message
from mmcore.jobs import jobnote

_FINISHED = re.compile(r"^# finished: (\w+) \(exit code (-?\d+|None)")
_RUNNER = "mmcore.jobs.runner"


def live_supervisors(db_path):
    """{job id: (pid, start time)} of the supervisors running jobs of the store at `db_path`."""
    wanted = os.path.realpath(db_path)
    found = {}
    for proc in psutil.process_iter(["pid", "cmdline", "create_time", "status"]):
        argv = proc.info["cmdline"] or []
        if _RUNNER not in argv or proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        rest = argv[argv.index(_RUNNER) + 1:]
        db = rest[rest.index("--db") + 1] if "--db" in rest[:-1] else None
        if rest and rest[0].isdigit() and db and os.path.realpath(db) == wanted:
            found[int(rest[0])] = (proc.info["pid"], proc.info["create_time"])
    return found


def _log_end(path):
    """(started, status, exit code) from a job's log: whether its trainer was started, and the end its
    supervisor wrote (None, None without a footer)."""
    try:
        with open(path, "rb") as f:
            head = f.read(64 * 1024).decode("utf-8", "replace")
            f.seek(max(0, os.path.getsize(path) - 64 * 1024))
            tail = f.read().decode("utf-8", "replace")
    except OSError:
        return False, None, None
    started = any(line.startswith("# started:") for line in head.splitlines())
    for line in reversed(tail.splitlines()):
        if m := _FINISHED.match(line):
            return started, m.group(1), None if m.group(2) == "None" else int(m.group(2))
    return started, None, None


def reconcile(store, live):
    """Correct the queued and running rows of a restored `store` against `live` supervisors ({job id:
    (pid, start time)}) and the jobs' logs; returns {job id: "adopted" | its new status}."""
    changed = {}
    for job in store.list(status=["queued", "running"], limit=None):
        if job.id in live:
            pid, started = live[job.id]
            store.update(job.id, status="running", waiting=0, queue_reason=None, supervisor_pid=pid,
                         supervisor_start=started, started_at=job.started_at or started)
            changed[job.id] = "adopted"
            continue
        ran, status, code = _log_end(job.log_path) if job.log_path else (False, None, None)
        if not ran and status is None:
            continue  # it never started: it stays in the queue
        ended = os.path.getmtime(job.log_path) if os.path.exists(job.log_path) else time.time()
        status = status if status in ("succeeded", "failed", "stopped", "lost") else "lost"
        store.update(job.id, status=status, exit_code=code, waiting=0, queue_reason=None, ended_at=ended,
                     note=jobnote.stored("note.restored_ended", status=message(f"status.{status}")))
        changed[job.id] = status
    return changed
