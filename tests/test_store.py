"""JobStore: schema and migrations, queries, reconciliation of vanished supervisors, concurrency."""
import multiprocessing
import socket
import sqlite3
import subprocess
import sys
import time

import psutil
import pytest

from mmcore.jobs.jobnote import english
from mmcore.jobs.jobrow import MIGRATIONS, SCHEMA_VERSION
from mmcore.jobs.jobstore import JobStore

ARGV = [sys.executable, "-c", "print('hi')"]


@pytest.fixture
def store(tmp_path):
    return JobStore(tmp_path / "jobs.db")


def new_job(store, train_type="pretrain", name="run", **kw):
    return store.create(train_type, name, kw.pop("params", {"epochs": "1"}), kw.pop("argv", ARGV),
                        kw.pop("cwd", "/tmp"), kw.pop("env", {}), **kw)


def test_create_and_get_round_trip(store, tmp_path):
    job_id = store.create("grpo", "first", {"beta": "0.02"}, ["torchrun", "--nproc_per_node", "2", "x.py"],
                          "/work/trainer", {"CUDA_VISIBLE_DEVICES": "0,1"}, user="alice", host="box")
    job = store.get(job_id)
    assert job.id == job_id and job.train_type == "grpo" and job.type == "grpo"
    assert job.name == "first" and job.status == "queued" and job.active and not job.finished
    assert job.params == {"beta": "0.02"}
    assert job.argv == ["torchrun", "--nproc_per_node", "2", "x.py"]
    assert job.command == "torchrun --nproc_per_node 2 x.py"
    assert job.env == {"CUDA_VISIBLE_DEVICES": "0,1"} and job.cwd == "/work/trainer"
    assert (job.user, job.host) == ("alice", "box")
    assert job.log_path == str(tmp_path / "logs" / f"job-{job_id}.log")
    assert (tmp_path / "logs").is_dir()
    assert abs(job.created_at - time.time()) < 60
    assert job.duration is None and job.exit_code is None and job.supervisor_pid is None


def test_user_and_host_default_to_this_process(store):
    job = store.get(new_job(store))
    assert job.user and job.host == socket.gethostname()


def test_default_location_follows_env(tmp_path, monkeypatch):
    monkeypatch.setenv("MINIMIND_DASHBOARD_HOME", str(tmp_path / "home"))
    store = JobStore()
    assert store.path == str(tmp_path / "home" / "jobs.db")
    job = store.get(new_job(store))
    assert job.log_path == str(tmp_path / "home" / "logs" / f"job-{job.id}.log")
    # A folder as path means the jobs.db inside it.
    assert JobStore(tmp_path / "home").path == store.path


