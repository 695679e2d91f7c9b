"""A run is a run across resumes: one curve with the resume point marked, an ETA from the resumed
job's own pace, and the Jobs table keeping a job's resumes under it."""
import time

import pandas as pd
import pytest

from mmcore.jobs import jobtable, progress
from mmcore.jobs.jobstore import JobStore
from mmcore.runs import resumes


@pytest.fixture
def store(tmp_path):
    return JobStore(tmp_path / "home" / "jobs.db")


def lines(steps, total=1000):
    return "".join(f"Epoch:[1/1]({s}/{total}) loss:{5 - s / 1000:.4f} lr:0.0005 epoch_Time:1.0min:\n" for s in steps)


def job(store, name, params, log="", status="succeeded", started=None, run_dir=None):
    argv = ["python", "train_pretrain.py"] + (["--run_dir", str(run_dir)] if run_dir else [])
    job_id = store.create("pretrain", name, params, argv, "/tmp", {})
    store.update(job_id, status=status, started_at=started or time.time() - 60)
    with open(store.get(job_id).log_path, "w") as f:
        f.write(log)
    return store.get(job_id)


def test_a_resumed_job_keeps_its_own_pace_in_its_eta(store, tmp_path):
    """The parent did steps 0-400; the resume started 60 s ago at step 400 and is at step 460 (one
    step a second): 540 steps are left, so about 540 s, not the 70 s that counting the parent's
    steps as done in those 60 s gives."""
    resumed = job(store, "r", {"from_resume": "1", "log_interval": "10"}, lines(range(410, 461, 10)),
                  status="running", started=time.time() - 60)
    store.update(resumed.id, supervisor_pid=None)
    prog = progress.ProgressCache().progress(store.get(resumed.id))
    assert prog.step == 460 and prog.eta_s == pytest.approx(540, rel=0.05)
    fresh = progress.summarize(pd.DataFrame([{"epoch": 1, "total_steps": 1000, "global_step": 460}]),
                               started_at=time.time() - 60)
    assert fresh.eta_s == pytest.approx(60 / 0.46 - 60, rel=0.05)  # a fresh job: all 460 steps were its own


def test_resumes_join_into_one_curve_with_the_resume_point_marked():
    parent = pd.DataFrame({"global_step": [100, 200, 300, 400, 500], "loss": [5.0, 4.0, 3.0, 2.5, 2.4]})
    resumed = pd.DataFrame({"global_step": [410, 420, 500, 600], "loss": [2.6, 2.5, 2.3, 2.2]})
    table, marks = resumes.join([(1, parent), (2, resumed)])
    assert list(table["global_step"]) == [100, 200, 300, 400, 410, 420, 500, 600]  # the redone steps replaced
    assert marks == [(410, 2)]


def test_jobs_sharing_a_records_folder_form_one_run_and_sit_together(store, tmp_path):
    first = job(store, "first", {})
    other = job(store, "other", {})
    shared = tmp_path / "home" / "records" / f"job-{first.id}"
    again = job(store, "first-resume", {"from_resume": "1"}, run_dir=shared)
    lineage = resumes.lineages([first, other, again], store.home)
    assert lineage[first.id] == lineage[again.id] == [first.id, again.id] and lineage[other.id] == [other.id]
    ordered, parents = resumes.table_order([again, other, first], store.home)  # newest first, as listed
    assert [j.name for j in ordered] == ["first-resume", "first", "other"] and parents == {again.id: first.id}
    rows = jobtable.mark_resumes([{"id": again.id, "name": "first-resume"}, {"id": first.id, "name": "first"}],
                                 parents)
    assert rows[0]["name"] == f"↳ first-resume (resumes {first.id})" and rows[1]["name"] == "first"


def test_start_step():
    class J:
        params = {"from_resume": "1", "log_interval": "100"}
    assert resumes.start_step(J, 4100) == 4000
    J.params = {"from_resume": "0"}
    assert resumes.start_step(J, 4100) == 0
