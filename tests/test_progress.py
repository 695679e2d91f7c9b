"""Progress summaries: the maths, and the cache that parses running jobs' logs incrementally."""
import dataclasses
from pathlib import Path

import pytest
from test_jobtable import T0, make_job, pretrain_line
from test_logparse import DATA

from mmcore.jobs import jobtable, progress
from mmcore.logs.log_parser import parse_file


def test_progress_maths():
    records = [{"epoch": 1, "total_epochs": 2, "step": 50, "total_steps": 100, "global_step": 50, "loss": 3.0},
               {"epoch": 2, "total_epochs": 2, "step": 50, "total_steps": 100, "global_step": 150, "loss": 2.0}]
    p = progress.summarize(records, started_at=1000.0, now=1300.0)
    # 150 of 200 steps in 300 s: 400 s in all, 100 s left.
    assert p.percent == 75.0 and p.step == 150 and p.total == 200
    assert p.eta_s == pytest.approx(100.0)
    assert (p.loss, p.loss_name, p.reward) == (2.0, "loss", None)
    assert (p.epoch, p.total_epochs) == (2, 2)
    assert progress.summarize(records).eta_s is None  # no start time
    assert progress.summarize([]).percent == 0.0 and progress.summarize([]).total is None


def test_progress_of_rl_records_and_dataframe():
    df = parse_file(DATA / "dashboard_grpo.log")
    p = progress.summarize(df, started_at="2026-12-02T10:00:00+00:00", now="2026-12-02T10:01:00+00:00")
    # RL lines print no total epochs: the latest epoch (1) is taken as the last.
    assert p.total == 10 and p.step == 5 and p.percent == 50.0
    assert p.eta_s == pytest.approx(60.0)
    assert (p.loss_name, p.loss) == ("Actor Loss", 0.000549999999)
    assert (p.reward_name, p.reward) == ("Reward", 0.75)
    assert progress.summarize(df, total_epochs=4).total == 40


def test_stored_summary_round_trips_and_ignores_unknown_keys():
    p = progress.Progress(percent=50.0, step=5, total=10, loss=1.5, loss_name="loss")
    assert progress.Progress.from_dict({**p.as_dict(), "added_later": 1}) == p
    assert p.latest_metric_text() == "loss 1.5"
    assert progress.Progress(reward=0.51234, reward_name="Reward", loss=2.0, loss_name="loss").latest_metric_text() == "Reward 0.5123"
    assert progress.Progress().latest_metric_text() == ""


def test_running_jobs_are_parsed_incrementally(tmp_path):
    job = make_job(tmp_path, log=pretrain_line(1, 10, 100, 3.0))
    cache = progress.ProgressCache()
    assert cache.progress(job, T0 + 10).step == 10
    parser = cache.parser(job.log_path)
    position = parser.position
    with open(job.log_path, "a", encoding="utf-8") as f:
        f.write(pretrain_line(1, 20, 100, 2.0))
    prog = cache.progress(job, T0 + 20)
    assert cache.parser(job.log_path) is parser  # the same parser, continuing where it stopped
    assert parser.position > position
    assert prog.step == 20 and prog.loss == 2.0


def test_finished_jobs_are_parsed_once(tmp_path):
    job = make_job(tmp_path, status="succeeded", ended=T0 + 60, log=pretrain_line(2, 100, 100, 1.5))
    cache = progress.ProgressCache()
    first = cache.progress(job)
    assert first.percent == 100.0 and first.eta_s is None
    # Changing the file does not matter any more: the finished result is remembered, no parser kept.
    with open(job.log_path, "a", encoding="utf-8") as f:
        f.write(pretrain_line(2, 50, 100, 9.0))
    assert cache.progress(job) is first
    assert cache.parser(job.log_path) is None
    cache.forget(job.log_path)
    assert len(cache) == 0
    assert cache.progress(job).loss == 9.0


def test_finished_job_with_a_stored_summary_is_not_parsed(tmp_path):
    log = pretrain_line(1, 40, 100, 2.5) + pretrain_line(2, 100, 100, 1.5)
    job = make_job(tmp_path, status="failed", ended=T0 + 60, log=log)
    summary = progress.final_progress(job)
    assert (summary.step, summary.total, summary.loss, summary.eta_s) == (200, 200, 1.5, None)

    # The runner stored the summary; the log then went away: the row is the same.
    stored = dataclasses.replace(job, final_progress=summary.as_dict())
    Path(job.log_path).unlink()
    cache = progress.ProgressCache()
    assert jobtable.job_row(stored, cache.progress(stored)) == jobtable.job_row(job, summary)
    assert cache.parser(job.log_path) is None and len(cache) == 0


def test_finished_job_without_a_stored_summary_falls_back_to_its_log(tmp_path):
    job = make_job(tmp_path, status="stopped", ended=T0 + 60, log=pretrain_line(1, 40, 100, 2.5))
    assert job.final_progress is None  # ended before summaries were stored, or its log failed to parse
    prog = progress.ProgressCache().progress(job)
    assert (prog.step, prog.total, prog.loss, prog.eta_s) == (40, 200, 2.5, None)
    assert prog == progress.final_progress(job)


def test_a_job_that_ended_drops_its_parser_for_the_stored_summary(tmp_path):
    job = make_job(tmp_path, log=pretrain_line(1, 40, 100, 2.5))
    cache = progress.ProgressCache()
    cache.progress(job, T0 + 10)
    assert cache.parser(job.log_path) is not None
    summary = progress.final_progress(job)
    ended = dataclasses.replace(job, status="succeeded", ended_at=T0 + 20, final_progress=summary.as_dict())
    assert cache.progress(ended) == summary
    assert cache.parser(job.log_path) is None and len(cache) == 0


def test_many_finished_jobs_cost_one_parse_each(tmp_path):
    """2,000 finished jobs: the first table parses each log once; later refreshes parse nothing."""
    jobs = [make_job(tmp_path, job_id=i, status="succeeded", ended=T0 + 60, log=pretrain_line(1, 5, 10, 1.0))
            for i in range(2000)]
    cache = progress.ProgressCache()
    jobtable.job_rows(jobs, cache)
    for job in jobs[:50]:
        with open(job.log_path, "a", encoding="utf-8") as f:
            f.write(pretrain_line(1, 9, 10, 0.5))
    rows = jobtable.job_rows(jobs, cache)
    assert all(row["step"] == "5/20" for row in rows)  # cached, not re-read
    assert len(cache) == 2000
