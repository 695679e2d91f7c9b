"""A launch whose base weight a queued or running job will write: the refusal names that job and the
launch can be queued after it (it waits until that job has succeeded); a job the queue still holds is
deleted in one act. Real job store, real queue rounds, no scheduler process."""
import pytest

from mmcore.actions import job_acts
from mmcore.base.paths import TRAINER_DIR
from mmcore.jobs.jobstore import JobStore
from mmcore.queue import launch, queueconf, scheduler
from mmcore.train import commandline
from mmcore.train.preset_table import demo_preset


@pytest.fixture
def store(tmp_path, monkeypatch):
    # No scheduler process: the jobs stay in the queue, and the tests drive its rounds themselves.
    monkeypatch.setattr("mmcore.jobs.scheduler_lock.ensure_running", lambda store: None)
    return JobStore(tmp_path / "home" / "jobs.db")


def demo(train_type, folder):
    """The demo preset of `train_type` with its weights read from and written to `folder`."""
    return {**demo_preset(train_type), "device": "cpu", "weight_dir": str(folder), "save_dir": str(folder)}


def queue_reason_job(store, folder):
    """A queued Reasoning distill job (it writes reason_64.pth in `folder`) whose own base weight is there."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "full_sft_64.pth").write_bytes(b"weights")
    outcome = job_acts.launch_job(store, "distill_reason", "reason", demo("distill_reason", folder))
    assert outcome.done, outcome.message
    return outcome.value


def test_a_weight_a_queued_job_writes_is_pending_and_names_that_job(store, tmp_path):
    folder = tmp_path / "w"
    writer = queue_reason_job(store, folder)
    grpo = demo("grpo", folder)

    # Without the store (no job can write it) the weight is missing, as before.
    alone = launch.check("grpo", grpo, 0)
    assert not alone.pending and alone.after is None
    assert any(p.startswith(f"Base weight not found: {folder / 'reason_64.pth'}") for p in alone.problems)

    checked = launch.check("grpo", grpo, 0, store=store)
    assert checked.problems == [] and not checked.ok
    [pending] = checked.pending
    assert (pending.path, pending.job_id) == (folder / "reason_64.pth", writer)
    assert f"Job {writer} (Reasoning distill, queued) will write it" in pending.message
    assert checked.after == writer

    # Launch refuses it, naming the job, and queues nothing.
    refused = job_acts.launch_job(store, "grpo", "rl", grpo)
    assert not refused.done
    assert f"Job {writer} (Reasoning distill, queued) will write it" in refused.message
    assert store.count() == 1


def test_queue_after_waits_for_the_writer_and_is_held_when_it_fails(store, tmp_path):
    folder = tmp_path / "w"
    writer = queue_reason_job(store, folder)
    grpo = demo("grpo", folder)
    assert not job_acts.launch_job(store, "grpo", "rl", grpo, after=writer + 5).done  # not its writer

    outcome = job_acts.launch_job(store, "grpo", "rl", grpo, after=writer)
    assert outcome.done and outcome.message == f"Queued job {outcome.value}: it starts when job {writer} has succeeded."
    job = store.get(outcome.value)
    assert job.depends_on == writer and job.in_queue
    assert "--weight_dir " + str(folder) in " ".join(job.argv)

    queue = scheduler.Queue(store, list_gpus=lambda: [])
    _, decisions = queue.decide(queueconf.QueueSettings(cpu_slots=4))
    waits = {d.job_id: d for d in decisions}
    assert not waits[job.id].start  # the writer has not succeeded yet

    store.cancel_waiting(writer)  # the writer ends without writing the weight
    assert queue.block_after_failures() == [job.id]
    assert store.get(job.id).status == "blocked"


def test_another_problem_still_refuses_queue_after(store, tmp_path):
    folder = tmp_path / "w"
    writer = queue_reason_job(store, folder)
    bad = {**demo("grpo", folder), "data_path": str(tmp_path / "missing.jsonl")}
    checked = launch.check("grpo", bad, 0, store=store)
    assert checked.pending and checked.problems and checked.after is None
    assert not job_acts.launch_job(store, "grpo", "rl", bad, after=writer).done
    assert store.count() == 1


def test_a_running_writer_counts_and_an_ended_one_does_not(store, tmp_path):
    folder = tmp_path / "w"
    writer = queue_reason_job(store, folder)
    store.update(writer, status="running", waiting=0)
    checked = launch.check("grpo", demo("grpo", folder), 0, store=store)
    assert [p.job_status for p in checked.pending] == ["running"]
    assert "(Reasoning distill, running)" in checked.pending[0].message
    store.update(writer, status="failed")
    checked = launch.check("grpo", demo("grpo", folder), 0, store=store)
    assert not checked.pending and any(p.startswith("Base weight not found") for p in checked.problems)


def test_relative_weight_dirs_match_the_writers_save_dir(store, tmp_path):
    """The writer names its folder relative to trainer/ and the launch absolutely (or the other way round)."""
    folder = (TRAINER_DIR / ".." / "out" / "queue-after-test").resolve()
    assert not folder.exists()
    try:
        values = {**demo("distill_reason", "../out/queue-after-test")}
        cmd = commandline.build_command("distill_reason", values)
        writer = store.create("distill_reason", "r", values, cmd.argv, cmd.cwd, cmd.env, waiting=1)
        checked = launch.check("grpo", demo("grpo", folder), 0, store=store)
        assert [p.job_id for p in checked.pending] == [writer]
    finally:
        if folder.exists():
            folder.rmdir()


def test_a_queued_job_is_deleted_in_one_act_and_its_followers_are_held(store, tmp_path):
    folder = tmp_path / "w"
    writer = queue_reason_job(store, folder)
    follower = job_acts.launch_job(store, "grpo", "rl", demo("grpo", folder), after=writer).value
    assert job_acts.delete_refusal(store, writer) is None
    outcome = job_acts.delete_job(store, writer)
    assert outcome.done, outcome.message
    assert store.get(writer) is None
    assert store.get(follower).status == "blocked"  # held, not waiting for a job that is gone

    # A job handed to its backend (queued, no longer waiting) still needs a Stop first.
    other = queue_reason_job(store, tmp_path / "v")
    store.update(other, waiting=0)
    assert "stop it before deleting it" in job_acts.delete_refusal(store, other)
    assert not job_acts.delete_job(store, other).done


def test_the_api_and_the_command_line_queue_after_a_job(store, tmp_path, monkeypatch, capsys):
    from mmcore import api, cli
    monkeypatch.setenv("MINIMIND_DASHBOARD_HOME", str(store.home))
    folder = tmp_path / "w"
    writer = queue_reason_job(store, folder)
    with pytest.raises(api.Refused, match=f"Job {writer} \\(Reasoning distill, queued\\) will write it"):
        api.submit("grpo", demo("grpo", folder))
    first = api.submit("grpo", demo("grpo", folder), name="api", after=writer)
    assert store.get(first).depends_on == writer
    sets = sum((["--set", f"{k}={v}"] for k, v in demo("grpo", folder).items() if k != "save_weight"), [])
    assert cli.main(["submit", "grpo", *sets, "--set", "save_weight=grpo_cli", "--after", str(writer)]) == 0
    second = int(capsys.readouterr().out.split()[-1])
    assert second != first and store.get(second).depends_on == writer
