"""The job supervisor with real child processes: small Python scripts stand in for trainers."""
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from _runner_helpers import alive, group_alive, script, wait_for

from mmcore.base.paths import ROOT
from mmcore.jobs import jobtable, progress, runner
from mmcore.jobs.jobnote import english
from mmcore.jobs.jobstore import JobStore


@pytest.fixture
def store(tmp_path):
    store = JobStore(tmp_path / "home" / "jobs.db")
    yield store
    # Leave no process behind, whatever a test did. Supervisors and trainers lead their own
    # process groups, so each group is named by its leader's pid (even after the leader exited).
    for job in store.list(limit=None):
        for pgid in (job.supervisor_pid, job.trainer_pid):
            if pgid is not None and group_alive(pgid):
                try:
                    os.killpg(pgid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass


def submit(store, argv, cwd, env=None, train_type="grpo", name="test run"):
    return store.create(train_type, name, {"epochs": "1"}, argv, str(cwd), env or {})


def finished(store, job_id, timeout=60):
    return wait_for(lambda: (job := store.get(job_id)) and not job.active and job, timeout, what=f"job {job_id} to end")


def log_text(job):
    return Path(job.log_path).read_text()


def wait_in_log(store, job_id, text, timeout=60):
    path = Path(store.get(job_id).log_path)
    wait_for(lambda: path.exists() and text in path.read_text(), timeout, what=f"{text!r} in the log")


def test_successful_job_records_everything(store, tmp_path):
    argv = script(tmp_path, "ok.py", """
        import os, sys
        print("hello from the trainer")
        print("to stderr", file=sys.stderr)
        print("cwd", os.getcwd())
        print("group leader", os.getpgid(0) == os.getpid())
        print("env", os.environ["EXTRA"], os.environ["PYTHONUNBUFFERED"])
    """)
    job_id = submit(store, argv, tmp_path, env={"EXTRA": "yes"}, name="my run")
    supervisor_pid = runner.launch(store, job_id)
    job = finished(store, job_id)

    assert job.status == "succeeded" and job.exit_code == 0 and job.note is None
    assert job.supervisor_pid == supervisor_pid and job.supervisor_start is not None
    assert job.trainer_pid not in (None, supervisor_pid) and job.trainer_start is not None
    assert job.created_at <= job.started_at <= job.ended_at and job.duration >= 0
    lines = log_text(job).splitlines()
    command = job.command
    assert lines[0] == f"# job {job_id} · type grpo · my run"
    assert lines[1] == f"# command: {command}"
    assert lines[2] == f"# cwd: {tmp_path}"
    assert lines[3] == "# env: EXTRA=yes"
    assert lines[4].startswith("# started: 20")
    # the dashboard's own header is English whatever the language; the trainer's lines follow it
    assert not any(_has_cjk(line) for line in lines[:5])
    body = lines[5:-1]
    assert "hello from the trainer" in body and "to stderr" in body
    assert f"cwd {tmp_path}" in body and "group leader True" in body and "env yes 1" in body
    assert lines[-1].startswith("# finished: succeeded (exit code 0) at 20")


def _has_cjk(text):
    return any("\u3000" <= ch <= "\u9fff" or "\uff00" <= ch <= "\uffef" for ch in text)


def test_failing_job_is_failed_with_its_exit_code(store, tmp_path):
    argv = [sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"]
    job_id = submit(store, argv, tmp_path)
    runner.launch(store, job_id)
    job = finished(store, job_id)
    assert job.status == "failed" and job.exit_code == 3
    text = log_text(job)
    assert "boom" in text and "# finished: failed (exit code 3)" in text


def test_trainer_that_cannot_start_fails_with_a_note(store, tmp_path):
    job_id = submit(store, [str(tmp_path / "no-such-torchrun"), "--nproc_per_node", "2"], tmp_path)
    runner.launch(store, job_id)
    job = finished(store, job_id)
    assert job.status == "failed" and job.exit_code is None and job.trainer_pid is None
    assert "cannot start the trainer" in english(job.note) and "no-such-torchrun" in english(job.note)
    text = log_text(job)
    assert "# error: cannot start the trainer" in text and "# finished: failed" in text


SLEEPER = """
    import subprocess, sys, time
    # A child in the same process group, as data-loader workers or torchrun's workers are.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    print("child", child.pid)
    print("ready")
    time.sleep(120)
"""


def child_pid(job):
    return int(next(line.split()[1] for line in log_text(job).splitlines() if line.startswith("child ")))


def test_processes_left_in_the_group_end_with_the_job(store, tmp_path):
    argv = script(tmp_path, "leaves_child.py", """
        import subprocess, sys
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        print("child", child.pid)
    """)
    job_id = submit(store, argv, tmp_path)
    runner.launch(store, job_id)
    job = finished(store, job_id)
    assert job.status == "succeeded"
    assert not alive(child_pid(job)) and not group_alive(job.trainer_pid)


def test_stop_terminates_the_trainer_group(store, tmp_path):
    job_id = submit(store, script(tmp_path, "sleeper.py", SLEEPER), tmp_path)
    runner.launch(store, job_id)
    wait_in_log(store, job_id, "ready")
    running = store.get(job_id)
    assert running.status == "running"
    grandchild = child_pid(running)

    assert runner.stop(store, job_id, grace=30) is True
    job = finished(store, job_id)
    assert job.status == "stopped" and job.exit_code == -signal.SIGTERM
    assert job.stop_requested is not None and job.stop_grace == 30
    assert not group_alive(job.trainer_pid) and not alive(grandchild)
    text = log_text(job)
    assert "# stop requested: SIGTERM" in text and "SIGKILL" not in text
    assert "# finished: stopped (exit code -15, signal SIGTERM)" in text
    # A finished job cannot be stopped again.
    assert runner.stop(store, job_id) is False


def test_stop_kills_a_trainer_that_ignores_sigterm(store, tmp_path):
    argv = script(tmp_path, "stubborn.py", """
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("ready")
        time.sleep(120)
    """)
    job_id = submit(store, argv, tmp_path)
    runner.launch(store, job_id)
    wait_in_log(store, job_id, "ready")
    assert runner.stop(store, job_id, grace=1.0, wait=True) is True
    job = finished(store, job_id)
    assert job.status == "stopped" and job.exit_code == -signal.SIGKILL
    assert not group_alive(job.trainer_pid)
    assert "s: SIGKILL to " in log_text(job)


def test_sigterm_to_the_supervisor_is_forwarded(store, tmp_path):
    job_id = submit(store, script(tmp_path, "sleeper.py", SLEEPER), tmp_path)
    supervisor = runner.launch(store, job_id)
    wait_in_log(store, job_id, "ready")
    os.kill(supervisor, signal.SIGTERM)
    job = finished(store, job_id)
    assert job.status == "stopped" and job.exit_code == -signal.SIGTERM
    assert not group_alive(job.trainer_pid)


def test_stop_queued_job_without_supervisor_and_unknown_ids(store, tmp_path):
    job_id = submit(store, [sys.executable, "-c", "pass"], tmp_path)
    assert runner.stop(store, job_id) is True
    job = store.get(job_id)
    assert job.status == "stopped" and english(job.note) == "stopped before it started"
    with pytest.raises(KeyError):
        runner.stop(store, 999)
    with pytest.raises(ValueError, match="only a queued job can be launched"):
        runner.launch(store, job_id)
    with pytest.raises(KeyError):
        runner.launch(store, 999)


def test_stop_requested_before_the_supervisor_registered(store, tmp_path):
    job_id = submit(store, [sys.executable, "-c", "print('should not run')"], tmp_path)
    # As launch() leaves it: queued, with a live supervisor process that has not registered yet.
    placeholder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    store.update(job_id, supervisor_pid=placeholder.pid, supervisor_start=psutil.Process(placeholder.pid).create_time())
    assert runner.stop(store, job_id) is True
    assert store.get(job_id).status == "queued" and store.get(job_id).stop_requested is not None
    assert supervise(store, job_id).returncode == 0
    job = store.get(job_id)
    assert job.status == "stopped" and job.trainer_pid is None and english(job.note) == "stopped before the trainer started"
    assert "should not run" not in log_text(job).splitlines()
    placeholder.kill()
    placeholder.wait()


def test_killed_supervisor_makes_the_job_lost(store, tmp_path):
    job_id = submit(store, script(tmp_path, "sleeper.py", SLEEPER), tmp_path)
    supervisor = runner.launch(store, job_id)
    wait_in_log(store, job_id, "ready")
    trainer = store.get(job_id).trainer_pid
    os.kill(supervisor, signal.SIGKILL)
    job = wait_for(lambda: store.reconcile() == [job_id] and store.get(job_id), what="job to be lost")
    assert job.ended_at is not None and f"supervisor (pid {supervisor})" in english(job.note)
    # Nobody would record its ending, so the trainer is told to stop too.
    wait_for(lambda: not alive(trainer), what="the orphaned trainer to exit")


def test_reused_supervisor_pid_makes_the_job_lost(store, tmp_path):
    job_id = submit(store, script(tmp_path, "sleeper.py", SLEEPER), tmp_path)
    runner.launch(store, job_id)
    wait_in_log(store, job_id, "ready")
    store.update(job_id, supervisor_start=store.get(job_id).supervisor_start - 3600)
    store.reconcile()
    job = store.get(job_id)
    assert job.status == "lost" and "another process" in english(job.note)


def test_job_outlives_the_process_that_launched_it(store, tmp_path):
    release = tmp_path / "release"
    argv = script(tmp_path, "waiter.py", f"""
        import os, time
        print("ready")
        while not os.path.exists({str(release)!r}):
            time.sleep(0.05)
        print("released")
    """)
    job_id = submit(store, argv, tmp_path)
    launcher = subprocess.run(
        [sys.executable, "-c",
         "import sys; from mmcore.jobs import runner; from mmcore.jobs.jobstore import JobStore; "
         "print(runner.launch(JobStore(sys.argv[1]), int(sys.argv[2])))", store.path, str(job_id)],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    supervisor = int(launcher.stdout)
    wait_in_log(store, job_id, "ready")
    assert store.get(job_id).status == "running" and store.get(job_id).supervisor_pid == supervisor
    release.touch()
    job = finished(store, job_id)
    assert job.status == "succeeded" and "released" in log_text(job)


def test_delete_refuses_active_jobs_and_removes_finished_ones(store, tmp_path):
    queued = submit(store, [sys.executable, "-c", "pass"], tmp_path)
    with pytest.raises(runner.JobRunningError, match=f"job {queued} is queued: stop it"):
        runner.delete(store, queued)

    job_id = submit(store, script(tmp_path, "sleeper.py", SLEEPER), tmp_path)
    runner.launch(store, job_id)
    wait_in_log(store, job_id, "ready")
    with pytest.raises(runner.JobRunningError, match=f"job {job_id} is running"):
        runner.delete(store, job_id)
    runner.stop(store, job_id, grace=5)
    job = finished(store, job_id)
    assert Path(job.log_path).exists()
    runner.delete(store, job_id)
    assert store.get(job_id) is None and not Path(job.log_path).exists()
    with pytest.raises(KeyError):
        runner.delete(store, job_id)


def supervise(store, job_id):
    return subprocess.run([sys.executable, "-m", "mmcore.jobs.runner", str(job_id), "--db", store.path],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_supervisor_refuses_unknown_or_finished_jobs(store, tmp_path):
    result = supervise(store, 999)
    assert result.returncode == 2 and "no job with id 999" in result.stderr
    job_id = submit(store, [sys.executable, "-c", "pass"], tmp_path)
    store.update(job_id, status="succeeded")
    result = supervise(store, job_id)
    assert result.returncode == 2 and f"job {job_id} is succeeded, not queued" in result.stderr
    assert store.get(job_id).status == "succeeded"


def test_supervisor_started_by_hand_runs_a_queued_job(store, tmp_path):
    job_id = submit(store, [sys.executable, "-c", "print('by hand')"], tmp_path)
    assert supervise(store, job_id).returncode == 0
    job = store.get(job_id)
    assert job.status == "succeeded" and "by hand" in log_text(job)


def test_supervisor_reports_an_unusable_store_in_the_job_log(tmp_path):
    db = tmp_path / "jobs.db"
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA user_version = 999")
    conn.close()
    result = subprocess.run([sys.executable, "-m", "mmcore.jobs.runner", "7", "--db", str(db)],
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    text = (tmp_path / "logs" / "job-7.log").read_text()
    assert "cannot open the job store" in text and "newer than this dashboard" in text


def test_launch_failure_marks_the_job_failed(store, tmp_path, monkeypatch):
    job_id = submit(store, [sys.executable, "-c", "pass"], tmp_path)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-such-python"))
    with pytest.raises(OSError):
        runner.launch(store, job_id)
    job = store.get(job_id)
    assert job.status == "failed" and "cannot start the supervisor" in english(job.note)


# -- the final progress summary -------------------------------------------------------------------

MINIMIND_TRAINER = """
    print("Model Params: 0.100M")
    for step in (1, 2, 3):
        print(f"Epoch:[1/1]({step}/3) loss:{2.0 - step / 2} lr:0.001 epoch_Time:0.0min:")
"""


def test_ended_job_stores_its_progress_summary_and_the_table_needs_no_log(store, tmp_path):
    job_id = submit(store, script(tmp_path, "train.py", MINIMIND_TRAINER), tmp_path, train_type="pretrain")
    runner.launch(store, job_id)
    job = finished(store, job_id)
    assert job.status == "succeeded"
    assert job.final_progress == {
        "percent": 100.0, "step": 3, "total": 3, "epoch": 1, "total_epochs": 1, "loss": 0.5,
        "loss_name": "loss", "reward": None, "reward_name": None, "eta_s": None}
    assert job.final_progress == progress.final_progress(job).as_dict()  # what parsing the log gives

    # With the log gone, the Jobs table still shows where the job ended.
    Path(job.log_path).unlink()
    row = jobtable.job_rows([store.get(job_id)], progress.ProgressCache())[0]
    assert (row["progress"], row["step"], row["metric"]) == (100.0, "3/3", "loss 0.5")


def test_unparsable_log_still_records_the_ending_without_a_summary(store, tmp_path):
    # The trainer puts a folder where the log was: the supervisor keeps writing to the open file,
    # but the log cannot be read back by its path.
    job_id = submit(store, script(tmp_path, "swap.py", """
        import os, sys
        log = os.readlink("/proc/self/fd/1")  # stdout is the job's log file
        os.remove(log)
        os.mkdir(log)
        sys.exit(4)
    """), tmp_path)
    runner.launch(store, job_id)
    job = finished(store, job_id)
    assert Path(job.log_path).is_dir()
    assert (job.status, job.exit_code, job.final_progress) == ("failed", 4, None)
