"""Audit trail: who did what to which job, and when, in `<dashboard home>/audit.db`.

Every act that changes something (`mmcore.actions`: launch, stop, resume, delete, clone, queue moves and
priorities, pipelines, settings, restore, saved views, and the Models page's chat, compare, evaluate and
export), whether asked from a page, the Python API or `python -m mmcore`, adds one row: unix time, the acting
identity, the action, the job id (if any) and a JSON detail of one shape, `{"entry": "page" | "api" |
"cli", "request": {...}, "result": {...}}` (what was asked, what came of it). Only `mmcore.actions.core`
writes rows, and `record_system` what the dashboard did by itself (a guard that stopped a run); rows are only
ever added. The trail is a file of its own, so it survives a job store that had
to be restored from a backup, and a deleted job keeps its history.

No act without its record: `check` opens the trail before an act runs, and a trail that cannot be opened or
written (`AuditUnavailable`) refuses the act. Refused attempts are kept too, in a table of their own
(`record_refusal`, `refusals`: who, what, why), for admins. A damaged trail is never replaced silently:
`repair` (an admin's act, `python -m mmcore audit repair`) keeps it aside and starts a new one.
"""
import json
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from mmcore.base import paths
from mmcore.base.i18n import MessageError, message
from mmcore.base.paths import default_home

DB_NAME = "audit.db"
ACTIONS = ("launch", "stop", "guard_stop", "resume", "delete", "clone", "move", "priority", "queue_pipeline", "stop_pipeline",
           "retry_pipeline", "settings", "restore", "save_view", "delete_view", "chat", "compare", "evaluate", "export",
           "audit_repair", "upload", "rescore", "prompts_export", "annotate", "sweep", "stop_sweep",
           "retry_sweep", "notify_prefs")
