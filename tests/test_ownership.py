"""Jobs own their files: a launch that would write an active job's weight or resume file waits in
the queue for that job (told whose job it is), and a Resume tells its trainer whose state it continues."""
import pytest
from _runner_helpers import home_with_roles, wait_for

from mmcore import api
from mmcore.jobs.jobstore import JobStore
from mmcore.train import file_owners
from mmcore.train.preset_table import demo_preset
from trainer.rules import ownership as trainer_ownership


@pytest.fixture
def team(tmp_path, monkeypatch):
    yield home_with_roles(tmp_path, monkeypatch, alice="member", bob="member")
    for job in api.list_jobs(status=["queued", "running"]):
        api.stop(job["id"], user=job["owner"], grace=2, wait=True)


def tiny(**changes):
    return {**demo_preset("pretrain"), "epochs": "1", "save_weight": "shared", **changes}


def test_a_second_job_on_the_same_files_waits_for_the_first_and_names_its_owner(team):
    first = api.submit("pretrain", tiny(epochs="3"), user="alice")
    second = api.submit("pretrain", tiny(), user="bob")  # queued, not refused: it waits for alice's job
    elsewhere = api.submit("pretrain", tiny(save_dir="../out/demo/elsewhere"), user="bob")  # same resume file
    reason = wait_for(lambda: (api.get(second)["queue_reason"] or "") if f"job {first} (alice)"
                      in (api.get(second)["queue_reason"] or "") else None, 60, what="bob's job to say why it waits")
    assert "shared_64.pth" in reason and api.get(second)["status"] == "queued"
    assert "shared_64_resume.pth" in wait_for(lambda: api.get(elsewhere)["queue_reason"] if "_resume" in (
        api.get(elsewhere)["queue_reason"] or "") else None, 60, what="the resume file's writer to be named")
    api.stop(elsewhere, user="bob")
    api.stop(first, user="alice", grace=5, wait=True)
    # The files are free once their writer ended: the waiting job starts.
    wait_for(lambda: api.get(second)["status"] != "queued", 90, what="bob's job to start")
    assert api.get(second)["owner"] == "bob"


def test_a_resume_tells_the_trainer_which_jobs_state_it_continues(team):
    store = JobStore()
    first = store.create("pretrain", "a", tiny(), ["true"], "/tmp", {}, user="alice")
    store.update(first, status="stopped")
    second = api.resume(first, user="alice")
    api.stop(second, user="alice", grace=5, wait=True)
    third = api.resume(second, user="alice")
    env = file_owners.trainer_env(store, store.get(third))
    assert env == {trainer_ownership.JOB_ENV: str(third), trainer_ownership.RESUME_OF_ENV: f"{second},{first}",
                   trainer_ownership.USER_ENV: "alice", trainer_ownership.STORE_ENV: store.path}
    assert trainer_ownership.RESUME_OF_ENV not in file_owners.trainer_env(store, store.get(first))
    with pytest.raises(api.Refused, match="belongs to alice"):
        api.resume(first, user="bob")
