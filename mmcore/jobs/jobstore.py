"""SQLite job store: one row per training job, shared by the dashboard and the job supervisors.

The database is one file, `<home>/jobs.db`, where home is `$MINIMIND_DASHBOARD_HOME` or
`<repo>/runs`; each job's log is `<home>/logs/job-<id>.log`. Several processes use it at once (the
web server's sessions and one `mmcore.jobs.runner` per job), so it runs in WAL mode with a busy timeout,
every write is a short `BEGIN IMMEDIATE` transaction, and every call opens its own connection (safe
across threads and forked processes).

The store also notices jobs whose supervisor died without recording an ending: `reconcile()` turns
such `queued`/`running` rows into `lost`. Reads do not reconcile (a probe of every active job's
process on every read adds up): the app reconciles once per page run (streamlit_app.py), the live
watch now and then (`mmcore.jobs.change_watch`), and so do the actions that act on a job's state (stop, delete,
resume) and each `mmcore.api` call.
"""
import getpass
import json
import os
import socket
import sqlite3
import time
from contextlib import contextmanager
from pathlib import Path

from mmcore.base import paths
from mmcore.base.paths import DB_NAME, default_home
from mmcore.base.process_identity import process_problem
from mmcore.jobs import diskspace, jobnote, storeguard
from mmcore.jobs.jobrow import COLUMNS, JSON_COLUMNS, MIGRATIONS, SCHEMA_VERSION, STATUSES, UPDATABLE, Job

# A queued row whose supervisor has not registered by then was never launched (the launching process
# died between writing the row and starting the runner).
QUEUED_GRACE_S = 30.0
BUSY_TIMEOUT_MS = 30_000


def _os_user():
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no passwd entry for this uid (some containers)
        return str(os.getuid())


