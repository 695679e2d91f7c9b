"""A restored job database meets what really happened since its backup: live supervisors and job logs.

A backup is taken when jobs are created, so it holds a job that has run since, or runs now, as `queued`:
put back as it is, the queue would start it a second time. `live_supervisors` finds the supervisors of a
store that run now (`python -m mmcore.jobs.runner JOB --db PATH`: its command line names the store), and
`reconcile` corrects the restored rows before the file is put in place: a job whose supervisor runs is
adopted (running, that supervisor recorded; never started again), a job whose log says it started is
marked with the end its log records (or `lost` when the log has none), and only a job that never
started stays in the queue. A job launched after the backup whose supervisor runs is first copied into
the restored file with its id (`keep_live_jobs`), and the next id is raised past every id in use.
"""
import os
import re
import sqlite3
import time
from contextlib import closing

import psutil

from mmcore.base.i18n import message
from mmcore.jobs import jobnote
from mmcore.jobs.jobstore import JobStore

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


def _rows(db_path, ids):
    """{id: row dict} of jobs `ids` in the database at `db_path` ({} when it cannot be read)."""
    if not ids or not os.path.exists(db_path):
        return {}
    try:
        with closing(sqlite3.connect(db_path, timeout=5)) as conn:
            conn.row_factory = sqlite3.Row
            marks = ", ".join("?" * len(ids))
            return {row["id"]: dict(row) for row in conn.execute(f"SELECT * FROM jobs WHERE id IN ({marks})", list(ids))}
    except sqlite3.Error:
        return {}


def _highest_id(db_path, logs_dir):
    """The highest job id the replaced database held or a job log names (0 when none)."""
    highest = 0
    if os.path.exists(db_path):
        try:
            with closing(sqlite3.connect(db_path, timeout=5)) as conn:
                highest = conn.execute("SELECT COALESCE(MAX(id), 0) FROM jobs").fetchone()[0]
                for (seq,) in conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'jobs'"):
                    highest = max(highest, seq)
        except sqlite3.Error:
            pass
    for name in os.listdir(logs_dir) if os.path.isdir(logs_dir) else ():
        if m := _LOG_NAME.match(name):
            highest = max(highest, int(m.group(1)))
    return highest


_LOG_NAME = re.compile(r"^job-(\d+)(?:-\d+)?\.log$")


def keep_live_jobs(staged_path, current_db, live):
    """Before a restore puts `staged_path` in place of `current_db`: copy into it, with their ids, the rows
    of the `live` jobs the backup does not hold (jobs launched since it was taken: `reconcile` then adopts
    them), and raise its next job id past every id the replaced database, a job log or a live supervisor
    uses, so no id is given twice while its files or processes exist. Returns the ids copied."""
    staged = JobStore(staged_path)  # opened once: brings an older backup's schema up to date
    absent = [job_id for job_id in live if staged.get(job_id) is None]
    rows = _rows(current_db, absent)
    with closing(sqlite3.connect(staged_path, timeout=5)) as conn, conn:
        columns = [c[1] for c in conn.execute("PRAGMA table_info(jobs)")]
        for job_id in absent:
            pid, started = live[job_id]
            row = rows.get(job_id) or {  # the replaced database lost it too: what the supervisor tells
                "id": job_id, "train_type": "unknown", "name": f"job {job_id}", "status": "running",
                "argv": "[]", "created_at": started, "started_at": started, "log_path": staged.log_path_for(job_id)}
            row = {k: v for k, v in row.items() if k in columns}
            conn.execute(f"INSERT INTO jobs ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", list(row.values()))
        highest = max([_highest_id(current_db, staged.logs_dir), *live, 0])
        if conn.execute("UPDATE sqlite_sequence SET seq = MAX(seq, ?) WHERE name = 'jobs'", (highest,)).rowcount == 0:
            conn.execute("INSERT INTO sqlite_sequence (name, seq) VALUES ('jobs', ?)", (highest,))
    return absent