#: Where an act was asked from: a page, `mmcore.api`, or `python -m mmcore`.
ENTRIES = ("page", "api", "cli")
#: The entry of what no person asked for: the dashboard acting by itself (`record_system`).
SYSTEM = "system"
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
CREATE TABLE IF NOT EXISTS refusals (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    user TEXT NOT NULL,
    action TEXT NOT NULL,
    job_id INTEGER,
    entry TEXT NOT NULL,
    request TEXT NOT NULL DEFAULT '{}',
    reason TEXT NOT NULL
);
"""


class AuditUnavailable(MessageError):
    """The audit trail cannot be opened or written (a damaged or unreadable audit.db): no act may run."""


@dataclass(frozen=True)
class Refusal:
    """A refused attempt: who asked for what (from where), and why it was refused."""
    id: int
    at: float
    user: str
    action: str
    job_id: int | None
    entry: str
    request: dict
    reason: str


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
    try:
        paths.private_db(path)
        conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    except (OSError, sqlite3.Error) as exc:
        raise AuditUnavailable(message("audit.unavailable", path=str(path), error=str(exc))) from exc
    try:
        conn.executescript(_SCHEMA)
    except sqlite3.Error as exc:
        conn.close()
        raise AuditUnavailable(message("audit.unavailable", path=str(path), error=str(exc))) from exc
    return conn


def _run(home, work):
    """`work(conn)` on the trail of `home`; AuditUnavailable when it cannot be done (noise, a full disk...)."""
    conn = _connect(home)
    try:
        return work(conn)
    except sqlite3.Error as exc:
        raise AuditUnavailable(message("audit.unavailable", path=str(audit_path(home)), error=str(exc))) from exc
    finally:
        conn.close()


def check(home=None):
    """Raise AuditUnavailable unless the trail of `home` can be read and written now: asked before every
    act, so that an act never runs without its record."""
    def probe(conn):
        conn.execute("SELECT max(id) FROM audit").fetchone()
        conn.execute("BEGIN IMMEDIATE")  # the write lock can be had: the file is writable
        conn.execute("ROLLBACK")
    _run(home, probe)


def repair(home=None):
    """Keep a damaged trail aside (`audit.db.damaged-<time>`, with its -wal/-shm) and start a new one;
    returns where it was kept, or None when the trail is intact (nothing is moved)."""
    try:
        check(home)
        return None
    except AuditUnavailable as exc:
        cause = exc.__cause__
        if isinstance(cause, sqlite3.OperationalError) and ("locked" in str(cause) or "busy" in str(cause)):
            raise  # busy, not damaged: nothing to set aside
    path = audit_path(home)
    aside = path.with_name(f"{path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
    for suffix in ("", "-wal", "-shm", "-journal"):
        if os.path.exists(f"{path}{suffix}"):
            os.replace(f"{path}{suffix}", f"{aside}{suffix}")
    check(home)  # the new, empty trail
    return aside


def record(user, action, job_id, detail, home=None):
    """Add one entry; returns its id. `detail`: {"entry": one of ENTRIES, "request": {...}, "result": {...}},
    small JSON-able dicts."""
    if action not in ACTIONS:
        raise ValueError(f"unknown audit action {action!r}; expected one of {', '.join(ACTIONS)}")
    if (not isinstance(detail, dict) or tuple(sorted(detail)) != tuple(sorted(DETAIL_KEYS))
            or detail["entry"] not in (*ENTRIES, SYSTEM) or not all(isinstance(detail[k], dict) for k in ("request", "result"))):
        raise ValueError(f"an audit detail is {{'entry': one of {ENTRIES}, 'request': {{...}}, 'result': {{...}}}}, "
                         f"got {detail!r}")
    return _run(home, lambda conn: conn.execute(
        "INSERT INTO audit (at, user, action, job_id, detail) VALUES (?, ?, ?, ?, ?)",
        (time.time(), str(user), action, job_id, json.dumps(detail, default=str))).lastrowid)


def record_system(actor, action, job_id, request, result, home=None):
    """Add the entry of something the dashboard did by itself: `actor` names what acted ("system:guard"),
    `request` what made it act, `result` what came of it; the entry is `SYSTEM`."""
    return record(actor, action, job_id, {"entry": SYSTEM, "request": request, "result": result}, home)


def record_refusal(user, action, job_id, entry, request, reason, home=None):
    """Keep a refused attempt: `user` asked for `action` (from `entry`, with `request`) and was told `reason`."""
    return _run(home, lambda conn: conn.execute(
        "INSERT INTO refusals (at, user, action, job_id, entry, request, reason) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (time.time(), str(user), str(action), job_id, str(entry), json.dumps(request, default=str),
         str(reason))).lastrowid)


def refusals(limit=200, home=None):
    """Refused attempts, newest first; `limit=None` for all."""
    rows = _run(home, lambda conn: conn.execute(
        "SELECT id, at, user, action, job_id, entry, request, reason FROM refusals ORDER BY id DESC LIMIT ?",
        (-1 if limit is None else int(limit),)).fetchall())
    return [Refusal(r[0], r[1], r[2], r[3], r[4], r[5], json.loads(r[6]), r[7]) for r in rows]


def entries(job_id=None, limit=200, home=None):
    """Entries newest first, of one job or of all; `limit=None` for every entry. A job's entries include
    the acts on its pipeline that named it: the queueing that made it a stage, a stop that stopped it."""
    where, args = ("", [])
    if job_id is not None:
        where = ("WHERE job_id = ? OR (action IN ('queue_pipeline', 'stop_pipeline') AND ("
                 "EXISTS (SELECT 1 FROM json_each(detail, '$.result.jobs') WHERE value = ?) OR "
                 "EXISTS (SELECT 1 FROM json_each(detail, '$.result.stopped') WHERE value = ?)))")
        args = [int(job_id)] * 3
    rows = _run(home, lambda conn: conn.execute(
        f"SELECT id, at, user, action, job_id, detail FROM audit {where} ORDER BY id DESC LIMIT ?",
        (*args, -1 if limit is None else int(limit))).fetchall())
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
