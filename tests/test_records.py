"""Structured run records: the trainer-side writers (trainer/rules/records.py) and the dashboard readers
(mmcore.runs.metric_stream, mmcore.runs.rollout_store), with real files and real SQLite."""
import json
import math
import os
import sqlite3

import pytest

from mmcore.runs import metric_stream, rollout_store
from trainer.rules import records


def group(prompt, rewards, reference="42", advantage=None, truncated=(), parts=None):
    rows = []
    for i, reward in enumerate(rewards):
        rows.append({"prompt": prompt, "reference": reference, "response": f"answer {i} to {prompt}",
                     "reward": reward, "advantage": (advantage or [0.0] * len(rewards))[i], "length": 10 + i,
                     "truncated": i in truncated,
                     "parts": {k: v[i] for k, v in (parts or {"answer": list(rewards)}).items()},
                     "extras": {"kl": 0.01 * i, "format_ok": float(i % 2)}})
    return rows


def test_metrics_stream_round_trip(tmp_path):
    rec = records.RunRecords(tmp_path / "run", "grpo")
    rec.log(1, 0, 1, {"loss": 0.5, "reward": 1.0, "reward/format/mean": 0.25}, samples=2, tokens=100)
    rec.log(2, 0, 2, {"loss": float("nan"), "reward": 1.5}, samples=4, tokens=210)
    rec.close()
    df = metric_stream.read(tmp_path / "run")
    assert list(df["global_step"]) == [1, 2]
    assert list(df["samples"]) == [2, 4] and list(df["tokens"]) == [100, 210]
    assert df["reward/format/mean"].iloc[0] == 0.25 and math.isnan(df["reward/format/mean"].iloc[1])
    assert math.isnan(df["loss"].iloc[1])  # a NaN loss survives the round trip: health checks need it
    assert (df["elapsed_s"].diff().dropna() >= 0).all()
    assert "loss" in metric_stream.metric_columns(df) and "samples" not in metric_stream.metric_columns(df)


def test_metrics_reader_is_incremental_and_skips_a_cut_line(tmp_path):
    rec = records.RunRecords(tmp_path, "sft")
    reader = metric_stream.MetricsReader(tmp_path)
    assert reader.update() == 0 and len(reader.frame()) == 0
    rec.log(1, 0, 1, {"loss": 3.0}, 8, 800)
    assert reader.update() == 1
    with open(tmp_path / records.METRICS_FILE, "a") as f:
        f.write('{"global_step": 2, "loss"')  # a run killed mid-write
    assert reader.update() == 0 and list(reader.frame()["loss"]) == [3.0]
    assert list(metric_stream.read(tmp_path)["global_step"]) == [1]


def test_resume_drops_records_after_the_checkpoint(tmp_path):
    run = tmp_path / "run"
    rec = records.RunRecords(run, "grpo", rollouts=True)
    for step in range(1, 6):
        rec.log(step, 0, step, {"loss": float(step)}, step * 2, step * 10)
        rec.add_rollouts(step, 0, [group(f"p{step}", [0.0, 1.0])])
    rec.close()
    with open(run / records.METRICS_FILE, "a") as f:
        f.write('{"global_step": 6, "lo')  # killed while writing step 6
    rec = records.RunRecords(run, "grpo", resume_step=3, rollouts=True)  # the checkpoint was at step 3
    for step in range(4, 7):
        rec.log(step, 0, step, {"loss": 10.0 + step}, step * 2, step * 10)
        rec.add_rollouts(step, 0, [group(f"p{step}", [0.0, 1.0])])
    rec.close()
    df = metric_stream.read(run)
    assert list(df["global_step"]) == [1, 2, 3, 4, 5, 6]
    assert list(df["loss"]) == [1.0, 2.0, 3.0, 14.0, 15.0, 16.0]
    assert (df["elapsed_s"].diff().dropna() >= 0).all()  # wall time continues across the resume
    ro = rollout_store.read(run)
    assert sorted(set(ro["step"])) == [1, 2, 3, 4, 5, 6]
    assert len(ro) == 12 and not ro.duplicated(["step", "group", "sample"]).any()
    assert list(rollout_store.steps(run)["step"]) == [1, 2, 3, 4, 5, 6]


