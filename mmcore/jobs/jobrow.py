"""The job row: its statuses, its columns (`Job`) and the migrations that build its SQLite table.

`mmcore.jobs.jobstore.JobStore` reads and writes rows of this shape; pages and the queue read `Job`s.
"""
import shlex
import time
from dataclasses import dataclass, fields

# `blocked`: a pipeline stage held back because an earlier stage failed or was stopped.
STATUSES = ("queued", "running", "succeeded", "failed", "stopped", "lost", "blocked")
ACTIVE_STATUSES = ("queued", "running")
FINISHED_STATUSES = ("succeeded", "failed", "stopped", "lost")

# Forward migrations: step i takes a database from user_version i to i + 1. Append new steps; never
# edit a released one (users' databases already ran it).
MIGRATIONS = (
    """
    CREATE TABLE jobs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        train_type TEXT NOT NULL,
        name TEXT NOT NULL DEFAULT '',
        status TEXT NOT NULL DEFAULT 'queued',
        params TEXT NOT NULL DEFAULT '{}',
        argv TEXT NOT NULL DEFAULT '[]',
        cwd TEXT NOT NULL DEFAULT '',
        env TEXT NOT NULL DEFAULT '{}',
        log_path TEXT NOT NULL DEFAULT '',
        supervisor_pid INTEGER,
        supervisor_start REAL,
        trainer_pid INTEGER,
        trainer_start REAL,
        exit_code INTEGER,
        created_at REAL NOT NULL,
        started_at REAL,
        ended_at REAL,
        user TEXT NOT NULL DEFAULT '',
        host TEXT NOT NULL DEFAULT ''
    );
    """,
    """
    ALTER TABLE jobs ADD COLUMN note TEXT;
    ALTER TABLE jobs ADD COLUMN stop_requested REAL;
    ALTER TABLE jobs ADD COLUMN stop_grace REAL;
    CREATE INDEX jobs_status ON jobs (status);
    CREATE INDEX jobs_type ON jobs (train_type);
    """,
    """
    ALTER TABLE jobs ADD COLUMN final_progress TEXT;
    """,
    # The queue (mmcore.queue.scheduler), backends (mmcore.queue.backends) and pipelines (mmcore.queue.pipelines).
    """
    ALTER TABLE jobs ADD COLUMN backend TEXT NOT NULL DEFAULT 'local';
    ALTER TABLE jobs ADD COLUMN external_id TEXT;
    ALTER TABLE jobs ADD COLUMN resources TEXT;
    ALTER TABLE jobs ADD COLUMN assigned_gpus TEXT;
    ALTER TABLE jobs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN queue_pos REAL;
    ALTER TABLE jobs ADD COLUMN queue_reason TEXT;
    ALTER TABLE jobs ADD COLUMN waiting INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN dispatched_at REAL;
    ALTER TABLE jobs ADD COLUMN pipeline_id INTEGER;
    ALTER TABLE jobs ADD COLUMN stage INTEGER;
    ALTER TABLE jobs ADD COLUMN depends_on INTEGER;
    CREATE INDEX jobs_waiting ON jobs (waiting);
    CREATE INDEX jobs_pipeline ON jobs (pipeline_id);
    CREATE TABLE pipelines (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        name TEXT NOT NULL DEFAULT '',
        template TEXT NOT NULL DEFAULT '',
        user TEXT NOT NULL DEFAULT '',
        created_at REAL NOT NULL
    );
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)

# Stored as JSON text; SQL NULL reads back as None.
JSON_COLUMNS = ("params", "argv", "env", "final_progress", "resources", "assigned_gpus")


@dataclass
class Job:
    """One job row, with JSON columns decoded. Times are unix seconds (float) or None."""
    id: int
    train_type: str
    name: str
    status: str
    params: dict
    argv: list
    cwd: str
    env: dict
    log_path: str
    created_at: float
    user: str = ""
    host: str = ""
    supervisor_pid: int | None = None
    supervisor_start: float | None = None
    trainer_pid: int | None = None
    trainer_start: float | None = None
    exit_code: int | None = None
    started_at: float | None = None
    ended_at: float | None = None
    note: str | None = None
    stop_requested: float | None = None  # unix time of the stop request, None when none was made
    stop_grace: float | None = None  # seconds between SIGTERM and SIGKILL for that request
    # The job's progress summary as the Jobs table shows it (see `progress.final_progress`), taken
    # from its log once when it ended; None for jobs that ended before it was stored, or whose log
    # could not be parsed then.
    final_progress: dict | None = None
    # Where it runs and how it waits (see mmcore.queue.scheduler): `backend` "local" or "slurm";
    # `external_id` the backend's own id (the Slurm job id); `resources` what it asks for
    # ({"gpus": N} or {"gpu_ids": [...]}; {} = a CPU slot); `assigned_gpus` what it got;
    # `waiting` 1 while the queue holds it; `queue_reason` why it waits (None once started).
    backend: str = "local"
    external_id: str | None = None
    resources: dict | None = None
    assigned_gpus: list | None = None
    priority: int = 0
    queue_pos: float | None = None
    queue_reason: str | None = None
    waiting: int = 0
    dispatched_at: float | None = None
    pipeline_id: int | None = None  # the pipeline this job is a stage of, with its 0-based stage
    stage: int | None = None
    depends_on: int | None = None  # the job that must succeed before this one may start

    @property
    def type(self):
        """Alias of `train_type`."""
        return self.train_type

    @property
    def active(self):
        """True while the job is queued or running."""
        return self.status in ACTIVE_STATUSES

    @property
    def finished(self):
        """True once the job has ended (succeeded, failed, stopped or lost)."""
        return self.status in FINISHED_STATUSES

    @property
    def in_queue(self):
        """True while the queue holds the job (queued and not yet handed to its backend)."""
        return self.status == "queued" and bool(self.waiting)

    @property
    def duration(self):
        """Seconds from start to end (to now while running), or None before it started."""
        if self.started_at is None:
            return None
        end = self.ended_at if self.ended_at is not None else time.time()
        return max(0.0, end - self.started_at)

    @property
    def command(self):
        """The argv as one shell-quoted line, for display."""
        return shlex.join(self.argv)


COLUMNS = tuple(f.name for f in fields(Job))
UPDATABLE = frozenset(COLUMNS) - {"id"}
