"""A sweep on the Slurm backend goes in as one job array (mmcore.queue.job_arrays, SlurmBackend.submit_array),
against the real one-node Slurm of .ci/slurm-up.sh: task i runs sweep run i, each run keeps its own job row, log
and records, stopping one run cancels only its task, and stopping the sweep cancels the array."""
import json
import os
import subprocess
import sys

import pytest
from _runner_helpers import wait_for
from _slurm_helpers import cluster, finished, home, needs_slurm, pretrain_values  # noqa: F401 (fixtures)

from mmcore import api
from mmcore.access import audit
from mmcore.actions import job_acts
from mmcore.base.paths import ROOT
from mmcore.experiments import sweeps
from mmcore.jobs.jobnote import english
from mmcore.jobs.jobstore import JobStore
from mmcore.logs import log_parser
from mmcore.queue import backends, job_arrays, queuetext, slurm

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(400)]


def _sets(tmp_path, lines=48, **changes):
    """A tiny CPU pretrain's values and the `--set` options that give them."""
    values = pretrain_values(tmp_path, "arr", lines, **changes)
    return values, [a for k, v in values.items() for a in ("--set", f"{k}={v}")]


def _sweep_cli(store, *args):
    env = {**os.environ, "MINIMIND_DASHBOARD_HOME": str(store.home)}
    done = subprocess.run([sys.executable, "-m", "mmcore", "sweep", "pretrain", *args, "--backend", "slurm", "--json"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def _submitted(store, job_ids):
    jobs = [store.get(j) for j in job_ids]
    return jobs if all(j.external_id for j in jobs) else None


def _squeue_arrays(task_ids):
    """{array id} squeue lists for the tasks `task_ids` (`ARRAYID_INDEX`)."""
    return {slurm._number(r.get("array_job_id")) for r in slurm.squeue_jobs(set(task_ids)).values()}


@needs_slurm
def test_a_sweep_on_slurm_is_one_array_whose_tasks_run_its_jobs_to_success(tmp_path, home):
    """`sweep pretrain --grid learning_rate=0.001,0.0005 --backend slurm` makes one `sbatch --array=0-1`."""
    values, sets = _sets(tmp_path)
    found = _sweep_cli(home, *sets, "--grid", "learning_rate=0.001,0.0005")
    first, second = found["jobs"]
    jobs = wait_for(lambda: _submitted(home, found["jobs"]), 120, 0.5, "the sweep's array to be submitted")
    array_id = jobs[0].external_id.split("_")[0]
    assert [j.external_id for j in jobs] == [f"{array_id}_0", f"{array_id}_1"]  # task i runs sweep run i
    assert array_id.isdigit() and _squeue_arrays([j.external_id for j in jobs]) == {int(array_id)}
    script = (home.home / "slurm" / f"array-{first}.sbatch").read_text()
    assert "#SBATCH --array=0-1" in script and f"job-{first}.sbatch" in script and f"job-{second}.sbatch" in script
    done = [wait_for(lambda j=j: finished(home, j), 300, 0.5, f"job {j} to end") for j in found["jobs"]]
    for job, rate in zip(done, ("0.001", "0.0005")):
        log = open(job.log_path).read()
        assert (job.status, job.exit_code) == ("succeeded", 0), log
        assert job.params["learning_rate"] == rate and job.backend == "slurm"
        assert f"# job {job.id} · type pretrain" in log and f"(array task {job.external_id})" in log
        assert "# finished: succeeded (exit code 0)" in log
        assert len(log_parser.parse_file(job.log_path)) == 6  # each run's own log: its six steps, nothing else
        assert os.path.isfile(tmp_path / "out" / f"{job.params['save_weight']}_64.pth")
    assert done[0].log_path != done[1].log_path
    assert sweeps.SweepStore(home.path).get(found["sweep"])["jobs"] == [first, second]
    assert [e.action for e in audit.entries(limit=None, home=home.home)] == ["sweep"]


@needs_slurm
def test_stopping_one_run_cancels_only_its_task_and_stopping_the_sweep_cancels_the_array(tmp_path, home):
    values, sets = _sets(tmp_path, lines=3000, epochs="3")
    found = _sweep_cli(home, *sets, "--grid", "learning_rate=0.001,0.0005")
    first, second = found["jobs"]

    def both_running():
        backends.refresh(home)
        return all(home.get(j).status == "running" for j in found["jobs"])

    wait_for(both_running, 240, 0.5, "both tasks to run")
    wait_for(lambda: len(log_parser.parse_file(home.get(first).log_path)) >= 2, 240, 0.5, "a few steps of run 1")
    outcome = job_acts.stop_job(home, first)  # the Jobs page's Stop
    assert outcome.kind == "info", outcome.message
    job = wait_for(lambda: finished(home, first), 120, 0.5, "run 1's task to end")
    assert (job.status, job.exit_code) == ("stopped", 143), open(job.log_path).read()
    other = home.get(second)
    assert other.status == "running"  # its task runs on
    assert slurm.squeue_jobs({other.external_id})[other.external_id]["job_state"] == "RUNNING"
    assert api.stop_sweep(found["sweep"]) == [second]  # the array's last active task: one scancel of the array
    job = wait_for(lambda: finished(home, second), 120, 0.5, "run 2's task to end")
    assert job.status == "stopped", open(job.log_path).read()
    assert english(job.note).endswith("CANCELLED")
    array_id = other.external_id.split("_")[0]
    state = slurm.scontrol_job(array_id)  # the array's own record: cancelled as a whole
    assert state is None or state["JobState"] == "CANCELLED"


def test_array_task_lists_and_squeue_records_name_each_task():
    assert job_arrays.index_ranges([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8" and job_arrays.index_ranges([3]) == "3"
    assert job_arrays.expand_ranges("0-2,5") == [0, 1, 2, 5] and job_arrays.expand_ranges("0-6:3%2") == [0, 3, 6]
    # Slurm 22.05's records: a running task, then the record of an array's pending tasks.
    running = {"job_id": 29, "array_job_id": 27, "array_task_id": 1, "array_task_string": ""}
    pending = {"job_id": 30, "array_job_id": 30, "array_task_id": None, "array_task_string": "0-2"}
    single = {"job_id": 31, "array_job_id": 0, "array_task_id": 4294967294, "array_task_string": ""}
    assert slurm.record_ids(running) == ["29", "27_1"]
    assert slurm.record_ids(pending) == ["30", "30_0", "30_1", "30_2"]
    assert slurm.record_ids(single) == ["31"]
    newer = {"job_id": 29, "array_job_id": {"set": True, "number": 27}, "array_task_id": {"set": True, "number": 1}}
    assert slurm.record_ids(newer) == ["29", "27_1"]  # Slurm 23's numbers


def test_held_runs_wait_for_their_release_and_a_stale_hold_lets_go(tmp_path, monkeypatch):
    """The scheduler passes over a held run (its array is being queued) and takes it once released."""
    from mmcore.queue import launch, scheduler

    monkeypatch.setenv("MINIMIND_DASHBOARD_HOME", str(tmp_path / "home"))
    monkeypatch.setattr("mmcore.jobs.scheduler_lock.ensure_running", lambda store: None)
    store = JobStore(tmp_path / "home" / "jobs.db")
    values, _ = _sets(tmp_path)
    ids = [launch.start(store, f"held-{n}", launch.check("pretrain", {**values, "save_weight": f"h{n}"}, 0),
                        backend="local", held=True) for n in (1, 2)]
    assert {store.get(j).queue_reason for j in ids} == {job_arrays.HELD}
    queue = scheduler.Queue(store, list_gpus=lambda: [])
    waiting, decisions = queue.decide(scheduler.queueconf.load(store.home))
    assert waiting == [] and decisions == []
    assert job_arrays.release_stale(store, ids) == []  # young: still held
    job_arrays.release(store, ids)
    assert job_arrays.members(store, ids) == {ids[0]: (ids[0], 0), ids[1]: (ids[0], 1)}
    assert {store.get(j).queue_reason for j in ids} == {queuetext.SCHEDULER}
    waiting, decisions = queue.decide(scheduler.queueconf.load(store.home))
    assert [j.id for j in waiting] == ids
    late = launch.start(store, "held-3", launch.check("pretrain", {**values, "save_weight": "h3"}, 0),
                        backend="local", held=True)
    assert job_arrays.release_stale(store, [late], max_age=0) == [late]
    assert store.get(late).queue_reason == queuetext.SCHEDULER and job_arrays.members(store, [late]) == {}