def test_fresh_run_moves_old_records_aside(tmp_path):
    run = tmp_path / "run"
    rec = records.RunRecords(run, "sft")
    rec.log(1, 0, 1, {"loss": 1.0}, 1, 1)
    rec.close()
    rec = records.RunRecords(run, "sft")  # a new run, not a resume, in the same folder
    rec.close()
    assert len(metric_stream.read(run)) == 0
    old = [p for p in tmp_path.iterdir() if p.name.startswith("run.")]
    assert len(old) == 1 and list(metric_stream.read(old[0])["loss"]) == [1.0]


def test_rollout_columns_parts_and_filters(tmp_path):
    rec = records.RunRecords(tmp_path, "grpo", rollouts=True, meta={"group_size": 3})
    rec.add_rollouts(1, 0, [
        group("what is 6*7?", [1.5, 0.5, 0.0], advantage=[1.0, 0.0, -1.0], truncated=(2,),
              parts={"format": [0.5, 0.5, 0.0], "answer": [1.0, 0.0, 0.0]}),
        group("capital of France?", [0.0, 0.0, 0.0], reference="Paris",
              parts={"format": [0.0, 0.0, 0.0], "answer": [0.0, 0.0, 0.0]})])
    rec.add_rollouts(2, 0, [group("what is 6*7?", [1.5, 1.5, 1.5],
                                  parts={"format": [0.5] * 3, "answer": [1.0] * 3})])
    rec.close()
    df = rollout_store.read(tmp_path)
    for col in ("step", "group", "prompt", "response", "reference", "reward", "advantage", "length", "truncated",
                "reward/format", "reward/answer", "kl", "format_ok"):
        assert col in df.columns, col
    assert rollout_store.part_names(tmp_path) == ["format", "answer"]
    assert (df["reward/format"] + df["reward/answer"] - df["reward"]).abs().max() < 1e-12
    assert len(rollout_store.read(tmp_path, step=1)) == 6 and len(rollout_store.read(tmp_path, step=2)) == 3
    assert list(rollout_store.query(tmp_path, 1, truncated=True)["sample"]) == [2]
    assert len(rollout_store.query(tmp_path, 1, reward_min=0.5, reward_max=1.5)) == 2
    assert set(rollout_store.query(tmp_path, 1, format_failures=True)["sample"]) == {0, 2}
    assert set(rollout_store.query(tmp_path, None, text="PARIS")["prompt"]) == {"capital of France?"}
    assert len(rollout_store.query(tmp_path, None, text="100%")) == 0  # % is literal, not a wildcard
    pid = rollout_store.prompt_id_of(tmp_path, "what is 6*7?", "42")
    assert rollout_store.prompt_steps(tmp_path, pid) == [1, 2]
    assert set(rollout_store.query(tmp_path, prompt_id=pid)["step"]) == {1, 2}
    assert rollout_store.counts(tmp_path) == (2, 9, 2)
    assert rollout_store.meta(tmp_path)["group_size"] == 3 and rollout_store.meta(tmp_path)["train_type"] == "grpo"


def test_keep_groups_and_size_bound(tmp_path):
    rec = records.RunRecords(tmp_path / "a", "grpo", rollouts=True, keep_groups=1)
    rec.add_rollouts(1, 0, [group("p1", [1.0, 0.0]), group("p2", [1.0, 0.0])])
    rec.close()
    assert set(rollout_store.read(tmp_path / "a")["prompt"]) == {"p1"}
    none = records.RunRecords(tmp_path / "b", "grpo", rollouts=True, keep_groups=0)
    assert not none.wants_rollouts(1)
    none.close()
    small = records.RunRecords(tmp_path / "c", "grpo", rollouts=True, max_mb=0.001)
    small.add_rollouts(1, 0, [group("p1", [1.0, 0.0])])
    assert not small.wants_rollouts(2)  # over the bound: later steps are not stored
    small.add_rollouts(2, 0, [group("p2", [1.0, 0.0])])
    small.close()
    assert set(rollout_store.read(tmp_path / "c")["step"]) == {1}
    assert rollout_store.meta(tmp_path / "c")["full_at_step"] == 1


