"""The queue recovers by itself, with real processes: a scheduler killed with SIGKILL is started again by a
running job's supervisor (no page, no API call) and a queued job starts within 5 s; a job whose supervisor
was killed (lost) keeps its files until its trainer has exited, so the job waiting for them starts only then;
a restore of the job database while a job runs adopts that job instead of starting it a second time."""
import errno
import os
import signal
import sqlite3
import sys
import time
from pathlib import Path

import psutil
import pytest
from _runner_helpers import alive, wait_for

from mmcore import cli
from mmcore.jobs import jobnote, restored, runner, scheduler_lock, storeguard
from mmcore.jobs.jobstore import JobStore
from mmcore.jobs.supervisor import Supervisor
from mmcore.queue import queueconf
from mmcore.train.preset_table import demo_preset

pytestmark = pytest.mark.timeout(120)

# Stands in for a trainer: marks its start, runs, and on SIGTERM takes a moment to "save" before it ends.
STAND_IN = """
import os, signal, sys, time
def mark(what):
    with open(sys.argv[1], "a") as f:
        f.write(f"{what} {os.environ['JOB']} {time.time()}\\n")
def save_and_exit(*_):
    time.sleep(float(sys.argv[2]))
    mark("end")
    sys.exit(143)
signal.signal(signal.SIGTERM, save_and_exit)
mark("start")
time.sleep(60)
mark("end")
"""


@pytest.fixture
def queue(tmp_path):
    store = JobStore(tmp_path / "home" / "jobs.db")
    queueconf.save(store.home, queueconf.QueueSettings(cpu_slots=2))
    stand_in = tmp_path / "stand_in.py"
    stand_in.write_text(STAND_IN)
    marks = tmp_path / "marks.txt"

    def job(name, save_weight, save_s=0.0):
        """A waiting job (nobody told the scheduler) whose trainer is the stand-in."""
        values = {**demo_preset("pretrain"), "save_weight": save_weight}
        return store.create("pretrain", name, values, [sys.executable, str(stand_in), str(marks), str(save_s)],
                            str(tmp_path), {"JOB": name}, user="alice", waiting=1, resources={})

    def mark(what, name):
        lines = marks.read_text().splitlines() if marks.exists() else []
        return next((float(line.split()[2]) for line in lines if line.split()[:2] == [what, name]), None)

    yield store, job, mark
    for j in store.list(status=["queued", "running"], limit=None):
        runner.stop(store, j.id, grace=1, wait=True)
    if (pid := scheduler_lock.running_pid(store)) is not None:
        os.kill(pid, signal.SIGTERM)


def test_a_killed_scheduler_comes_back_and_a_queued_job_starts_within_5_s(queue):
    store, job, mark = queue
    job("a", "recover_a")
    first = scheduler_lock.ensure_running(store)
    wait_for(lambda: mark("start", "a"), 30, what="job a to start")
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: not alive(first), 10, what="the scheduler to die")
    job("b", "recover_b")  # queued while no scheduler runs, and no page or API call follows
    queued = time.time()
    started = wait_for(lambda: mark("start", "b"), 15, what="job b to start")
    assert started - queued < 5.0
    assert scheduler_lock.running_pid(store) not in (None, first)


def test_a_lost_jobs_files_are_held_until_its_trainer_is_gone(queue):
    store, job, mark = queue
    a = job("a", "held_files", save_s=2.0)  # its trainer takes 2 s to save once its supervisor is gone
    scheduler_lock.ensure_running(store)
    wait_for(lambda: mark("start", "a"), 30, what="job a to start")
    b = job("b", "held_files")  # the same weight and resume files: waits for a
    os.kill(store.get(a).supervisor_pid, signal.SIGKILL)  # the trainer gets SIGTERM (its lifeline) and saves
    wait_for(lambda: store.get(a).status == "lost", 15, what="job a to be lost")
    started = wait_for(lambda: mark("start", "b"), 30, what="job b to start")
    assert mark("end", "a") is not None and started >= mark("end", "a")
    assert store.get(b).status == "running"


def test_a_restore_while_a_job_runs_adopts_it_and_never_starts_it_twice(queue, monkeypatch, capsys):
    store, job, mark = queue
    a = job("a", "restore_a")  # its creation made the backup, which holds it as queued
    scheduler_lock.ensure_running(store)
    wait_for(lambda: mark("start", "a"), 30, what="job a to start")
    supervisor = store.get(a).supervisor_pid
    for suffix in ("-wal", "-shm"):  # the job database emptied while the job runs
        Path(store.path + suffix).unlink(missing_ok=True)
    Path(store.path).write_bytes(b"")
    monkeypatch.setenv("MINIMIND_DASHBOARD_HOME", str(store.home))
    assert cli.main(["restore", "latest"]) == 1  # refused while a supervisor of the store runs...
    assert "--adopt-running" in capsys.readouterr().err
    assert cli.main(["restore", "latest", "--adopt-running"]) == 0  # ...unless told to adopt its job
    assert "running, adopted" in capsys.readouterr().out
    back = JobStore(store.path)
    assert (back.get(a).status, back.get(a).supervisor_pid) == ("running", supervisor)
    job("c", "restore_c")  # a submit: the queue runs a round
    scheduler_lock.ensure_running(back)
    wait_for(lambda: mark("start", "c"), 30, what="job c to start")
    trainers = [p for p in psutil.process_iter(["environ"]) if (p.info["environ"] or {}).get("JOB") == "a"]
    assert len(trainers) == 1  # exactly one trainer for job a, started once
    assert sum(line.startswith("start a ") for line in (back.home.parent / "marks.txt").read_text().splitlines()) == 1


