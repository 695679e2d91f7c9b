"""docs/SECURITY.md is true: its table of file modes holds on a live home (one made by the real acts, a real
job's supervisor, the scheduler, a trainer's records and a data scan), and every test it names exists."""
import ast
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from _runner_helpers import home_with_roles, wait_for

from mmcore.actions import data_acts, view_acts
from mmcore.data import scans
from mmcore.jobs import scheduler_lock
from mmcore.jobs.jobstore import JobStore
from mmcore.models import chat_client
from mmcore.models.evalstore import EvalStore
from mmcore.queue import queueconf, slurm
from mmcore.runs import health
from trainer.rules.records import RunRecords

DOC = Path(__file__).resolve().parents[1] / "docs" / "SECURITY.md"


def modes_table():
    """[(globs, mode)] from the rows after the file-modes marker."""
    text = DOC.read_text(encoding="utf-8")
    rows = []
    for line in text[text.index("<!-- file modes:"):].splitlines()[1:]:
        line = line.strip()
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if re.fullmatch(r"0[0-7]{3}", cells[1]):
            rows.append((re.findall(r"`([^`]+)`", cells[0]), int(cells[1], 8)))
    return rows


def live_home(tmp_path, monkeypatch):
    home = home_with_roles(tmp_path, monkeypatch, ada="admin")
    (home / "roles.toml").chmod(0o600)  # the admin's own file
    store = JobStore(home / "jobs.db")
    job = store.create("pretrain", "true", {}, ["true"], str(tmp_path), {}, user="ada")
    subprocess.run([sys.executable, "-m", "mmcore.jobs.runner", str(job), "--db", str(store.path)],
                   timeout=120, check=True)
    wait_for(lambda: store.get(job).finished, 30, what="the job to end")
    EvalStore(home / "evals.db")
    queueconf.save(home, queueconf.QueueSettings())
    health.save_settings(home, health.HealthSettings())
    chat_client.worker_dir(home)
    assert view_acts.upload_log(home, b"Epoch:[1/1](1/1) loss:1.0\n", "run.log", "ada").done
    data = data_acts.upload_data(home, b'{"text": "hello"}\n' * 10, "train.jsonl", "ada").value
    records = RunRecords(str(home / "records" / "pretrain-live_64"), "pretrain")
    records.log(1, 0, 1, {"loss": 1.0}, 8, 64)
    records.close()
    assert scans.run(data, "pretrain", home, sample=0).status == "done"
    queued = store.create("pretrain", "queued", {}, ["true"], str(tmp_path), {}, user="ada", waiting=1, resources={})
    assert scheduler_lock.ensure_running(store) is not None  # the queue has work: the scheduler starts
    wait_for(lambda: store.get(queued).finished, 60, what="the queued job to run")
    return home, store


def slurm_row(pattern):
    """A row of the Slurm backend's files: checked on a home where a job ran through Slurm."""
    return pattern == "slurm" or pattern.startswith("slurm/")


def run_through_slurm(home, store, tmp_path):
    """Submit a job to the real one-node Slurm through the backend and wait for its output in the job's log."""
    script = tmp_path / "hello.py"
    script.write_text("print('hello from slurm', flush=True)\n")
    job_id = store.create("pretrain", "via slurm", {}, [sys.executable, str(script)], str(tmp_path), {},
                          user="ada", backend="slurm", waiting=1, resources={})
    assert slurm.SlurmBackend().submit(store, store.get(job_id), settings=queueconf.QueueSettings())
    log = Path(store.get(job_id).log_path)
    wait_for(lambda: log.exists() and "hello from slurm" in log.read_text(errors="replace"), 240, what="the Slurm job's output")
    return log


def check_modes(home, store, slurm_too):
    """Every row of the table holds in `home` (the Slurm rows only with `slurm_too`)."""
    reader = sqlite3.connect(store.path)  # an open database has its -wal and -shm files
    reader.execute("SELECT COUNT(*) FROM jobs").fetchone()
    try:
        rows = modes_table()
        assert len(rows) >= 8
        for globs, mode in rows:
            for pattern in globs:
                if slurm_row(pattern) and not slurm_too:
                    continue
                found = [home] if pattern == "." else sorted(home.glob(pattern))
                assert found, f"{pattern}: nothing in the live home"
                for path in found:
                    assert path.stat().st_mode & 0o777 == mode, f"{path.relative_to(home)} is " \
                        f"{path.stat().st_mode & 0o777:04o}, the table says {mode:04o}"
    finally:
        reader.close()


def test_the_file_modes_table_holds_on_a_live_home(tmp_path, monkeypatch):
    home, store = live_home(tmp_path, monkeypatch)
    try:
        check_modes(home, store, slurm_too=False)
    finally:
        if (pid := scheduler_lock.running_pid(store)) is not None:
            os.kill(pid, signal.SIGTERM)


@pytest.mark.slurm
@pytest.mark.timeout(400)
@pytest.mark.skipif(subprocess.run(["sinfo", "-h"], capture_output=True).returncode != 0 if shutil.which("sinfo")
                    else True, reason="no one-node Slurm answers (.ci/slurm-up.sh starts one)")
def test_the_file_modes_table_holds_on_a_home_with_a_slurm_job(tmp_path, monkeypatch):
    home, store = live_home(tmp_path, monkeypatch)
    log = run_through_slurm(home, store, tmp_path)
    try:
        assert log.stat().st_mode & 0o777 == 0o600  # Slurm appended to the log the backend made private
        check_modes(home, store, slurm_too=True)
    finally:
        if (pid := scheduler_lock.running_pid(store)) is not None:
            os.kill(pid, signal.SIGTERM)


def test_every_test_the_doc_names_exists():
    named = re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", DOC.read_text(encoding="utf-8"))
    assert len(named) >= 20
    for file, name in named:
        tree = ast.parse((DOC.parents[1] / file).read_text(encoding="utf-8"))
        assert name in {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}, f"{file}::{name}"
