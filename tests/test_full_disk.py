"""A full disk is "failed: no space left on device", whichever way SQLite words it ("database or disk is
full", or "disk I/O error" on a full tmpfs), and a job whose supervisor could not record its end is
recorded so from its log, not as lost."""
import contextlib
import os
import sqlite3
import subprocess
import sys

import pytest

from mmcore.jobs import diskspace, jobnote
from mmcore.jobs.jobstore import JobStore


@contextlib.contextmanager
def small_tmpfs(folder, size="1m"):
    """A tmpfs of `size` at `folder` (needs root); skips the test where it cannot be mounted."""
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                             capture_output=True, check=False).returncode == 0 if os.geteuid() == 0 else False
    if not mounted:
        pytest.skip("a tmpfs cannot be mounted here (root only)")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def fill(folder):
    """Write to `folder` until the disk is full."""
    with open(folder / "filler", "wb") as f:
        with contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * 65536)
                f.flush()


def test_sqlites_errors_on_a_full_tmpfs_are_a_full_disk(tmp_path):
    with small_tmpfs(tmp_path / "full") as folder:
        db = folder / "jobs.db"
        with contextlib.closing(sqlite3.connect(db)) as conn:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("CREATE TABLE t (x TEXT)")
            conn.commit()
            fill(folder)
            with pytest.raises(sqlite3.OperationalError) as caught:
                for _ in range(1000):
                    conn.execute("INSERT INTO t VALUES (?)", ("x" * 4096,))
                    conn.commit()
        assert diskspace.no_space(caught.value, db), str(caught.value)
        # an I/O error is a full disk only where the disk is full
        assert diskspace.no_space(sqlite3.OperationalError("disk I/O error"), db)
    assert diskspace.free_bytes(tmp_path) > diskspace.LOW_SPACE_BYTES
    assert not diskspace.no_space(sqlite3.OperationalError("disk I/O error"), tmp_path / "x.db")


def test_the_wordings_of_a_full_disk():
    assert diskspace.no_space(sqlite3.OperationalError("database or disk is full"))
    assert diskspace.no_space(OSError(28, "No space left on device"))
    assert not diskspace.no_space(sqlite3.OperationalError("database is locked"), "/")
    assert not diskspace.no_space(sqlite3.OperationalError("disk I/O error"))  # no file to look at: not said


def test_a_job_whose_supervisor_died_on_a_full_disk_is_failed_with_that_reason(tmp_path):
    store = JobStore(tmp_path / "home" / "jobs.db")
    job_id = store.create("pretrain", "full", {}, ["true"], str(tmp_path), {})
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    log = store.get(job_id).log_path
    with open(log, "w") as f:
        f.write("step 10 loss 2.0\nOSError: [Errno 28] No space left on device\n")
    store.update(job_id, status="running", supervisor_pid=dead.pid, supervisor_start=0.0)
    assert store.reconcile() == [job_id]
    job = store.get(job_id)
    assert job.status == "failed" and "no space left on device" in jobnote.english(job.note)
    assert open(log).read().splitlines()[-1] == "OSError: [Errno 28] No space left on device"  # kept as it was
    other = store.create("pretrain", "other", {}, ["true"], str(tmp_path), {})
    store.update(other, status="running", supervisor_pid=dead.pid, supervisor_start=0.0)
    assert store.reconcile() == [other] and store.get(other).status == "lost"  # its log says nothing of space


FILL_THEN_FAIL = """
import sys
print("step 1 loss 2.0", flush=True)
try:
    with open(sys.argv[1], "wb") as f:
        while True:
            f.write(b"\\0" * 65536)
            f.flush()
except OSError as exc:
    print(f"OSError: {exc}", flush=True)
    sys.exit(1)
"""


def test_a_job_that_fills_a_tmpfs_home_is_failed_no_space_not_lost(tmp_path):
    """The home on a small tmpfs, filled by the job itself: once someone makes room, the job's end is
    recorded as failed for want of space (the supervisor waited), with the trainer's last line kept."""
    import time

    with small_tmpfs(tmp_path / "disk", size="4m") as disk:
        store = JobStore(disk / "home" / "jobs.db")
        filler = disk / "home" / "filler"
        job_id = store.create("pretrain", "fill", {}, [sys.executable, "-c", FILL_THEN_FAIL, str(filler)],
                              str(tmp_path), {})
        supervisor = subprocess.Popen([sys.executable, "-m", "mmcore.jobs.runner", str(job_id), "--db", str(store.path)])
        try:
            deadline = time.monotonic() + 60
            while not (filler.exists() and diskspace.free_bytes(filler) < diskspace.LOW_SPACE_BYTES):
                assert time.monotonic() < deadline, "the job did not fill the disk"
                time.sleep(0.2)
            time.sleep(20)  # longer than a busy database's retries: only a full disk is waited for
            assert supervisor.poll() is None, "the supervisor gave up before there was room"
            filler.unlink()
            supervisor.wait(timeout=120)
        finally:
            if supervisor.poll() is None:
                supervisor.kill()
        job = JobStore(store.path).get(job_id)
        assert job.status == "failed", (job.status, jobnote.english(job.note))
        assert "no space left on device" in jobnote.english(job.note)
        lines = open(job.log_path).read().splitlines()
        assert any("No space left on device" in line for line in lines)
        assert sum("cannot write to the job store" in line for line in lines) <= 1
