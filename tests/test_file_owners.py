"""Files have owners on every way in: a member's launch may not write over, or continue the resume state of,
weight and resume files another user's job wrote (the API, the CLI, the Train page, pipelines, Resume);
an admin's may, and the audit row says whose files it wrote over."""
import time
import uuid
from pathlib import Path

import pytest
from _pages_helpers import open_page, texts
from _runner_helpers import home_with_roles

from mmcore import api, cli
from mmcore.access import audit, roles
from mmcore.actions import queue_acts
from mmcore.base.paths import ROOT
from mmcore.jobs import jobnote
from mmcore.jobs.jobstore import JobStore
from mmcore.queue import scheduler
from mmcore.train import file_owners
from mmcore.train.preset_table import demo_preset
from trainer.rules import ownership, weight_meta

ME = roles.os_user()  # who the Train page acts as (local sign-in)


@pytest.fixture
def bobs_files(tmp_path, monkeypatch):
    """bob's ended job left its weight (in tmp/out) and its resume state (in the repository's checkpoints/),
    each with metadata naming bob's job of this store."""
    home_with_roles(tmp_path, monkeypatch, bob="member", carol="member", boss="admin", **{ME: "member"})
    store = JobStore()
    name = f"blocker{uuid.uuid4().hex[:8]}"
    job = store.create("pretrain", "bob's run", {}, ["true"], "/tmp", {}, user="bob")
    store.update(job, status="succeeded")
    weight = tmp_path / "out" / f"{name}_64.pth"
    resume = ROOT / "checkpoints" / f"{name}_64_resume.pth"
    weight.parent.mkdir()
    resume.parent.mkdir(exist_ok=True)
    for path in (weight, resume):
        path.write_bytes(b"stand-in")
        weight_meta.write_meta(str(path), {"format": weight_meta.FORMAT, "kind": "full", "job_id": job,
                                           "user": "bob", "store": store.path})
    values = {**demo_preset("pretrain"), "epochs": "1", "save_dir": str(weight.parent), "save_weight": name,
              "from_resume": "1"}
    yield store, values, weight, resume
    for job in api.list_jobs(status=["queued", "running"]):
        api.stop(job["id"], user="boss", grace=2, wait=True)
    for path in (resume, Path(weight_meta.meta_path(str(resume)))):
        path.unlink(missing_ok=True)


def test_a_members_launch_over_another_users_files_is_refused_on_every_way_in(bobs_files, capsys):
    store, values, weight, resume = bobs_files
    with pytest.raises(api.Refused, match="belongs to bob") as refused:
        api.submit("pretrain", values, user="carol")
    said = str(refused.value)
    assert str(weight) in said and str(resume) in said and "save_weight" in said  # the file, its owner, the way out
    assert cli.main(["submit", "pretrain", *[f"--set={k}={v}" for k, v in values.items()], "--user", "carol"]) == 1
    assert "belongs to bob" in capsys.readouterr().err
    pipeline = queue_acts.queue_pipeline(store, "p", [("pretrain", values)], user="carol")
    assert pipeline.refused and "belongs to bob" in pipeline.message
    # Only the resume state is bob's (another save_dir): still refused, naming that file.
    with pytest.raises(api.Refused, match="_resume.pth belongs to bob"):
        api.submit("pretrain", {**values, "save_dir": str(weight.parent / "mine")}, user="carol")
    # carol's own earlier job with the same output: its Resume would continue bob's state.
    own = store.create("pretrain", "carol's", values, ["true"], "/tmp", {}, user="carol")
    store.update(own, status="stopped")
    with pytest.raises(api.Refused, match="belongs to bob"):
        api.resume(own, user="carol")
    assert [j.user for j in store.list(limit=None)] == ["carol", "bob"]  # nothing was queued
    # Starting from bob's finished weight only reads it: allowed.
    sft = {**demo_preset("sft"), "weight_dir": str(weight.parent), "from_weight": values["save_weight"],
           "save_dir": str(weight.parent / "mine"), "save_weight": "carols_sft"}
    assert file_owners.others_files(store, "sft", sft, "carol") == []


def test_the_train_page_refuses_it_too(bobs_files):
    store, values, weight, _ = bobs_files
    at = open_page()
    at.selectbox(key="train.type").set_value("pretrain").run()
    [b for b in at.button if b.label == "Demo preset"][0].click().run()
    at.text_input(key="train.pretrain.save_dir").set_value(values["save_dir"]).run()
    at.text_input(key="train.pretrain.save_weight").set_value(values["save_weight"]).run()
    [b for b in at.button if b.label == "Launch"][0].click().run()
    assert not at.exception
    assert any(str(weight) in e and "belongs to bob" in e for e in texts(at.error)), texts(at.error)
    assert store.count() == 1


def test_an_admins_launch_may_and_the_trail_says_whose_files_it_wrote_over(bobs_files):
    store, values, weight, resume = bobs_files
    job_id = api.submit("pretrain", values, user="boss")
    api.stop(job_id, user="boss", grace=2, wait=True)
    [entry] = [e for e in audit.entries(job_id, home=store.home) if e.action == "launch"]
    assert entry.user == "boss" and any(str(weight) in o and "bob" in o for o in entry.detail["result"]["overwrites"])


def test_the_trainer_records_the_owner_and_store_beside_its_files(monkeypatch, tmp_path):
    monkeypatch.setenv(ownership.JOB_ENV, "7")
    monkeypatch.setenv(ownership.USER_ENV, "bob")
    monkeypatch.setenv(ownership.STORE_ENV, str(tmp_path / "jobs.db"))
    meta = weight_meta.resume_meta("x_resume.pth")
    assert (meta["job_id"], meta["user"], meta["store"], meta["kind"]) == (7, "bob", str(tmp_path / "jobs.db"),
                                                                           "resume")
    assert ownership.writer()["user"] == "bob"
    # A file written by another store's job 7 says nothing about this store's job 7.
    weight_meta.write_meta(str(tmp_path / "w.pth"), meta)
    assert file_owners.owner_of(tmp_path / "w.pth", tmp_path / "other" / "jobs.db") is None
    assert file_owners.owner_of(tmp_path / "w.pth", tmp_path / "jobs.db").user == "bob"


def test_a_job_that_waited_while_another_users_job_wrote_its_files_does_not_start_over_them(bobs_files, monkeypatch):
    store, values, weight, _ = bobs_files
    monkeypatch.setattr("mmcore.jobs.scheduler_lock.ensure_running", lambda store: None)  # the test runs the round
    mine = {**values, "save_weight": values["save_weight"] + "x", "from_resume": "0"}
    job_id = api.submit("pretrain", mine, user="carol")  # nobody's files yet: queued
    later = weight.with_name(f"{mine['save_weight']}_64.pth")  # while it waited, bob's job wrote them
    weight_meta.write_meta(str(later), {"format": weight_meta.FORMAT, "kind": "full", "job_id": 1, "user": "bob",
                                        "store": store.path, "saved_at": time.time()})
    scheduler.Queue(store).tick()
    job = store.get(job_id)
    assert job.status == "failed" and job.started_at is None
    assert str(later) in jobnote.english(job.note) and "bob" in jobnote.english(job.note)


def test_the_cli_export_writes_only_inside_the_write_roots(tmp_path, capsys):
    outside = Path("/opt") / f"mm-export-{uuid.uuid4().hex[:8]}"
    assert cli.main(["export", str(tmp_path / "w_64.pth"), str(outside)]) == 1
    assert "outside" in capsys.readouterr().err and not outside.exists()
