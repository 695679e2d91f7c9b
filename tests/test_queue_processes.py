"""The queue with real processes: a detached scheduler, real supervisors and child processes on the CPU.

Three jobs with one CPU slot run one after another and each starts exactly once, although the
dashboard that submitted them exits at once, its scheduler is killed (SIGKILL) while the first
runs, and a restarted dashboard asks for a scheduler while the second runs.
"""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from _runner_helpers import alive, wait_for

from mmcore.base.paths import ROOT
from mmcore.jobs import scheduler_lock
from mmcore.jobs.jobnote import english
from mmcore.jobs.jobstore import JobStore
from mmcore.queue import queueconf, queuetext

pytestmark = pytest.mark.timeout(180)

# Stands in for a trainer: records its start and end, and takes a moment.
STAND_IN = """
import os, sys, time
with open(sys.argv[1], "a") as f:
    f.write(f"start {os.environ['JOB']} {time.time()}\\n")
time.sleep(float(sys.argv[2]))
with open(sys.argv[1], "a") as f:
    f.write(f"end {os.environ['JOB']} {time.time()}\\n")
"""

DASHBOARD = """
import sys
from mmcore.jobs import scheduler_lock
from mmcore.queue import jobqueue
from mmcore.train import preset_table
from mmcore.jobs.jobstore import JobStore
store = JobStore(sys.argv[1])
if sys.argv[2] == "submit":
    for i in range(3):
        values = {**preset_table.demo_preset("pretrain"), "save_weight": f"queued{i}"}
        job_id = jobqueue.submit(store, "pretrain", values, name=f"q{i}", gpu_count=0, check=False)
        # A stand-in trainer: the queue decides on the job's resources and files, not its argv.
        store.update(job_id, argv=[sys.executable, sys.argv[3], sys.argv[4], sys.argv[5]], env={"JOB": str(i)})
print(scheduler_lock.ensure_running(store))
"""


