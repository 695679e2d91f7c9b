"""The Jobs page's logic: formatting, rows, and progress parsed incrementally from logs."""
import dataclasses
import time
from pathlib import Path

import pytest

from mmcore import jobsview
from mmcore.gpu import GpuInfo
from mmcore.store import Job

T0 = 1_767_000_000.0  # a fixed unix time


def make_job(tmp_path, job_id=1, status="running", train_type="pretrain", params=None, started=T0, ended=None,
             log=None):
    path = tmp_path / f"job-{job_id}.log"
    if log is not None:
        path.write_text(log, encoding="utf-8")
    return Job(id=job_id, train_type=train_type, name=f"{train_type}-{job_id}", status=status,
               params=params if params is not None else {"epochs": "2"}, argv=["python", "x.py", "--a", "b c"],
               cwd="/tmp", env={}, log_path=str(path), created_at=T0 - 5, user="ann", host="gpu-box",
               started_at=started, ended_at=ended)


def pretrain_line(epoch, step, total, loss):
    return f"Epoch:[{epoch}/2]({step}/{total}) loss:{loss} lr:0.0005 epoch_Time:3.0min:\n"


@pytest.mark.parametrize("seconds, text", [
    (None, ""), (0, "0s"), (44.6, "45s"), (59, "59s"), (60, "1m 00s"), (725, "12m 05s"),
    (3 * 3600 + 7 * 60 + 5, "3h 07m"), (2 * 86400 + 4 * 3600, "2d 04h"), (-3, "0s")])
def test_format_duration(seconds, text):
    assert jobsview.format_duration(seconds) == text


def test_small_formatters():
    assert jobsview.format_time(None) == ""
    assert len(jobsview.format_time(T0)) == len("2026-01-02 03:04:05")
    assert jobsview.type_short("grpo") == "GRPO"
    assert jobsview.type_short("old_type") == "old_type"
    assert "@" in jobsview.whoami()
    g = GpuInfo(index=1, name="NVIDIA H200", memory_used=2 * 1024 ** 3, memory_total=140 * 1024 ** 3, utilization=35)
    assert jobsview.gpu_line(g) == "GPU 1 · NVIDIA H200 · 2.0 / 140.0 GiB · 35%"
    assert jobsview.needs_refresh({"running": 0, "queued": 1, "failed": 3})
    assert not jobsview.needs_refresh({"running": 0, "queued": 0, "succeeded": 9})


@pytest.mark.parametrize("text, result", [
    (None, (None, None)), ("", (None, None)), ("12", (12, None)), (" 7 ", (7, None))])
def test_parse_job_id(text, result):
    assert jobsview.parse_job_id(text) == result


def test_parse_job_id_rejects_non_numbers():
    job_id, message = jobsview.parse_job_id("abc")
    assert job_id is None and "not a job id" in message


def test_running_row_has_progress_step_metric_and_eta(tmp_path):
    log = "# job 1 · type pretrain · p\n" + pretrain_line(1, 50, 100, 2.5)
    job = make_job(tmp_path, log=log)
    cache = jobsview.ProgressCache()
    row = jobsview.job_rows([job], cache, now=T0 + 100)[0]
    assert list(row) == list(jobsview.COLUMNS)
    assert row["progress"] == 25.0  # step 50 of 2 epochs x 100 steps
    assert row["step"] == "50/200"
    assert row["metric"] == "loss 2.5"
    assert row["eta"] == "5m 00s"  # 100 s for a quarter: 300 s to go
    assert row["duration"] == "1m 40s"
    assert row["submitted_by"] == "ann@gpu-box"
    assert row["status"] == "running"
    assert row["type"] == "Pretrain"


def test_rl_row_prefers_reward_and_uses_the_params_epochs(tmp_path):
    log = "Epoch: 1, Step: 3/10, Actor Loss: 0.012345, Reward: 0.512300, Avg Response Len: 88.00, LR: 8.00e-08\n"
    job = make_job(tmp_path, train_type="grpo", params={"epochs": "1"}, log=log)
    row = jobsview.job_row(job, jobsview.ProgressCache().progress(job, T0 + 30), now=T0 + 30)
    assert row["metric"] == "Reward 0.5123"
    assert row["step"] == "3/10" and row["progress"] == 30.0


