"""The Jobs page's actions with a real store; a "running" job is a sleeping Python process under the runner."""
import pytest
from test_jobtable import T0, pretrain_line

from mmcore.actions import job_acts
from mmcore.jobs import progress
from mmcore.widgets import train_form


@pytest.fixture
def store(tmp_path):
    from mmcore.jobs import runner
    from mmcore.jobs.jobstore import JobStore
    store = JobStore(tmp_path / "home" / "jobs.db")
    yield store
    for job in store.list(status=["queued", "running"], limit=None):
        runner.stop(store, job.id, grace=1, wait=True)


def ended_job(store, train_type="sft", params=None, status="failed"):
    job_id = store.create(train_type, "j", params or {}, ["python", "x.py"], "/tmp", {})
    store.update(job_id, status=status, started_at=T0, ended_at=T0 + 5)
    return job_id


def test_stop_job_outcomes(store, tmp_path):
    from _pages_helpers import sleeper_argv, wait_for

    from mmcore.jobs import runner
    assert job_acts.stop_job(store, 99).kind == "error"
    assert job_acts.stop_job(store, ended_job(store)).kind == "warning"
    job_id = store.create("sft", "s", {}, sleeper_argv(), str(tmp_path), {})
    runner.launch(store, job_id)
    wait_for(lambda: store.get(job_id).status == "running", what="the job to run")
    assert job_acts.delete_refusal(store, job_id) == f"Job {job_id} is running: stop it before deleting it."
    assert job_acts.delete_job(store, job_id).kind == "error"  # refused even without the page's check
    outcome = job_acts.stop_job(store, job_id)
    assert outcome.kind == "info" and "SIGTERM" in outcome.message
    wait_for(lambda: store.get(job_id).status == "stopped", what="the job to stop")


def test_delete_job_removes_row_log_and_cache(store):
    job_id = ended_job(store)
    job = store.get(job_id)
    with open(job.log_path, "w", encoding="utf-8") as f:
        f.write(pretrain_line(1, 1, 10, 1.0))
    cache = progress.ProgressCache()
    cache.progress(job)
    assert job_acts.delete_refusal(store, job_id) is None
    outcome = job_acts.delete_job(store, job_id, cache=cache)
    assert outcome.kind == "success"
    assert store.get(job_id) is None and len(cache) == 0
    assert job_acts.delete_job(store, job_id).kind == "error"
    assert job_acts.delete_refusal(store, job_id) == f"There is no job with id {job_id}."


def test_resume_job_is_refused_with_the_preflight_reasons(store, tmp_path):
    from mmcore.queue import launch
    job_id = ended_job(store, "sft", {"data_path": "../dataset/nonexistent/data.jsonl", "device": "cpu"})
    store.update(job_id, cwd=str(tmp_path / "trainer"))
    checkpoint = launch.resume_checkpoint(store.get(job_id))
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_bytes(b"resume state")  # it saved resume state: the preflight is what refuses
    outcome = job_acts.resume_job(store, job_id, gpu_count=0)
    assert outcome.kind == "error" and outcome.message.startswith("Resume refused")
    assert "Data file not found" in outcome.message
    assert store.count() == 1
    assert job_acts.resume_job(store, 99, gpu_count=0).kind == "error"


def test_clone_request_carries_type_params_and_name(store):
    job = store.get(ended_job(store, "dpo", {"beta": "0.2"}))
    assert train_form.clone_request(job) == {"train_type": "dpo", "params": {"beta": "0.2"}, "job_id": job.id,
                                          "name": "j"}


def test_stop_asks_the_backend_once(store, monkeypatch):
    """A waiting job that could not be taken out of the queue is not asked a second time."""
    from mmcore.queue import backends
    job_id = store.create("sft", "held", {}, ["python", "x.py"], "/tmp", {}, waiting=1)
    calls = []
    monkeypatch.setattr(backends, "stop", lambda store, job_id, **options: calls.append(job_id) or False)
    outcome = job_acts.stop_job(store, job_id)
    assert calls == [job_id] and outcome.kind == "warning" and outcome.done


def test_a_stop_is_recorded_alike_from_a_page_and_the_api(store, monkeypatch):
    from mmcore import api
    from mmcore.access import audit
    monkeypatch.setenv("MINIMIND_DASHBOARD_HOME", str(store.home))
    monkeypatch.setattr("mmcore.jobs.scheduler_lock.ensure_running", lambda store: None)
    held = [store.create("sft", f"held {i}", {}, ["python", "x.py"], "/tmp", {}, waiting=1) for i in range(2)]
    assert job_acts.stop_job(store, held[0]).message == f"Job {held[0]} left the queue without starting."
    assert api.stop(held[1]) is True
    records = {e.job_id: e.detail for e in audit.entries(home=store.home)}
    for job_id, entry in zip(held, ("page", "api")):
        assert records[job_id] == {"entry": entry, "request": {"job": job_id},
                                   "result": {"was": "queued", "stopping": True}}


def test_resume_first_marks_a_job_whose_supervisor_died_as_ended(store):
    job_id = store.create("sft", "orphan", {}, ["python", "x.py"], "/tmp", {})
    store.update(job_id, status="running", started_at=T0)  # no supervisor: it died before registering
    outcome = job_acts.resume_job(store, job_id, gpu_count=0)
    assert store.get(job_id).status == "lost"
    assert outcome.refused and "saved no resume state" in outcome.message  # refused for what it lacks, not as running