def _dashboard(tmp_path, store, *args):
    path = tmp_path / "dashboard.py"
    path.write_text(textwrap.dedent(DASHBOARD))
    out = subprocess.run([sys.executable, str(path), store.path, *args], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_three_jobs_one_slot_survive_a_killed_scheduler_and_a_restart(tmp_path):
    store = JobStore(tmp_path / "home" / "jobs.db")
    queueconf.save(store.home, queueconf.QueueSettings(cpu_slots=1))
    marks = tmp_path / "marks.txt"
    stand_in = tmp_path / "stand_in.py"
    stand_in.write_text(STAND_IN)
    _dashboard(tmp_path, store, "submit", str(stand_in), str(marks), "3")  # exits at once

    def marks_of(kind):
        lines = marks.read_text().splitlines() if marks.exists() else []
        return [line.split() for line in lines if line.startswith(kind)]

    first_pid = wait_for(lambda: scheduler_lock.running_pid(store), 30, what="the scheduler")
    wait_for(lambda: marks_of("start"), 60, what="the first job to start")
    os.kill(first_pid, signal.SIGKILL)
    wait_for(lambda: not alive(first_pid), 10, what="the scheduler to die")

    # The first job's supervisor starts a new scheduler when the job ends; the second job starts.
    wait_for(lambda: len(marks_of("start")) == 2, 60, what="the second job to start")
    second_pid = scheduler_lock.running_pid(store)
    assert second_pid not in (None, first_pid)
    # A restarted dashboard finds the running scheduler instead of starting another.
    assert _dashboard(tmp_path, store, "restart") == str(second_pid)

    jobs = wait_for(lambda: (lambda js: js if all(j.status == "succeeded" for j in js) else None)(
        store.list(limit=None)), 90, what="all three jobs to succeed")
    assert len(jobs) == 3

    starts, ends = marks_of("start"), marks_of("end")
    assert [s[1] for s in starts] == ["0", "1", "2"]  # first come, first served; each started once
    assert [e[1] for e in ends] == ["0", "1", "2"]
    for (_, _, end), (_, _, next_start) in zip(ends, starts[1:]):
        assert float(next_start) >= float(end)  # one slot: never two at once
    for j in jobs:
        assert j.queue_reason is None and j.waiting == 0 and j.dispatched_at is not None
    # The waiting jobs were told why: recorded while they waited (read back from their supervisors' runs).
    wait_for(lambda: scheduler_lock.running_pid(store) is None, 60, what="the idle scheduler to exit")


def test_one_scheduler_at_a_time(tmp_path):
    store = JobStore(tmp_path / "jobs.db")
    holder = subprocess.Popen([sys.executable, "-m", "mmcore.queue.scheduler", "--db", store.path, "--idle-exit", "30"],
                              cwd=ROOT)
    try:
        wait_for(lambda: scheduler_lock.running_pid(store) == holder.pid, 30, what="the first scheduler")
        second = subprocess.run([sys.executable, "-m", "mmcore.queue.scheduler", "--db", store.path], cwd=ROOT,
                                timeout=60)
        assert second.returncode == 3  # the lock is taken: it leaves at once
    finally:
        holder.terminate()
        holder.wait(10)
    assert scheduler_lock.running_pid(store) is None  # the kernel dropped the lock with the process


def test_waiting_jobs_say_why(tmp_path):
    """A job behind a running one gets its place and reason from the scheduler."""
    store = JobStore(tmp_path / "jobs.db")
    queueconf.save(store.home, queueconf.QueueSettings(cpu_slots=1))
    from mmcore.queue import jobqueue
    from mmcore.train import preset_table

    ids = []
    for i in range(2):
        values = {**preset_table.demo_preset("pretrain"), "save_weight": f"why{i}"}
        job_id = jobqueue.submit(store, "pretrain", values, name=f"w{i}", gpu_count=0, check=False)
        store.update(job_id, argv=[sys.executable, "-c", "import time; time.sleep(30)"])
        ids.append(job_id)
    try:
        wait_for(lambda: store.get(ids[0]).status == "running", 30, what="the first job to run")
        def reason_once_known():  # the store keeps it as messages; the API and the CLI read it in English
            reason = queuetext.english(store.get(ids[1]).queue_reason) or ""
            return reason if "CPU slot" in reason else None
        reason = wait_for(reason_once_known, 30, what="the second job's reason")
        assert reason == f"#1 in the queue · waiting for a CPU slot (1 of 1 in use: job {ids[0]} ({store.get(ids[0]).user}))"
    finally:
        from mmcore.queue import backends

        for job_id in reversed(ids):
            backends.stop(store, job_id, grace=1)
        wait_for(lambda: all(store.get(i).finished for i in ids), 30, what="both to end")
        time.sleep(0.1)
    assert english(store.get(ids[1]).note) == "cancelled while queued"


def test_an_export_runs_in_the_small_job_lane_while_training_holds_every_cpu_slot(tmp_path):
    """Real processes: a stand-in trainer holds the only CPU slot, a second training job waits for it, and an
    export (the real one, of a tiny weight) starts and finishes beside them in the small-job lane."""
    from _trainer_helpers import save_random_weights

    from mmcore.models import export_job
    from mmcore.queue import jobqueue
    from mmcore.train import preset_table

    store = JobStore(tmp_path / "jobs.db")
    queueconf.save(store.home, queueconf.QueueSettings(cpu_slots=1))
    training = []
    for i in range(2):
        values = {**preset_table.demo_preset("pretrain"), "save_weight": f"lane{i}"}
        job_id = jobqueue.submit(store, "pretrain", values, name=f"train{i}", gpu_count=0, check=False)
        store.update(job_id, argv=[sys.executable, "-c", "import time; time.sleep(120)"])
        training.append(job_id)
    try:
        wait_for(lambda: store.get(training[0]).status == "running", 30, what="the training job to run")
        weight = save_random_weights(tmp_path / "out", "full_sft")
        export_id = export_job.launch(store, weight, tmp_path / "hf" / "lane", format="minimind", verify=0)
        assert store.get(export_id).resources == {"lane": "small"}
        export = wait_for(lambda: (j := store.get(export_id)).finished and j, 150, what="the export to end")
        assert export.status == "succeeded", open(export.log_path, encoding="utf-8").read()
        assert (tmp_path / "hf" / "lane" / "config.json").is_file()
        assert [store.get(i).status for i in training] == ["running", "queued"]  # training kept its slot
        assert "CPU slot" in queuetext.english(store.get(training[1]).queue_reason)
    finally:
        from mmcore.queue import backends

        for job_id in reversed(training):
            backends.stop(store, job_id, grace=1)
        wait_for(lambda: all(store.get(i).finished for i in training), 30, what="the training jobs to end")