def test_running_jobs_are_parsed_incrementally(tmp_path):
    job = make_job(tmp_path, log=pretrain_line(1, 10, 100, 3.0))
    cache = jobsview.ProgressCache()
    assert cache.progress(job, T0 + 10)["step"] == 10
    parser = cache.parser(job.log_path)
    position = parser.position
    with open(job.log_path, "a", encoding="utf-8") as f:
        f.write(pretrain_line(1, 20, 100, 2.0))
    prog = cache.progress(job, T0 + 20)
    assert cache.parser(job.log_path) is parser  # the same parser, continuing where it stopped
    assert parser.position > position
    assert prog["step"] == 20 and prog["loss"] == 2.0


def test_finished_jobs_are_parsed_once(tmp_path):
    job = make_job(tmp_path, status="succeeded", ended=T0 + 60, log=pretrain_line(2, 100, 100, 1.5))
    cache = jobsview.ProgressCache()
    first = cache.progress(job)
    assert first["percent"] == 100.0 and first["eta_s"] is None
    # Changing the file does not matter any more: the finished result is remembered, no parser kept.
    with open(job.log_path, "a", encoding="utf-8") as f:
        f.write(pretrain_line(2, 50, 100, 9.0))
    assert cache.progress(job) is first
    assert cache.parser(job.log_path) is None
    cache.forget(job.log_path)
    assert len(cache) == 0
    assert cache.progress(job)["loss"] == 9.0


def test_finished_job_with_a_stored_summary_is_not_parsed(tmp_path):
    log = pretrain_line(1, 40, 100, 2.5) + pretrain_line(2, 100, 100, 1.5)
    job = make_job(tmp_path, status="failed", ended=T0 + 60, log=log)
    summary = jobsview.final_progress(job)
    assert (summary["step"], summary["total"], summary["loss"], summary["eta_s"]) == (200, 200, 1.5, None)

    # The runner stored the summary; the log then went away: the row is the same.
    stored = dataclasses.replace(job, final_progress=summary)
    Path(job.log_path).unlink()
    cache = jobsview.ProgressCache()
    assert jobsview.job_row(stored, cache.progress(stored)) == jobsview.job_row(job, summary)
    assert cache.parser(job.log_path) is None and len(cache) == 0


def test_finished_job_without_a_stored_summary_falls_back_to_its_log(tmp_path):
    job = make_job(tmp_path, status="stopped", ended=T0 + 60, log=pretrain_line(1, 40, 100, 2.5))
    assert job.final_progress is None  # ended before summaries were stored, or its log failed to parse
    prog = jobsview.ProgressCache().progress(job)
    assert (prog["step"], prog["total"], prog["loss"], prog["eta_s"]) == (40, 200, 2.5, None)
    assert prog == jobsview.final_progress(job)


def test_a_job_that_ended_drops_its_parser_for_the_stored_summary(tmp_path):
    job = make_job(tmp_path, log=pretrain_line(1, 40, 100, 2.5))
    cache = jobsview.ProgressCache()
    cache.progress(job, T0 + 10)
    assert cache.parser(job.log_path) is not None
    summary = jobsview.final_progress(job)
    ended = dataclasses.replace(job, status="succeeded", ended_at=T0 + 20, final_progress=summary)
    assert cache.progress(ended) == summary
    assert cache.parser(job.log_path) is None and len(cache) == 0


def test_missing_log_and_finished_rows(tmp_path):
    queued = make_job(tmp_path, job_id=2, status="queued", started=None)
    failed = make_job(tmp_path, job_id=3, status="failed", ended=T0 + 3725)
    succeeded = make_job(tmp_path, job_id=4, status="succeeded", ended=T0 + 1, log="no progress lines\n")
    rows = jobsview.job_rows([queued, failed, succeeded], jobsview.ProgressCache(), now=T0 + 10_000)
    assert rows[0]["progress"] == 0.0 and rows[0]["step"] == "" and rows[0]["duration"] == ""
    assert rows[1]["duration"] == "1h 02m" and rows[1]["eta"] == ""
    assert rows[2]["progress"] == 100.0  # succeeded means done, whatever the log printed


