"""The Slurm backend against a real one-node Slurm (started by .ci/slurm-up.sh): sbatch, squeue
reconciliation, scancel from the dashboard and from the shell, and a two-task torchrun rendezvous."""
import os
import subprocess

import pytest
from _runner_helpers import wait_for
from _slurm_helpers import cluster, finished, home, needs_slurm, pretrain_values  # noqa: F401 (fixtures)

from mmcore.actions import job_acts
from mmcore.jobs.jobnote import english
from mmcore.logs import log_parser
from mmcore.queue import backends, jobqueue, queueconf, resources, slurm

pytestmark = [pytest.mark.timeout(400), needs_slurm]


def test_demo_pretrain_through_sbatch_succeeds_with_its_log(tmp_path, home, monkeypatch):
    queueconf.save(home.home, queueconf.QueueSettings(default_backend="slurm"))
    job_id = jobqueue.submit(home, "pretrain", pretrain_values(tmp_path, "sbatch"), name="via slurm", gpu_count=0)
    job = home.get(job_id)
    assert job.backend == "slurm"
    job = wait_for(lambda: finished(home, job_id), 240, 0.5, "the Slurm job to end")
    log = open(job.log_path).read()
    assert job.status == "succeeded" and job.exit_code == 0, log
    assert job.external_id and job.external_id.isdigit()
    script = (home.home / "slurm" / f"job-{job_id}.sbatch").read_text()
    assert f"#SBATCH --output={job.log_path}" in script and "srun" in script
    assert f"# slurm: job {job.external_id}" in log and "# finished: succeeded (exit code 0)" in log
    frame = log_parser.parse_file(job.log_path)  # what the Logs page charts
    assert len(frame) == 6 and frame["loss"].notna().all()  # 48 lines, batch 8: six steps
    assert (tmp_path / "out" / f"{pretrain_values(tmp_path, 'sbatch')['save_weight']}_64.pth").is_file()
    # The Logs page charts it from the job's Slurm output file.
    from _pages_helpers import open_page

    monkeypatch.setenv("MINIMIND_DASHBOARD_HOME", str(home.home))
    at = open_page("pages/logs.py", query={"job": str(job_id)})
    assert not at.exception, at.exception
    assert at.multiselect(key="logs.jobs").value == [job_id] and at.get("plotly_chart")


def test_stop_from_the_dashboard_ends_with_143_and_can_resume(tmp_path, home):
    values = pretrain_values(tmp_path, "stop", lines=3000, epochs="3")
    job_id = jobqueue.submit(home, "pretrain", values, backend="slurm", gpu_count=0)
    wait_for(lambda: len(log_parser.parse_file(home.get(job_id).log_path)) >= 3
             if os.path.exists(home.get(job_id).log_path) else False, 240, 0.5, "a few training steps")
    outcome = job_acts.stop_job(home, job_id)  # the Jobs page's Stop (after its confirmation)
    assert outcome.kind == "info", outcome.message
    job = wait_for(lambda: finished(home, job_id), 120, 0.5, "the stop to be reconciled")
    assert (job.status, job.exit_code) == ("stopped", 143), open(job.log_path).read()
    resume = [p for p in resources.output_paths(job) if p.endswith("_resume.pth")][0]
    assert os.path.isfile(resume)
    # Resuming queues a new Slurm job that starts from that state.
    from mmcore.queue import launch

    new_id = launch.resume(home, job, gpu_count=0)
    new = home.get(new_id)
    assert new.backend == "slurm" and new.params["from_resume"] == "1"
    backends.stop(home, new_id)


def test_scancel_from_the_shell_is_reconciled(tmp_path, home):
    job_id = jobqueue.submit(home, "pretrain", pretrain_values(tmp_path, "scancel", lines=3000, epochs="3"),
                             backend="slurm", gpu_count=0)
    running = wait_for(lambda: (backends.refresh(home), home.get(job_id))[1].status == "running", 120, 0.5,
                       "the job to run")
    assert running
    subprocess.run(["scancel", home.get(job_id).external_id], check=True)
    job = wait_for(lambda: finished(home, job_id), 120, 0.5, "the cancel to be seen")
    assert job.status == "stopped" and english(job.note).endswith("CANCELLED")


def test_two_task_torchrun_rendezvous_trains(tmp_path, home):
    queueconf.save(home.home, queueconf.QueueSettings(slurm_tasks_per_node=2))
    job_id = jobqueue.submit(home, "pretrain", pretrain_values(tmp_path, "rdzv", lines=32), backend="slurm", gpu_count=0)
    script = (home.home / "slurm" / f"job-{job_id}.sbatch")
    job = wait_for(lambda: finished(home, job_id), 300, 0.5, "the two-task job to end")
    log = open(job.log_path).read()
    assert job.status == "succeeded", log
    text = script.read_text()
    assert "--ntasks-per-node=2" in text and "--rdzv_backend c10d" in text and "--nnodes $SLURM_NTASKS" in text
    assert log.count("Model Params") == 1  # rank 0 alone logs
    frame = log_parser.parse_file(job.log_path)
    assert list(frame["step"]) == [1, 2]  # 32 lines over two ranks, batch 8: two steps
    import torch

    resume = [p for p in resources.output_paths(job) if p.endswith("_resume.pth")][0]
    assert torch.load(resume, weights_only=False)["world_size"] == 2


def test_cluster_summary_lists_the_partition(cluster):
    rows = slurm.cluster_summary()
    assert rows and rows[0]["partition"].rstrip("*") == "debug" and rows[0]["nodes"] >= 1


def test_a_guard_stops_a_slurm_job_from_its_records(tmp_path, home):
    """A Slurm job has no local supervisor: the queue follows its records for its guards (mmcore.queue.slurm_guards)."""
    from mmcore.access import audit
    from mmcore.runs import guards

    job_id = jobqueue.submit(home, "pretrain", pretrain_values(tmp_path, "guarded", lines=3000, epochs="3"), backend="slurm",
                             gpu_count=0)
    guards.save(home.path, job_id, guards.parse({"loss_above": "0.01", "patience": "2"}))
    job = wait_for(lambda: finished(home, job_id), 240, 0.5, "the guard to stop the Slurm job")
    assert job.status == "stopped", open(job.log_path).read()
    assert english(job.note).startswith("stopped by a guard: loss_above"), english(job.note)
    [stop] = [e for e in audit.entries(job_id, home=home.home) if e.action == "guard_stop"]
    assert (stop.user, stop.detail["request"]) == (guards.AUDIT_ACTOR, {"guard": "loss_above"})
