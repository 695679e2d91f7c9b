"""The Logs page's runs without Streamlit (mmcore.jobs.run_selection): what can be chosen, the runs of a
choice (a job and its resumes are one), labels, followed files, and what each run reads as."""
import os
import time
from dataclasses import dataclass, field

import pandas as pd

from mmcore.jobs import run_selection
from mmcore.runs import metric_stream
from trainer.rules import records

PRETRAIN = "".join(f"Epoch:[1/2]({s}/10) loss:{5 - s / 10} lr:0.0005 epoch_Time:1.0min:\n" for s in (2, 4, 6))


@dataclass
class Job:
    """What the selection reads of a job (a stand-in for mmcore.jobs.jobrow.Job)."""
    id: int
    name: str
    log_path: str | None
    train_type: str = "pretrain"
    params: dict = field(default_factory=dict)
    argv: list = field(default_factory=list)
    cwd: str = "/tmp"
    started_at: float | None = None
    active: bool = False


class Store:
    def __init__(self, jobs):
        self.jobs = {job.id: job for job in jobs}

    def get(self, job_id):
        return self.jobs.get(job_id)


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def recorded(run_dir, train_type="grpo", steps=3, rollouts=False):
    """A records folder with `steps` steps of metrics (and rollouts)."""
    rec = records.RunRecords(run_dir, train_type, rollouts=rollouts)
    for step in range(1, steps + 1):
        rec.log(step, 0, step, {"loss": 1.0 / step, "reward": 0.1 * step}, 8 * step, 100 * step)
        if rollouts:
            rec.add_rollouts(step, 0, [[{"prompt": "p", "reference": "r", "response": "x", "reward": 1.0,
                                         "advantage": 0.0, "length": 1, "truncated": False, "parts": {}}]])
    rec.close()
    return run_dir


# -- what can be chosen ------------------------------------------------------------------------------

def test_chosen_jobs_beyond_the_newest_are_added_and_unknown_ids_returned():
    old, new = Job(1, "old", None), Job(2, "new", None)
    jobs = {2: new}
    assert run_selection.with_chosen_jobs(Store([old, new]), jobs, [2, 1, 7, 9]) == [7, 9]
    assert jobs == {2: new, 1: old}


def test_loose_logs_are_the_files_of_no_job_newest_first(tmp_path):
    logs = tmp_path / "logs"
    assert run_selection.loose_logs(logs, {}) == []  # no folder yet
    mine = write(logs / "job-1.log", "")
    a, b = write(logs / "a.log", ""), write(logs / "b.log", "")
    write(logs / "notes.txt", "")
    os.utime(a, (time.time() - 60, time.time() - 60))
    assert run_selection.loose_logs(logs, {1: Job(1, "x", str(mine)), 2: Job(2, "y", None)}) == [b, a]


def test_loose_folders_are_records_of_no_job(tmp_path):
    home = tmp_path / "home"
    cli = recorded(metric_stream.records_dir(home) / "grpo-512")
    recorded(metric_stream.job_dir(home, 1))
    assert run_selection.loose_folders(home, {1: Job(1, "x", None)}) == [cli]


def test_still_there_keeps_the_choices_that_remain(tmp_path):
    paths = [tmp_path / "a.log", tmp_path / "c.log"]
    assert run_selection.still_there(["c.log", "b.log", "a.log"], paths) == ["c.log", "a.log"]


# -- the runs of a choice ----------------------------------------------------------------------------

def test_a_job_and_its_resumes_are_one_run_however_chosen(tmp_path):
    home, logs = tmp_path / "home", tmp_path / "logs"
    folder = str(metric_stream.job_dir(home, 1))
    parent = Job(1, "long", str(logs / "job-1.log"))
    resumed = Job(2, "long-resume", str(logs / "job-2.log"), params={"from_resume": "1"},
                  argv=["python", "x.py", "--run_dir", folder])
    other = Job(3, "", str(logs / "job-3.log"))
    jobs = {1: parent, 2: resumed, 3: other}
    runs = run_selection.chosen_runs(jobs, [1, 3, 2], ["up.log"], ["grpo-512"], home=home, logs_dir=logs)
    assert [r.label for r in runs] == ["2 — long-resume (resumed from 1)", "3", "up.log", "grpo-512"]
    first = runs[0]
    assert first.job is resumed and first.path == resumed.log_path and str(first.run_dir) == folder
    assert first.parts == [(1, parent.log_path), (2, resumed.log_path)]
    assert runs[2].path == str(logs / "up.log") and runs[2].job is None and runs[2].run_dir is None
    assert runs[3].path is None and runs[3].run_dir == metric_stream.records_dir(home) / "grpo-512"


def test_repeated_labels_are_numbered_and_followed_paths_listed(tmp_path):
    runs = [run_selection.Run("a.log", "/l/a.log"), run_selection.Run("a.log", "/u/a.log"),
            run_selection.Run("a.log", None, run_dir=tmp_path / "a"), run_selection.Run("b", "/l/b.log")]
    assert run_selection.distinct_labels(runs) is runs
    assert [r.label for r in runs] == ["a.log", "a.log (2)", "a.log (3)", "b"]
    assert run_selection.followed_paths(runs) == ["/l/a.log", "/u/a.log", "/l/b.log",
                                                  str(tmp_path / "a" / metric_stream.METRICS_FILE)]


