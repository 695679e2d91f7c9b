"""Audit trail: who did what to which job, and when, in `<dashboard home>/audit.db`.

Every act that changes something (`mmcore.actions`: launch, stop, resume, delete, clone, queue moves and
priorities, pipelines, settings, restore, saved views, and the Models page's chat, compare, evaluate and
export), whether asked from a page, the Python API or `python -m mmcore`, adds one row: unix time, the acting
identity, the action, the job id (if any) and a JSON detail of one shape, `{"entry": "page" | "api" |
"cli", "request": {...}, "result": {...}}` (what was asked, what came of it). Only `mmcore.actions.core`
writes rows; rows are only ever added. The trail is a file of its own, so it survives a job store that had
to be restored from a backup, and a deleted job keeps its history.
"""
import json
import sqlite3
import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from mmcore.base import paths
from mmcore.base.paths import default_home

DB_NAME = "audit.db"
ACTIONS = ("launch", "stop", "resume", "delete", "clone", "move", "priority", "queue_pipeline", "stop_pipeline",
           "retry_pipeline", "settings", "restore", "save_view", "delete_view", "chat", "compare", "evaluate", "export")
#: Where an act was asked from: a page, `mmcore.api`, or `python -m mmcore`.
ENTRIES = ("page", "api", "cli")
#: The keys of every detail: where it was asked from, what was asked, what came of it.
DETAIL_KEYS = ("entry", "request", "result")
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
    paths.private_db(path)
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    conn.executescript(_SCHEMA)
    return conn


def record(user, action, job_id, detail, home=None):
    """Add one entry; returns its id. `detail`: {"entry": one of ENTRIES, "request": {...}, "result": {...}},
    small JSON-able dicts."""
    if action not in ACTIONS:
        raise ValueError(f"unknown audit action {action!r}; expected one of {', '.join(ACTIONS)}")
    if (not isinstance(detail, dict) or tuple(sorted(detail)) != tuple(sorted(DETAIL_KEYS))
            or detail["entry"] not in ENTRIES or not all(isinstance(detail[k], dict) for k in ("request", "result"))):
        raise ValueError(f"an audit detail is {{'entry': one of {ENTRIES}, 'request': {{...}}, 'result': {{...}}}}, "
                         f"got {detail!r}")
    with closing(_connect(home)) as conn:
        cur = conn.execute("INSERT INTO audit (at, user, action, job_id, detail) VALUES (?, ?, ?, ?, ?)",
                           (time.time(), str(user), action, job_id, json.dumps(detail, default=str)))
        return cur.lastrowid


def entries(job_id=None, limit=200, home=None):
    """Entries newest first, of one job or of all; `limit=None` for every entry."""
    where, args = ("WHERE job_id = ?", [int(job_id)]) if job_id is not None else ("", [])
    with closing(_connect(home)) as conn:
        rows = conn.execute(f"SELECT id, at, user, action, job_id, detail FROM audit {where} ORDER BY id DESC LIMIT ?",
                            (*args, -1 if limit is None else int(limit))).fetchall()
    return [Entry(r[0], r[1], r[2], r[3], r[4], json.loads(r[5])) for r in rows]


def detail_text(detail):
    """An entry's detail on one line: what was asked and what came of it, then where from (a launch's
    full values left out); an entry written before details had one shape, as its pairs."""
    if isinstance(detail, dict) and set(detail) == set(DETAIL_KEYS):
        pairs = {**detail["request"], **detail["result"]}
        suffix = f" ({detail['entry']})"
    else:
        pairs, suffix = detail, ""
    return ", ".join(f"{k}={v}" for k, v in pairs.items() if k != "values") + suffix