def test_wal_mode_and_schema_version(store):
    conn = sqlite3.connect(store.path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == store.schema_version()
    conn.close()


def test_duration_uses_start_and_end(store):
    job_id = new_job(store)
    store.update(job_id, status="succeeded", started_at=100.0, ended_at=160.5)
    job = store.get(job_id)
    assert job.duration == 60.5 and job.finished


def test_list_filters_order_and_paging(store):
    ids = [new_job(store, train_type=t) for t in ("sft", "dpo", "sft", "grpo", "sft")]
    store.update(ids[0], status="succeeded")
    store.update(ids[1], status="failed")
    store.update(ids[2], status="succeeded")
    assert [j.id for j in store.list()] == ids[::-1]
    assert [j.id for j in store.list(status="succeeded")] == [ids[2], ids[0]]
    assert [j.id for j in store.list(status=["succeeded", "failed"])] == [ids[2], ids[1], ids[0]]
    assert [j.id for j in store.list(train_type="sft")] == [ids[4], ids[2], ids[0]]
    assert [j.id for j in store.list(train_type=["dpo", "grpo"], status="queued")] == [ids[3]]
    assert [j.id for j in store.list(limit=2)] == [ids[4], ids[3]]
    assert [j.id for j in store.list(limit=2, offset=3)] == [ids[1], ids[0]]
    assert len(store.list(limit=None)) == 5
    assert store.count() == 5 and store.count(train_type="sft") == 3
    assert store.count(status=["succeeded", "failed"]) == 3
    assert store.counts() == {"queued": 2, "running": 0, "succeeded": 2, "failed": 1, "stopped": 0, "lost": 0, "blocked": 0}
    with pytest.raises(ValueError, match="unknown status 'done'"):
        store.list(status="done")


def test_update_checks_columns_ids_and_statuses(store):
    job_id = new_job(store)
    store.update(job_id, note="hello", params={"x": 1})
    assert store.get(job_id).note == "hello" and store.get(job_id).params == {"x": 1}
    with pytest.raises(ValueError, match="unknown job field.*colour"):
        store.update(job_id, colour="red")
    with pytest.raises(ValueError, match="unknown job field.*id"):
        store.update(job_id, id=99)
    with pytest.raises(ValueError, match="unknown status"):
        store.update(job_id, status="finished")
    with pytest.raises(KeyError, match="no job with id 999"):
        store.update(999, note="x")


def test_transition_only_from_expected_status(store):
    job_id = new_job(store)
    assert store.transition(job_id, ["queued", "running"], status="stopped", note="first")
    assert not store.transition(job_id, "queued", status="failed", note="second")
    job = store.get(job_id)
    assert (job.status, job.note) == ("stopped", "first")
    assert not store.transition(12345, "queued", status="running")


def test_a_stop_is_claimed_once(store):
    """Two watchers of one running job (guards followed from two processes) ask for its stop: one wins."""
    job_id = new_job(store)
    store.update(job_id, status="running")
    assert store.transition(job_id, "running", stop_unasked=True, stop_requested=1.0, note="first")
    assert not store.transition(job_id, "running", stop_unasked=True, stop_requested=2.0, note="second")
    job = store.get(job_id)
    assert (job.stop_requested, job.note) == (1.0, "first")


def test_get_and_delete_unknown_ids(store):
    assert store.get(42) is None
    with pytest.raises(KeyError, match="no job with id 42"):
        store.delete(42)
    job_id = new_job(store)
    store.delete(job_id)
    assert store.get(job_id) is None
    # Ids are never reused, so a new job never inherits an old job's log file name.
    assert new_job(store) == job_id + 1


@pytest.mark.parametrize("kwargs, message", [
    ({"train_type": ""}, "train_type"),
    ({"argv": "python x.py"}, "argv must be a non-empty list"),
    ({"argv": []}, "argv must be a non-empty list"),
    ({"env": {"A": 1}}, "env must map strings"),
    ({"params": ["a"]}, "params must be a dict"),
])
def test_create_rejects_bad_input(store, kwargs, message):
    with pytest.raises(ValueError, match=message):
        new_job(store, **kwargs)


# -- reconciliation -----------------------------------------------------------------------------

def dead_pid():
    """The pid of a process that has exited and been reaped."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_running_job_with_dead_supervisor_becomes_lost(store):
    job_id = new_job(store)
    store.update(job_id, status="running", supervisor_pid=dead_pid(), supervisor_start=1.0, started_at=time.time())
    assert store.get(job_id).status == "running"  # reads do not probe processes
    assert store.reconcile() == [job_id]
    job = store.get(job_id)
    assert job.status == "lost" and job.ended_at is not None
    assert "supervisor" in english(job.note)


def test_pid_reuse_is_detected_by_start_time(store):
    me = psutil.Process()
    live = new_job(store)
    store.update(live, status="running", supervisor_pid=me.pid, supervisor_start=me.create_time())
    reused = new_job(store)
    store.update(reused, status="running", supervisor_pid=me.pid, supervisor_start=me.create_time() - 1000)
    assert store.reconcile() == [reused]
    assert store.get(live).status == "running"
    job = store.get(reused)
    assert job.status == "lost" and "another process" in english(job.note)


def test_queued_job_without_supervisor_is_lost_after_grace(store):
    fresh = new_job(store)
    stale = new_job(store)
    store.update(stale, created_at=time.time() - store.queued_grace - 1)
    assert store.reconcile() == [stale]
    counts = store.counts()
    assert counts["queued"] == 1 and counts["lost"] == 1
    assert store.get(fresh).status == "queued"
    assert english(store.get(stale).note) == "supervisor never started"


def test_queued_job_with_dead_supervisor_is_lost(store):
    job_id = new_job(store)
    store.update(job_id, supervisor_pid=dead_pid())
    store.reconcile()
    assert [j.status for j in store.list()] == ["lost"]


def test_reconcile_leaves_finished_jobs_alone(store):
    job_id = new_job(store)
    store.update(job_id, status="succeeded", supervisor_pid=dead_pid(), ended_at=5.0)
    assert store.reconcile() == []
    assert store.get(job_id).status == "succeeded" and store.get(job_id).ended_at == 5.0


# -- migrations ---------------------------------------------------------------------------------

def test_old_database_is_upgraded_and_keeps_its_rows(tmp_path):
    path = tmp_path / "jobs.db"
    conn = sqlite3.connect(path)
    conn.executescript(MIGRATIONS[0])
    conn.execute("PRAGMA user_version = 1")
    conn.execute("INSERT INTO jobs (train_type, name, status, argv, created_at) VALUES "
                 "('sft', 'old run', 'succeeded', '[\"python\"]', 10.0)")
    conn.commit()
    conn.close()

    store = JobStore(path)
    assert store.schema_version() == SCHEMA_VERSION
    job = store.get(1)
    assert (job.name, job.status, job.argv, job.note, job.stop_requested) == ("old run", "succeeded", ["python"], None, None)
    store.update(1, note="after upgrade")
    assert store.get(1).note == "after upgrade"
    # Opening again is a no-op.
    assert JobStore(path).schema_version() == SCHEMA_VERSION


def test_previous_schema_gains_an_empty_final_progress_column(tmp_path):
    path = tmp_path / "jobs.db"
    conn = sqlite3.connect(path)
    for step in MIGRATIONS[:SCHEMA_VERSION - 1]:
        conn.executescript(step)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION - 1}")
    conn.execute("INSERT INTO jobs (train_type, name, status, argv, created_at, ended_at, note) VALUES "
                 "('pretrain', 'before upgrade', 'succeeded', '[\"python\"]', 10.0, 20.0, 'kept')")
    conn.commit()
    conn.close()

    store = JobStore(path)
    assert store.schema_version() == SCHEMA_VERSION
    job = store.get(1)
    assert (job.name, job.note, job.ended_at, job.final_progress) == ("before upgrade", "kept", 20.0, None)
    summary = {"percent": 100.0, "step": 3, "total": 3, "epoch": 1, "total_epochs": 1, "loss": 1.5,
               "loss_name": "loss", "reward": None, "reward_name": None, "eta_s": None}
    store.update(1, final_progress=summary)
    assert JobStore(path).get(1).final_progress == summary
    store.update(1, final_progress=None)  # back to SQL NULL, not the JSON text "null"
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT final_progress IS NULL FROM jobs WHERE id = 1").fetchone()[0] == 1
    assert store.get(1).final_progress is None


def test_newer_database_is_refused(tmp_path):
    path = tmp_path / "jobs.db"
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(RuntimeError, match="newer than this dashboard"):
        JobStore(path)


# -- concurrency --------------------------------------------------------------------------------

WRITERS, JOBS_PER_WRITER = 4, 50


def _writer(path, writer):
    # A fresh store per process, as the dashboard and each supervisor have.
    store = JobStore(path)
    for i in range(JOBS_PER_WRITER):
        job_id = store.create("sft", f"w{writer}-{i}", {"i": i}, ARGV, "/tmp", {})
        store.update(job_id, status="succeeded", exit_code=writer, note=f"w{writer}-{i}")
        store.counts()


def test_concurrent_writers_lose_no_row(store):
    ctx = multiprocessing.get_context("spawn")  # no inherited connections or locks
    procs = [ctx.Process(target=_writer, args=(store.path, w)) for w in range(WRITERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0] * WRITERS
    jobs = store.list(limit=None)
    assert len(jobs) == WRITERS * JOBS_PER_WRITER
    assert sorted(j.name for j in jobs) == sorted(f"w{w}-{i}" for w in range(WRITERS) for i in range(JOBS_PER_WRITER))
    assert all(j.status == "succeeded" and j.note == j.name and j.exit_code == int(j.name[1]) for j in jobs)
    assert len({j.id for j in jobs}) == len(jobs)