def test_many_finished_jobs_cost_one_parse_each(tmp_path):
    """2,000 finished jobs: the first table parses each log once; later refreshes parse nothing."""
    jobs = [make_job(tmp_path, job_id=i, status="succeeded", ended=T0 + 60, log=pretrain_line(1, 5, 10, 1.0))
            for i in range(2000)]
    cache = jobsview.ProgressCache()
    jobsview.job_rows(jobs, cache)
    for job in jobs[:50]:
        with open(job.log_path, "a", encoding="utf-8") as f:
            f.write(pretrain_line(1, 9, 10, 0.5))
    rows = jobsview.job_rows(jobs, cache)
    assert all(row["step"] == "5/20" for row in rows)  # cached, not re-read
    assert len(cache) == 2000


def test_params_rows_follow_the_command_line_order():
    job = Job(id=1, train_type="grpo", name="g", status="succeeded",
              params={"beta": "0.02", "epochs": "1", "gpus": [0, 1], "zzz": None}, argv=["x"], cwd="", env={},
              log_path="", created_at=time.time())
    rows = jobsview.params_rows(job)
    assert [r["parameter"] for r in rows] == ["epochs", "beta", "gpus", "zzz"]
    assert rows[2]["value"] == "0,1" and rows[3]["value"] == ""


def test_job_label():
    job = Job(id=12, train_type="sft", name="sft-a", status="queued", params={}, argv=["x"], cwd="", env={},
              log_path="", created_at=T0)
    assert jobsview.job_label(job) == "12 — sft-a"


# -- actions (with a real store; a "running" job is a sleeping Python process under the runner) --

@pytest.fixture
def store(tmp_path):
    from mmcore import runner
    from mmcore.store import JobStore
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
    from mmcore import runner
    assert jobsview.stop_job(store, 99).kind == "error"
    assert jobsview.stop_job(store, ended_job(store)).kind == "warning"
    job_id = store.create("sft", "s", {}, sleeper_argv(), str(tmp_path), {})
    runner.launch(store, job_id)
    wait_for(lambda: store.get(job_id).status == "running", what="the job to run")
    assert jobsview.delete_refusal(store, job_id) == f"Job {job_id} is running: stop it before deleting it."
    assert jobsview.delete_job(store, job_id).kind == "error"  # refused even without the page's check
    outcome = jobsview.stop_job(store, job_id)
    assert outcome.kind == "info" and "SIGTERM" in outcome.message
    wait_for(lambda: store.get(job_id).status == "stopped", what="the job to stop")


def test_delete_job_removes_row_log_and_cache(store):
    job_id = ended_job(store)
    job = store.get(job_id)
    with open(job.log_path, "w", encoding="utf-8") as f:
        f.write(pretrain_line(1, 1, 10, 1.0))
    cache = jobsview.ProgressCache()
    cache.progress(job)
    assert jobsview.delete_refusal(store, job_id) is None
    outcome = jobsview.delete_job(store, job_id, cache)
    assert outcome.kind == "success"
    assert store.get(job_id) is None and len(cache) == 0
    assert jobsview.delete_job(store, job_id).kind == "error"
    assert jobsview.delete_refusal(store, job_id) == f"There is no job with id {job_id}."


def test_resume_job_is_refused_with_the_preflight_reasons(store):
    job_id = ended_job(store, "sft", {"data_path": "/nonexistent/data.jsonl", "device": "cpu"})
    outcome = jobsview.resume_job(store, job_id, gpu_count=0)
    assert outcome.kind == "error" and outcome.message.startswith("Resume refused")
    assert "Data file not found" in outcome.message
    assert store.count() == 1
    assert jobsview.resume_job(store, 99, 0).kind == "error"


def test_clone_request_carries_type_params_and_name(store):
    job = store.get(ended_job(store, "dpo", {"beta": "0.2"}))
    assert jobsview.clone_request(job) == {"train_type": "dpo", "params": {"beta": "0.2"}, "job_id": job.id,
                                          "name": "j"}