class JobStore:
    """The jobs table of one SQLite file.

    `path` is the database file (a folder means `<folder>/jobs.db`); None uses `default_home()`.
    Logs go to `logs/` beside the database. Folders are created on first use.
    """

    def __init__(self, path=None, queued_grace=QUEUED_GRACE_S):
        db = Path(path) if path is not None else default_home() / DB_NAME
        if db.is_dir():
            db = db / DB_NAME
        self.path = str(db.resolve())
        self.home = Path(self.path).parent
        self.logs_dir = self.home / "logs"
        self.queued_grace = queued_grace
        # A missing/empty file beside old logs, or a file that is not SQLite: refuse rather than start
        # an empty history (StoreDamaged says how to restore a backup).
        storeguard.check_intact(self.path, self.logs_dir)
        paths.private_db(self.path)  # the home folder 0700, jobs.db (and its -wal/-shm) 0600
        self._migrate()

    def __repr__(self):
        return f"JobStore({self.path!r})"

    # -- connection and schema ------------------------------------------------------------

    @contextmanager
    def _connect(self):
        # Autocommit mode: transactions are opened explicitly, so writers take the write lock up
        # front (BEGIN IMMEDIATE) and never deadlock upgrading a read lock.
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        try:
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA synchronous = NORMAL")
            yield conn
        finally:
            conn.close()

    @staticmethod
    @contextmanager
    def _transaction(conn):
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    @contextmanager
    def _write(self):
        with self._connect() as conn, self._transaction(conn):
            yield conn

    def _migrate(self):
        with self._connect() as conn:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise RuntimeError(
                    f"{self.path} has schema version {version}, newer than this dashboard's "
                    f"{SCHEMA_VERSION}; upgrade the dashboard to use it")
            if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                conn.execute("PRAGMA journal_mode = WAL")  # persistent: stored in the file
            if version == SCHEMA_VERSION:
                return
            with self._transaction(conn):
                # Another process may have migrated while we waited for the lock: read again.
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                for step in range(version, SCHEMA_VERSION):
                    for statement in MIGRATIONS[step].split(";"):
                        if statement.strip():
                            conn.execute(statement)
                    conn.execute(f"PRAGMA user_version = {step + 1}")

    def schema_version(self):
        """The database's `PRAGMA user_version`."""
        with self._connect() as conn:
            return conn.execute("PRAGMA user_version").fetchone()[0]

    # -- rows -------------------------------------------------------------------------------

    @staticmethod
    def _job(row):
        values = dict(row)
        for column in JSON_COLUMNS:
            if values[column] is not None:
                values[column] = json.loads(values[column])
        return Job(**{name: values[name] for name in COLUMNS})

    @staticmethod
    def _encode(fields_):
        unknown = sorted(set(fields_) - UPDATABLE)
        if unknown:
            raise ValueError(f"unknown job field(s): {', '.join(unknown)}; known: {', '.join(sorted(UPDATABLE))}")
        if "status" in fields_ and fields_["status"] not in STATUSES:
            raise ValueError(f"unknown status {fields_['status']!r}; expected one of {', '.join(STATUSES)}")
        return {k: json.dumps(v) if k in JSON_COLUMNS and v is not None else v for k, v in fields_.items()}

    def log_path_for(self, job_id):
        """Where job `job_id` writes its log."""
        return str(self.logs_dir / f"job-{job_id}.log")

    def create(self, train_type, name, params, argv, cwd, env, user=None, host=None, with_row=None, **queue_fields):
        """Insert a `queued` job and return its id. `user`/`host` default to this process's.

        `queue_fields` sets further columns at once (backend, resources, waiting, pipeline_id, ...).
        `with_row(conn, job_id)`: writes that belong with the job (its guards), made in the same transaction:
        the job's row exists with them or, when they fail, not at all.
        """
        if not isinstance(train_type, str) or not train_type:
            raise ValueError("train_type must be a non-empty string")
        if not isinstance(argv, (list, tuple)) or not argv or not all(isinstance(a, str) for a in argv):
            raise ValueError(f"argv must be a non-empty list of strings, got {argv!r}")
        if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            raise ValueError(f"env must map strings to strings, got {env!r}")
        if not isinstance(params, dict):
            raise ValueError(f"params must be a dict, got {type(params).__name__}")
        paths.private_dir(self.logs_dir)
        with self._write() as conn:
            cur = conn.execute(
                "INSERT INTO jobs (train_type, name, status, params, argv, cwd, env, created_at, user, host)"
                " VALUES (?, ?, 'queued', ?, ?, ?, ?, ?, ?, ?)",
                (train_type, name or "", json.dumps(params), json.dumps(list(argv)), str(cwd),
                 json.dumps(env), time.time(), user if user is not None else _os_user(),
                 host if host is not None else socket.gethostname()))
            job_id = cur.lastrowid
            extra = {"queue_pos": float(job_id), **self._encode(queue_fields)}
            assignments = ", ".join(f"{k} = ?" for k in extra)
            conn.execute(f"UPDATE jobs SET log_path = ?, {assignments} WHERE id = ?",
                         (self._fresh_log_path(job_id), *extra.values(), job_id))
            if with_row is not None:
                with_row(conn, job_id)
        storeguard.backup_if_due(self.path)
        return job_id

    def _fresh_log_path(self, job_id):
        """`log_path_for(job_id)`, or `job-<id>-<n>.log` when a file of that name exists already
        (ids restarted in a restored or replaced database): a new job never appends to an old log."""
        path = Path(self.log_path_for(job_id))
        n = 1
        while path.exists():
            n += 1
            path = self.logs_dir / f"job-{job_id}-{n}.log"
        return str(path)

    def get(self, job_id):
        """The job with this id, or None when there is none."""
        with self._connect() as conn:
            row = conn.execute("SELECT * FROM jobs WHERE id = ?", (int(job_id),)).fetchone()
        return self._job(row) if row is not None else None

    @staticmethod
    def _where(status, train_type):
        clauses, args = [], []
        for column, value in (("status", status), ("train_type", train_type)):
            if value is None:
                continue
            values = [value] if isinstance(value, str) else list(value)
            if column == "status":
                bad = [v for v in values if v not in STATUSES]
                if bad:
                    raise ValueError(f"unknown status {bad[0]!r}; expected one of {', '.join(STATUSES)}")
            clauses.append(f"{column} IN ({', '.join('?' * len(values))})")
            args += values
        return (" WHERE " + " AND ".join(clauses) if clauses else ""), args

    def list(self, status=None, train_type=None, limit=100, offset=0):
        """Jobs newest first; `status`/`train_type` filter by one value or a list of values.

        `limit=None` returns every matching job.
        """
        where, args = self._where(status, train_type)
        sql = f"SELECT * FROM jobs{where} ORDER BY id DESC LIMIT ? OFFSET ?"
        with self._connect() as conn:
            rows = conn.execute(sql, (*args, -1 if limit is None else int(limit), int(offset))).fetchall()
        return [self._job(row) for row in rows]

    def count(self, status=None, train_type=None):
        """How many jobs match the same filters as `list`."""
        where, args = self._where(status, train_type)
        with self._connect() as conn:
            return conn.execute(f"SELECT COUNT(*) FROM jobs{where}", args).fetchone()[0]

    def counts(self):
        """Number of jobs per status, every status present (zero when none)."""
        with self._connect() as conn:
            rows = conn.execute("SELECT status, COUNT(*) FROM jobs GROUP BY status").fetchall()
        result = dict.fromkeys(STATUSES, 0)
        result.update({status: n for status, n in rows})
        return result

    def update(self, job_id, **fields_):
        """Set columns of one job. Unknown columns raise ValueError, an unknown id KeyError."""
        values = self._encode(fields_)
        if not values:
            return
        assignments = ", ".join(f"{k} = ?" for k in values)
        with self._write() as conn:
            cur = conn.execute(f"UPDATE jobs SET {assignments} WHERE id = ?", (*values.values(), int(job_id)))
        if cur.rowcount == 0:
            raise KeyError(f"no job with id {job_id}")

    def transition(self, job_id, from_status, *, stop_unasked=False, **fields_):
        """Set columns only while the job's status is one of `from_status` (and, with `stop_unasked`, no stop was
        asked for yet); True when it was.

        The read-check-write happens in one transaction, so two processes racing to change the same
        job (a supervisor finishing, a reader marking it lost; two watchers stopping it) cannot overwrite
        each other: one of them wins, once.
        """
        values = self._encode(fields_)
        states = [from_status] if isinstance(from_status, str) else list(from_status)
        assignments = ", ".join(f"{k} = ?" for k in values) or "status = status"
        unasked = " AND stop_requested IS NULL" if stop_unasked else ""
        with self._write() as conn:
            cur = conn.execute(
                f"UPDATE jobs SET {assignments} WHERE id = ? AND status IN ({', '.join('?' * len(states))}){unasked}",
                (*values.values(), int(job_id), *states))
        return cur.rowcount == 1

    def update_waiting(self, job_id, **fields_):
        """Set columns of a job only while the queue holds it (queued and waiting); True when it did.

        Conditional in one statement, so the scheduler starting a job and a user cancelling or
        reordering it cannot both win: nothing starts twice, nothing cancelled starts.
        """
        values = self._encode(fields_)
        assignments = ", ".join(f"{k} = ?" for k in values)
        with self._write() as conn:
            cur = conn.execute(f"UPDATE jobs SET {assignments} WHERE id = ? AND status = 'queued' AND waiting = 1",
                               (*values.values(), int(job_id)))
        return cur.rowcount == 1

    def cancel_waiting(self, job_id):
        """Take a waiting job out of the queue: it ends as stopped. False when it was not waiting."""
        now = time.time()
        return self.update_waiting(job_id, status="stopped", waiting=0, ended_at=now, stop_requested=now,
                                   queue_reason=None, note=jobnote.stored("note.cancelled_queued"))

    def delete(self, job_id):
        """Remove the row (not its log; see `runner.delete`). An unknown id raises KeyError."""
        with self._write() as conn:
            cur = conn.execute("DELETE FROM jobs WHERE id = ?", (int(job_id),))
        if cur.rowcount == 0:
            raise KeyError(f"no job with id {job_id}")

    # -- reconciliation -----------------------------------------------------------------------

    def reconcile(self):
        """Mark `lost` every queued/running job whose supervisor is gone (`failed` with "no space left on
        device" when its log ends saying the disk filled up); return their ids.

        Gone: its pid is dead or a zombie, or now belongs to a process with another start time (pid
        reuse). A queued job whose supervisor never registered within `queued_grace` seconds of its
        creation (or dispatch by the queue) is lost too. Costs one indexed query when nothing is active.
        """
        # Jobs the queue holds have no supervisor yet, and Slurm jobs never have one (their state
        # comes from Slurm: mmcore.queue.backends); a dispatched job's grace starts when it was dispatched.
        with self._connect() as conn:
            rows = conn.execute(
                "SELECT id, status, supervisor_pid, supervisor_start, log_path,"
                " COALESCE(dispatched_at, created_at) AS created_at FROM jobs"
                " WHERE status IN ('queued', 'running') AND waiting = 0 AND backend = 'local'").fetchall()
        if not rows:
            return []
        now = time.time()
        lost = []
        for row in rows:
            pid = row["supervisor_pid"]
            if pid is None:
                if row["status"] == "queued" and now - row["created_at"] <= self.queued_grace:
                    continue
                note = jobnote.stored("note.supervisor_never_started")
            else:
                problem = process_problem(pid, row["supervisor_start"])
                if problem is None:
                    continue
                if problem == "reused":
                    note = jobnote.stored("note.supervisor_pid_reused", pid=pid)
                else:
                    note = jobnote.stored("note.supervisor_exited", pid=pid)
            # A supervisor that could not record the end for want of space: its log says what happened.
            status = "lost"
            if pid is not None and row["status"] == "running" and diskspace.log_says_no_space(row["log_path"]):
                status, note = "failed", jobnote.stored("note.no_space")
            # Conditional on the state we read: a supervisor that finished in between wins.
            with self._write() as conn:
                cur = conn.execute(
                    "UPDATE jobs SET status = ?, ended_at = ?, note = ?"
                    " WHERE id = ? AND status = ? AND supervisor_pid IS ?",
                    (status, now, note, row["id"], row["status"], pid))
            if cur.rowcount:
                lost.append(row["id"])
        return lost
