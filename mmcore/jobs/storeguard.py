"""Keeping the job store's history: refuse a missing or damaged database, back it up, restore it.

SQLite would happily treat a deleted or truncated `jobs.db` as a new, empty database: the history
would vanish silently and new jobs would write into old jobs' log files. So before a store is opened,
`check_intact` refuses a database that is missing or empty while job logs exist beside it, and a
file that is not SQLite at all, with `StoreDamaged` explaining the recovery:

- `python -m mmcore restore` lists the backups; `python -m mmcore restore latest` (or a file) puts
  one back (the damaged file is kept aside as `jobs.db.damaged-<time>`);
- or, to start an empty history on purpose, move the `logs/` folder away.

Backups are SQLite online backups (consistent while jobs write), taken when a job is created at most
once per `BACKUP_INTERVAL_S`, keeping the newest `BACKUP_KEEP` in `<home>/backups/`.
"""
import os
import sqlite3
import time
from contextlib import closing
from pathlib import Path

from mmcore.base import paths
from mmcore.base.i18n import t
from mmcore.base.paths import DB_NAME, default_home

BACKUP_DIR = "backups"
BACKUP_INTERVAL_S = float(os.environ.get("MINIMIND_BACKUP_INTERVAL_S", 3600))
BACKUP_KEEP = int(os.environ.get("MINIMIND_BACKUP_KEEP", 24))


class StoreDamaged(RuntimeError):
    """The job database is missing, empty or damaged while history exists; the message says what to do."""


def _recovery(home):
    return t("store.recovery", home=home, logs=Path(home) / "logs")


def _old_logs(logs_dir):
    try:
        return sum(1 for p in Path(logs_dir).glob("job-*.log"))
    except OSError:
        return 0


def check_intact(db_path, logs_dir):
    """Raise StoreDamaged when opening `db_path` would lose history or cannot work; else return."""
    db = Path(db_path)
    home = db.parent
    try:
        size = db.stat().st_size
    except FileNotFoundError:
        size = None
    if not size:
        logs = _old_logs(logs_dir)
        if logs:
            key = "store.missing" if size is None else "store.empty"
            raise StoreDamaged(t(key, db=db, n=logs, logs=logs_dir) + " " + _recovery(home))
        return
    # Read through SQLite, not open()/close(): closing any descriptor of the file drops every POSIX
    # lock this process holds on it, including those of connections other threads keep open, and a
    # writer elsewhere may then remove the WAL index under them ("disk I/O error").
    try:
        with closing(sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True, timeout=5)) as conn:
            conn.execute("PRAGMA schema_version").fetchone()
    except sqlite3.DatabaseError as exc:
        if getattr(exc, "sqlite_errorname", "") == "SQLITE_NOTADB":
            raise StoreDamaged(t("store.not_sqlite", db=db) + " " + _recovery(home)) from None
        if not isinstance(exc, sqlite3.OperationalError):
            raise StoreDamaged(t("store.unreadable", db=db, error=exc)) from None


def problem(home=None):
    """`check_intact` of the dashboard's store as a message, or None when it is fine (cheap: one stat
    and 16 bytes), for pages that show the store's state without opening it."""
    home = Path(home) if home is not None else default_home()
    try:
        check_intact(home / DB_NAME, home / "logs")
    except StoreDamaged as exc:
        return str(exc)
    return None


def explain(exc, db_path=None):
    """A page's message for an error opening or reading the store: what happened and how to recover."""
    if isinstance(exc, StoreDamaged):
        return str(exc)
    if db_path is None:
            db_path = default_home() / DB_NAME
    if isinstance(exc, sqlite3.DatabaseError) and not isinstance(exc, sqlite3.OperationalError):
        return t("store.damaged", db=db_path, error=exc) + " " + _recovery(Path(db_path).parent)
    return t("store.unavailable", db=db_path, error=exc)


def backups(home):
    """Backup files, newest first."""
    folder = Path(home) / BACKUP_DIR
    return sorted(folder.glob("jobs-*.db"), reverse=True) if folder.is_dir() else []


def backup(db_path, dest=None):
    """Copy the live database with SQLite's online backup; returns the backup's path."""
    db = Path(db_path)
    if dest is None:
        folder = db.parent / BACKUP_DIR
        paths.private_dir(folder)
        now = time.time_ns()  # one clock reading, so names sort in time order
        dest = folder / f"jobs-{time.strftime('%Y%m%d-%H%M%S', time.localtime(now // 10**9))}-{now % 10**9:09d}.db"
    tmp = Path(f"{dest}.tmp")
    paths.private_db(tmp)
    with closing(sqlite3.connect(db)) as src, closing(sqlite3.connect(tmp)) as out:
        src.backup(out)
    os.replace(tmp, dest)  # a half-written backup never looks like a backup
    return Path(dest)


def backup_if_due(db_path, interval=None, keep=None):
    """Back up when the newest backup is older than `interval` seconds; prune to the newest `keep`.

    Returns the new backup's path, or None when none was due. Never raises for a failed backup: a
    backup problem must not stop a launch (it is reported by `python -m mmcore backup`).
    """
    interval = BACKUP_INTERVAL_S if interval is None else interval
    keep = BACKUP_KEEP if keep is None else keep
    home = Path(db_path).parent
    existing = backups(home)
    try:
        if existing and time.time() - existing[0].stat().st_mtime < interval:
            return None
        made = backup(db_path)
        for old in backups(home)[keep:]:
            old.unlink(missing_ok=True)
        return made
    except (OSError, sqlite3.Error):
        return None


def restore(db_path, source, adjust=None):
    """Put backup `source` ("latest" = the newest) in place of `db_path`; returns (source, kept-aside path or None).

    The current file, if any, is kept as `jobs.db.damaged-<time>` (with its -wal/-shm files), so a
    restore can itself be undone. The backup is checked before anything is moved. `adjust(path)` may
    correct the restored copy before it is put in place (`mmcore.jobs.restored.reconcile`), so that no
    scheduler ever sees its rows uncorrected.
    """
    db = Path(db_path)
    home = db.parent
    if source == "latest":
        found = backups(home)
        if not found:
            raise FileNotFoundError(f"there is no backup in {home / BACKUP_DIR}")
        source = found[0]
    source = Path(source)
    with closing(sqlite3.connect(f"file:{source}?mode=ro", uri=True)) as conn:
        result = conn.execute("PRAGMA integrity_check").fetchone()[0]
        conn.execute("SELECT COUNT(*) FROM jobs").fetchone()
    if result != "ok":
        raise StoreDamaged(f"the backup {source} is damaged too: {result}")
    staged = backup(source, db.with_name(f"{db.name}.restoring"))
    try:
        if adjust is not None:
            adjust(staged)
    except BaseException:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{staged}{suffix}").unlink(missing_ok=True)
        raise
    aside = None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    if db.exists():
        aside = db.with_name(f"{db.name}.damaged-{stamp}")
        os.replace(db, aside)
    for suffix in ("-wal", "-shm"):
        side = db.with_name(db.name + suffix)
        if side.exists():
            os.replace(side, db.with_name(f"{db.name}.damaged-{stamp}{suffix}"))
    backup(staged, db)  # a plain copy: the staged file may still have a -wal of its adjustments
    for suffix in ("", "-wal", "-shm"):
        Path(f"{staged}{suffix}").unlink(missing_ok=True)
    return source, aside