def test_train_type_from_the_job_else_from_the_rollout_store(tmp_path):
    assert run_selection.Run("j", "x.log", Job(1, "j", "x.log", train_type="dpo")).train_type == "dpo"
    folder = recorded(tmp_path / "grpo-512", rollouts=True)
    assert run_selection.Run("f", None, None, folder).train_type == "grpo"
    assert run_selection.Run("m", None, None, recorded(tmp_path / "sft-512", "sft")).train_type is None
    assert run_selection.Run("u", "up.log").train_type is None
    assert run_selection.recorded([run_selection.Run("u", "up.log"), run_selection.Run("f", None, None, folder)])[0].label == "f"
    assert run_selection.with_rollouts([run_selection.Run("f", None, None, folder)]) == [("f", folder)]


# -- reading a run -----------------------------------------------------------------------------------

def test_a_parser_is_kept_and_reads_only_what_was_appended(tmp_path):
    log = write(tmp_path / "run.log", PRETRAIN)
    parsers = {}
    parser = run_selection.updated_parser(parsers, str(log))
    assert len(parser) == 3 and parsers == {str(log): parser}
    with open(log, "a") as f:
        f.write("Epoch:[1/2](8/10) loss:4.2 lr:0.0005 epoch_Time:1.0min:\n")
    assert run_selection.updated_parser(parsers, str(log)) is parser and len(parser) == 4


def test_a_log_reads_as_its_table_progress_and_summary(tmp_path):
    log = write(tmp_path / "job-1.log", PRETRAIN)
    job = Job(1, "demo", str(log), params={"epochs": "2"})
    reading = run_selection.read_run(run_selection.Run("1 — demo", str(log), job, tmp_path / "none"), {})
    assert reading.problem is None and reading.note is None and reading.last_error is None
    assert list(reading.table["global_step"]) == [2, 4, 6] and "loss" in reading.table.columns
    assert reading.train_type == "pretrain" and reading.marks == []
    assert reading.progress.step == 6 and reading.progress.total == 20  # two epochs of ten steps
    line = run_selection.summary_line("1 — demo", reading.progress)
    assert line.startswith("**1 — demo**") and "step 6 / 20 (30%)" in line and "loss 4.4" in line


def test_a_running_job_has_an_eta_counted_from_where_it_began():
    job = Job(1, "live", "x.log", started_at=1000.0, active=True, params={"epochs": "2"})
    parser = type("Parser", (), {"header": {}})()
    df = pd.DataFrame([{"epoch": 1, "total_steps": 10, "global_step": 5, "loss": 1.5}])
    prog = run_selection.run_progress(run_selection.Run("live", "x.log", job), df, parser, now=1100.0)
    assert prog.total == 20 and prog.eta_s == 300.0  # 100 s for 5 steps, 15 to go
    resumed = run_selection.run_progress(run_selection.Run("live", "x.log", job), df, parser, start_step=4, now=1100.0)
    assert resumed.eta_s == 1500.0  # only one step of its own in 100 s
    line = run_selection.summary_line("live", prog)
    assert "ETA" in line and "loss 1.5" in line
    ended = run_selection.run_progress(run_selection.Run("done", "x.log", Job(1, "", "x.log", started_at=1000.0)), df,
                                       parser, now=1100.0)
    assert ended.eta_s is None and "ETA" not in run_selection.summary_line("done", ended)


def test_a_resumed_run_is_joined_with_its_resume_marked(tmp_path):
    first = write(tmp_path / "job-1.log", PRETRAIN)
    second = write(tmp_path / "job-2.log", "".join(
        f"Epoch:[1/2]({s}/10) loss:{3 - s / 10} lr:0.0005 epoch_Time:1.0min:\n" for s in (5, 8)))
    job = Job(2, "again", str(second), params={"from_resume": "1", "epochs": "2", "log_interval": "2"})
    run = run_selection.Run("again", str(second), job, tmp_path / "none", parts=[(1, str(first)), (2, str(second))])
    reading = run_selection.read_run(run, {})
    assert list(reading.table["global_step"]) == [2, 4, 5, 8]
    assert [step for step, _ in reading.marks] == [5] and "2" in reading.marks[0][1]
    assert reading.progress.step == 8


def test_an_unreadable_or_empty_log_says_so(tmp_path):
    missing = run_selection.read_run(run_selection.Run("gone", str(tmp_path / "gone.log")), {})
    assert missing.table is None and missing.progress is None
    assert missing.problem is None and missing.note[0] == "warning" and "does not exist" in missing.note[1]
    folder = write(tmp_path / "a-folder.log" / "x", "").parent  # a folder where a log should be
    broken = run_selection.read_run(run_selection.Run("dir", str(folder)), {})
    assert broken.problem.startswith("dir: ") and broken.table is None
    nginx = write(tmp_path / "nginx.log", "GET / HTTP/1.1 200\n")
    note = run_selection.read_run(run_selection.Run("nginx.log", str(nginx)), {})
    assert note.table is None and note.note is not None and "not a MiniMind training log" in note.note[1]


def test_a_records_folder_alone_is_charted_from_its_metrics_stream(tmp_path):
    folder = recorded(tmp_path / "grpo-512", rollouts=True)
    reading = run_selection.read_run(run_selection.Run("grpo-512", None, None, folder), {})
    assert list(reading.table["global_step"]) == [1, 2, 3] and reading.train_type == "grpo"
    assert reading.progress is None and reading.problem is None
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run_selection.read_run(run_selection.Run("empty", None, None, empty), {}).table is None


def test_a_log_gets_the_positions_of_its_records(tmp_path):
    folder = recorded(tmp_path / "job-1", "pretrain", steps=6)
    log = write(tmp_path / "job-1.log", PRETRAIN)
    reading = run_selection.read_run(run_selection.Run("1", str(log), Job(1, "", str(log)), folder), {})
    assert list(reading.table["samples"]) == [16, 32, 48] and list(reading.table["tokens"]) == [200, 400, 600]
