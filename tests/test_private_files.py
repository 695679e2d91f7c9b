"""The dashboard's home and what it writes there are the OS user's only: folders 0700, files 0600
(docs/SECURITY.md, "Files and code"), whatever the umask, and an older world-readable home is tightened."""
import os
import stat

import pytest

from mmcore.access import audit
from mmcore.base import paths
from mmcore.jobs import scheduler_lock, storeguard
from mmcore.jobs.jobstore import JobStore
from mmcore.logs.savedviews import ViewStore
from mmcore.models.evalstore import EvalStore
from mmcore.queue import queueconf
from mmcore.runs import health


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def home(tmp_path, monkeypatch):
    old = os.umask(0o022)  # the usual umask: without care, 0755 folders and 0644 files
    monkeypatch.setenv(paths.HOME_ENV, str(tmp_path / "home"))
    yield tmp_path / "home"
    os.umask(old)


def test_job_store_home_database_and_logs_are_owner_only(home):
    store = JobStore()
    job_id = store.create("pretrain", "x", {"device": "cpu"}, ["python", "x.py"], "/tmp", {})
    assert store.get(job_id) is not None
    assert mode(home) == 0o700
    assert mode(home / "jobs.db") == 0o600
    for side in ("jobs.db-wal", "jobs.db-shm", "jobs.db-journal"):
        if (home / side).exists():
            assert mode(home / side) == 0o600, side
    assert mode(home / "logs") == 0o700
    ViewStore(store.path)
    assert mode(home / "jobs.db") == 0o600
    backup = storeguard.backup(store.path)
    assert mode(backup.parent) == 0o700 and mode(backup) == 0o600


def test_audit_evaluations_settings_and_scheduler_files_are_owner_only(home):
    audit.record("alice", "launch", 1, {"entry": "api", "request": {}, "result": {}}, home=home)
    assert mode(home) == 0o700 and mode(home / "audit.db") == 0o600
    evals = EvalStore()
    assert mode(home / "evals.db") == 0o600
    conn = evals._connect()  # a WAL database: SQLite gives -wal and -shm the database's mode
    try:
        conn.execute("CREATE TABLE probe (x)")
        conn.commit()
        assert mode(home / "evals.db-wal") == 0o600 and mode(home / "evals.db-shm") == 0o600
    finally:
        conn.close()
    queueconf.save(home, queueconf.load(home))
    assert mode(home / queueconf.FILE_NAME) == 0o600
    health.save_settings(home, health.load_settings(home))
    assert mode(home / health.SETTINGS_FILE) == 0o600
    fd = scheduler_lock.try_lock(home / scheduler_lock.LOCK_NAME)
    try:
        assert mode(home / scheduler_lock.LOCK_NAME) == 0o600
    finally:
        os.close(fd)
    assert not [p for p in home.rglob("*") if mode(p) & 0o077], "something in the home is readable by others"


def test_a_home_an_older_version_left_world_readable_is_tightened(home):
    home.mkdir(parents=True)
    os.chmod(home, 0o755)
    JobStore()  # makes jobs.db
    os.chmod(home, 0o755)
    os.chmod(home / "jobs.db", 0o644)
    (home / "jobs.db-wal").write_bytes(b"")
    os.chmod(home / "jobs.db-wal", 0o644)
    (home / audit.DB_NAME).write_bytes(b"")
    os.chmod(home / audit.DB_NAME, 0o644)
    paths.private_db(home / "jobs.db")  # what JobStore() does first, before SQLite opens (and drops) the -wal
    assert mode(home / "jobs.db-wal") == 0o600
    os.chmod(home, 0o755)
    os.chmod(home / "jobs.db", 0o644)
    JobStore()
    assert mode(home) == 0o700 and mode(home / "jobs.db") == 0o600
    audit.entries(home=home)
    assert mode(home / audit.DB_NAME) == 0o600


def test_trainer_outputs_are_not_touched(tmp_path):
    # Only what the helpers are given changes: its parent folders keep their modes.
    parent = tmp_path / "out"
    parent.mkdir()
    os.chmod(parent, 0o755)
    paths.private_dir(parent / "records")
    assert mode(parent) == 0o755 and mode(parent / "records") == 0o700