def test_a_restore_of_a_backup_older_than_a_running_job_keeps_it_with_its_id(queue, monkeypatch, capsys):
    """The backup was taken before the job was launched: the job stays (running, same id, one trainer), and
    neither its id nor that of a job that ended since the backup is given to the next launch."""
    store, job, mark = queue
    old = job("old", "older_old")
    store.update(old, status="succeeded", waiting=0, exit_code=0)
    made = storeguard.backup(store.path)  # the backup holds job "old" only, ended
    ended = job("ended", "older_ended")
    store.update(ended, status="succeeded", waiting=0, exit_code=0)
    Path(store.get(ended).log_path).write_text("# finished: succeeded (exit code 0)\n")
    running = job("running", "older_running")
    scheduler_lock.ensure_running(store)
    wait_for(lambda: mark("start", "running"), 30, what="the job to start")
    supervisor = store.get(running).supervisor_pid
    monkeypatch.setenv("MINIMIND_DASHBOARD_HOME", str(store.home))
    assert storeguard.backups(store.home)[0] == made  # no newer one was taken since
    assert cli.main(["restore", str(made), "--adopt-running"]) == 0
    assert f"{running}: running, adopted" in capsys.readouterr().out
    back = JobStore(store.path)
    kept = back.get(running)
    assert (kept.status, kept.supervisor_pid, kept.name, kept.user) == ("running", supervisor, "running", "alice")
    assert back.get(ended) is None  # not running: the backup's history is what was restored
    following = job("next", "older_next")
    assert following > max(running, ended)
    scheduler_lock.ensure_running(back)
    wait_for(lambda: mark("start", "next"), 30, what="the next job to start")
    trainers = [p for p in psutil.process_iter(["environ"]) if (p.info["environ"] or {}).get("JOB") == "running"]
    assert len(trainers) == 1
    assert sum(line.startswith("start running ") for line in (back.home.parent / "marks.txt").read_text().splitlines()) == 1


def test_a_restored_job_that_ran_is_marked_with_what_its_log_says(tmp_path):
    store = JobStore(tmp_path / "home" / "jobs.db")
    ran, never = (store.create("pretrain", n, {}, ["true"], "/tmp", {}, waiting=1) for n in ("ran", "never"))
    storeguard.backup(store.path)  # holds both as queued
    Path(store.get(ran).log_path).parent.mkdir(parents=True, exist_ok=True)
    Path(store.get(ran).log_path).write_text("# job 1\n# started: 2026-01-01T00:00:00\nloss 1.0\n"
                                             "# finished: succeeded (exit code 0) at 2026-01-01T00:01:00\n")
    storeguard.restore(store.path, "latest", adjust=lambda staged: restored.reconcile(JobStore(staged), {}))
    assert (store.get(ran).status, store.get(ran).exit_code) == ("succeeded", 0)
    assert "restored from a backup" in jobnote.english(store.get(ran).note)
    assert store.get(never).status == "queued"  # it never started: it stays in the queue


def test_a_job_that_runs_out_of_disk_space_is_failed_with_that_reason(queue):
    store, _, _ = queue
    full = "import sys; print('OSError: [Errno 28] No space left on device', flush=True); sys.exit(1)"
    job_id = store.create("pretrain", "full", {**demo_preset("pretrain"), "save_weight": "full_disk"},
                          [sys.executable, "-c", full], str(store.home), {}, waiting=1, resources={})
    scheduler_lock.ensure_running(store)
    job = wait_for(lambda: (j := store.get(job_id)).finished and j, 60, what="the job to end")
    assert job.status == "failed" and "no space left on device" in jobnote.english(job.note)


def test_a_log_the_disk_has_no_room_for_never_ends_the_supervisor(tmp_path):
    class Full:
        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    supervisor = Supervisor(JobStore(tmp_path / "home" / "jobs.db"), 1)
    supervisor.log = Full()
    supervisor._write_log("# finished: failed\n")  # the footer of a job on a full disk
    assert supervisor._out_of_space()


def test_a_failed_jobs_end_waits_for_room_on_a_full_disk_and_says_why(tmp_path, monkeypatch):
    store = JobStore(tmp_path / "home" / "jobs.db")
    job_id = store.create("pretrain", "full", {}, ["true"], "/tmp", {})
    supervisor = Supervisor(store, job_id)
    real, tries = store.update, []

    def full_then_room(job, **fields):
        tries.append(fields.get("status"))
        if len(tries) <= 6:  # more than a busy database is given
            raise sqlite3.OperationalError("database or disk is full")
        real(job, **fields)
    monkeypatch.setattr(store, "update", full_then_room)
    monkeypatch.setattr(time, "sleep", lambda s: None)
    supervisor._record(status="failed", exit_code=1)
    job = store.get(job_id)
    assert job.status == "failed" and "no space left on device" in jobnote.english(job.note)
