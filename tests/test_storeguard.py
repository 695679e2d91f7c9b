"""The job store never loses history silently: missing, empty or damaged databases, backups, restore."""
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
from _runner_helpers import alive, script, wait_for

from mmcore.base.paths import ROOT
from mmcore.jobs import runner, storeguard
from mmcore.jobs.jobstore import JobStore


def make_history(home, jobs=2):
    store = JobStore(home / "jobs.db")
    for i in range(jobs):
        job_id = store.create("pretrain", f"run {i}", {}, ["true"], "/tmp", {})
        with open(store.get(job_id).log_path, "w") as log:
            log.write(f"# job {job_id}\n")
    return store


def cli(home, *args):
    env = {**os.environ, "MINIMIND_DASHBOARD_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "mmcore", *args], cwd=ROOT, env=env, capture_output=True, text=True)


@pytest.mark.parametrize("damage", ["missing", "empty", "garbage"])
def test_a_lost_or_damaged_database_is_refused_not_recreated(tmp_path, damage):
    home = tmp_path / "home"
    make_history(home)
    db = home / "jobs.db"
    for side in ("jobs.db-wal", "jobs.db-shm"):
        (home / side).unlink(missing_ok=True)
    if damage == "missing":
        db.unlink()
    elif damage == "empty":
        db.write_bytes(b"")
    else:
        db.write_bytes(b"\x00garbage" * 512)
    with pytest.raises(storeguard.StoreDamaged, match="restore latest"):
        JobStore(db)
    assert not db.exists() if damage == "missing" else db.stat().st_size in (0, 4096)  # untouched
    listed = cli(home, "list")
    assert listed.returncode == 1 and "python -m mmcore restore" in listed.stderr and "Traceback" not in listed.stderr


def test_a_fresh_home_still_starts_an_empty_store(tmp_path):
    assert JobStore(tmp_path / "new" / "jobs.db").list() == []


def test_backup_and_restore_bring_the_history_back(tmp_path):
    home = tmp_path / "home"
    store = make_history(home, jobs=3)  # the first create made a backup holding job 1 only
    made = storeguard.backup(store.path)
    assert storeguard.backups(home)[0] == made
    (home / "jobs.db").write_bytes(b"")
    for side in ("jobs.db-wal", "jobs.db-shm"):
        (home / side).unlink(missing_ok=True)
    listed = cli(home, "restore")
    assert str(made) in listed.stdout
    restored = cli(home, "restore", "latest")
    assert restored.returncode == 0, restored.stderr
    assert "kept as" in restored.stdout and list(home.glob("jobs.db.damaged-*"))
    assert [j.name for j in JobStore(home / "jobs.db").list()] == ["run 2", "run 1", "run 0"]
    assert "restore" in cli(home, "history").stdout


def test_a_new_job_never_appends_to_an_old_log(tmp_path):
    home = tmp_path / "home"
    store = make_history(home, jobs=1)
    early = storeguard.backup(store.path)  # holds job 1 only
    store.create("pretrain", "run 1", {}, ["true"], "/tmp", {})
    with open(store.get(2).log_path, "w") as log:
        log.write("job 2's own log\n")
    storeguard.restore(store.path, early)  # ids restart after 1
    again = JobStore(home / "jobs.db")
    new_id = again.create("pretrain", "after restore", {}, ["true"], "/tmp", {})
    assert new_id == 2 and again.get(2).log_path.endswith("job-2-2.log")
    assert (home / "logs" / "job-2.log").read_text() == "job 2's own log\n"


def test_the_supervisor_keeps_running_when_its_row_disappears(tmp_path):
    store = JobStore(tmp_path / "home" / "jobs.db")
    argv = script(tmp_path, "sleep.py", """
        import signal, sys, time
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
        print("started", flush=True)
        time.sleep(120)
    """)
    job_id = store.create("pretrain", "keeps going", {}, argv, str(tmp_path), {})
    runner.launch(store, job_id)
    job = wait_for(lambda: (j := store.get(job_id)) and j.trainer_pid and j, what="the trainer to start")
    with sqlite3.connect(store.path) as conn:  # the row vanishes (a replaced database), no stop request
        conn.execute("DELETE FROM jobs WHERE id = ?", (job_id,))
    try:
        time.sleep(runner.POLL_S * 6)  # several of the supervisor's polls
        assert alive(job.trainer_pid), "the supervisor stopped a job nobody asked to stop"
    finally:
        os.kill(job.supervisor_pid, signal.SIGTERM)
        wait_for(lambda: not alive(job.trainer_pid), what="the trainer to end")


@pytest.mark.parametrize("page", ["pages/jobs.py", "pages/logs.py", "pages/train.py"])
@pytest.mark.parametrize("damage", ["empty", "garbage"])
def test_every_page_explains_a_damaged_store_without_a_traceback(tmp_path, monkeypatch, page, damage):
    from _pages_helpers import open_page, texts

    home = tmp_path / "home"
    make_history(home)
    monkeypatch.setenv("MINIMIND_DASHBOARD_HOME", str(home))
    for side in ("jobs.db-wal", "jobs.db-shm"):
        (home / side).unlink(missing_ok=True)
    (home / "jobs.db").write_bytes(b"" if damage == "empty" else b"garbage!" * 600)
    at = open_page(page)
    assert not at.exception, [e.value for e in at.exception]
    errors = " ".join(texts(at.error))
    assert "python -m mmcore restore" in errors
    assert (home / "jobs.db").stat().st_size == (0 if damage == "empty" else 4800)  # nothing recreated