def test_disabled_records_write_nothing(tmp_path):
    rec = records.RunRecords(tmp_path / "rank1", "grpo", rollouts=True, enabled=False)
    rec.log(1, 0, 1, {"loss": 1.0}, 1, 1)
    rec.add_rollouts(1, 0, [group("p", [1.0])])
    rec.close()
    assert not (tmp_path / "rank1").exists()


def test_a_failed_step_leaves_no_half_step(tmp_path):
    rec = records.RunRecords(tmp_path, "grpo", rollouts=True)
    rec.add_rollouts(1, 0, [group("p", [1.0, 0.0])])
    bad = group("q", [1.0, 0.0])
    bad[1]["length"] = "not a number"  # fails halfway through the step's insert
    with pytest.raises(ValueError):
        rec.add_rollouts(2, 0, [bad])
    rec.close()
    assert list(rollout_store.steps(tmp_path)["step"]) == [1] and set(rollout_store.read(tmp_path)["step"]) == {1}


def test_store_is_readable_while_a_step_is_being_written(tmp_path):
    rec = records.RunRecords(tmp_path, "grpo", rollouts=True)
    rec.add_rollouts(1, 0, [group("p", [1.0, 0.0])])
    conn = rec.rollouts.conn
    conn.execute("BEGIN IMMEDIATE")  # a writer in the middle of step 2
    conn.execute("INSERT INTO steps (step, epoch, time, responses) VALUES (2, 0, 0, 0)")
    assert list(rollout_store.steps(tmp_path)["step"]) == [1]
    conn.execute("ROLLBACK")
    rec.close()


def test_no_store_and_run_dir_helpers(tmp_path):
    with pytest.raises(rollout_store.NoRollouts):
        rollout_store.read(tmp_path)
    assert len(metric_stream.read(tmp_path)) == 0 and "global_step" in metric_stream.read(tmp_path).columns
    argv = ["python", "../trainer/train_grpo.py", "--epochs", "1"]
    assert metric_stream.with_run_dir(argv, "/x/job-3")[-2:] == ["--run_dir", "/x/job-3"]
    assert metric_stream.with_run_dir(argv + ["--run_dir", "/mine"], "/x/job-3").count("--run_dir") == 1
    assert metric_stream.option_value(["a", "--run_dir=/r"]) == "/r"

    from types import SimpleNamespace
    Job = SimpleNamespace(id=7, cwd="/repo/trainer", argv=argv + ["--run_dir", "../runs/x"])
    assert str(metric_stream.job_run_dir(Job, tmp_path)) == "/repo/runs/x"
    Job.argv = argv
    assert metric_stream.job_run_dir(Job, tmp_path) == tmp_path / "records" / "job-7"
    os.makedirs(tmp_path / "records" / "cli-run")
    (tmp_path / "records" / "cli-run" / "metrics.jsonl").write_text(json.dumps({"global_step": 1}) + "\n")
    os.makedirs(tmp_path / "records" / "empty")
    assert [p.name for p in metric_stream.list_run_dirs(tmp_path)] == ["cli-run"]


def test_store_uses_wal_and_indexes(tmp_path):
    rec = records.RunRecords(tmp_path, "grpo", rollouts=True)
    rec.close()
    conn = sqlite3.connect(tmp_path / records.ROLLOUTS_FILE)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    indexes = {r[1] for r in conn.execute("SELECT * FROM sqlite_master WHERE type = 'index'")}
    assert {"rollouts_by_step", "rollouts_by_reward", "rollouts_by_prompt"} <= indexes


def test_runner_gives_training_jobs_their_records_folder(tmp_path):
    from types import SimpleNamespace

    from mmcore.jobs.jobstore import JobStore
    from mmcore.jobs.supervisor import Supervisor
    store = JobStore(tmp_path)
    job_id = store.create("grpo", "demo", {}, ["python", "../trainer/train_grpo.py", "--epochs", "1"], "/r/trainer", {})
    me = SimpleNamespace(store=store)
    argv = Supervisor._trainer_argv(me, store.get(job_id))
    assert argv[-2:] == ["--run_dir", str(tmp_path / "records" / f"job-{job_id}")]
    other = store.create("grpo", "x", {}, ["python", "-c", "print(1)"], "/r/trainer", {})
    assert Supervisor._trainer_argv(me, store.get(other)) == ["python", "-c", "print(1)"]
