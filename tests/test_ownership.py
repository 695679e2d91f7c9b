"""Jobs own their files: a launch that would write an active job's weight or resume file is refused,
and a Resume tells its trainer whose state it continues."""
import pytest

from mmcore import api, ownership, roles
from mmcore.presets import demo_preset
from mmcore.store import JobStore
from trainer import ownership as trainer_ownership


@pytest.fixture
def team(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    (home / "roles.toml").write_text('[users]\nalice = "member"\nbob = "member"\n')
    monkeypatch.setenv("MINIMIND_DASHBOARD_HOME", str(home))
    monkeypatch.delenv(roles.ROLES_ENV, raising=False)
    yield home
    for job in api.list_jobs(status=["queued", "running"]):
        api.stop(job["id"], user=job["owner"], grace=2, wait=True)


def tiny(**changes):
    return {**demo_preset("pretrain"), "epochs": "1", "save_weight": "shared", **changes}


def test_a_second_live_job_on_the_same_files_is_refused_with_the_owner(team):
    first = api.submit("pretrain", tiny(), user="alice")
    with pytest.raises(api.Refused, match=rf"Job {first} \(owner alice, (queued|running)\) is writing .*shared_64\.pth"):
        api.submit("pretrain", tiny(), user="bob")
    with pytest.raises(api.Refused, match="shared_64_resume.pth"):  # same resume file from another folder
        api.submit("pretrain", tiny(save_dir="../out/demo/elsewhere"), user="bob")
    other = api.submit("pretrain", tiny(save_weight="bobs"), user="bob")  # another name is fine
    assert api.get(other)["owner"] == "bob"
    api.stop(first, user="alice", grace=5, wait=True)
    third = api.submit("pretrain", tiny(), user="bob")  # the file is free once its writer ended
    assert api.get(third)["status"] in ("queued", "running")


def test_a_resume_tells_the_trainer_which_jobs_state_it_continues(team):
    store = JobStore()
    first = store.create("pretrain", "a", tiny(), ["true"], "/tmp", {}, user="alice")
    store.update(first, status="stopped")
    second = api.resume(first, user="alice")
    api.stop(second, user="alice", grace=5, wait=True)
    third = api.resume(second, user="alice")
    env = ownership.trainer_env(store, store.get(third))
    assert env == {trainer_ownership.JOB_ENV: str(third), trainer_ownership.RESUME_OF_ENV: f"{second},{first}"}
    assert trainer_ownership.RESUME_OF_ENV not in ownership.trainer_env(store, store.get(first))
    with pytest.raises(api.Refused, match="belongs to alice"):
        api.resume(first, user="bob")
