"""Audit trail: who did what to which job, and when, in `<dashboard home>/audit.db`.

Every launch, stop, resume, delete, clone and settings change made through the pages, the Python API
or `python -m mmcore`, and every chat, compare, evaluation and export of the Models page, adds one row: unix time, the acting identity, the action, the job id (if any)
and a short JSON detail. Rows are only ever added. The trail is a file of its own, so it survives a
job store that had to be restored from a backup, and a deleted job keeps its history.
"""
import json
import sqlite3
import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from mmcore.base.paths import default_home

DB_NAME = "audit.db"
ACTIONS = ("launch", "stop", "resume", "delete", "clone", "settings", "restore", "chat", "compare", "evaluate",
           "export")
BUSY_TIMEOUT_S = 30.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    user TEXT NOT NULL,
    action TEXT NOT NULL,
    job_id INTEGER,
    detail TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS audit_job ON audit (job_id);
"""


@dataclass(frozen=True)
class Entry:
    id: int
    at: float
    user: str
    action: str
    job_id: int | None
    detail: dict


def audit_path(home=None):
    if home is None:
        home = default_home()
    return Path(home) / DB_NAME


def _connect(home):
    path = audit_path(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    conn.executescript(_SCHEMA)
    return conn


def record(user, action, job_id=None, detail=None, home=None):
    """Add one entry; returns its id. `detail` is a small JSON-able dict (what was asked, the outcome)."""
    if action not in ACTIONS:
        raise ValueError(f"unknown audit action {action!r}; expected one of {', '.join(ACTIONS)}")
    with closing(_connect(home)) as conn:
        cur = conn.execute("INSERT INTO audit (at, user, action, job_id, detail) VALUES (?, ?, ?, ?, ?)",
                           (time.time(), str(user), action, job_id, json.dumps(detail or {}, default=str)))
        return cur.lastrowid


def entries(job_id=None, limit=200, home=None):
    """Entries newest first, of one job or of all; `limit=None` for every entry."""
    where, args = ("WHERE job_id = ?", [int(job_id)]) if job_id is not None else ("", [])
    with closing(_connect(home)) as conn:
        rows = conn.execute(f"SELECT id, at, user, action, job_id, detail FROM audit {where} ORDER BY id DESC LIMIT ?",
                            (*args, -1 if limit is None else int(limit))).fetchall()
    return [Entry(r[0], r[1], r[2], r[3], r[4], json.loads(r[5])) for r in rows]
