"""Held-out evaluation during training (trainer/held_out.py), in real tiny runs on CPU: GRPO's greedy and
sampled answers to held-out prompts, DPO's held-out loss on rows held out of its training file, the
all-reduced means under torchrun, and a resumed run's eval series."""
import contextlib
import io
import json
import math
import signal
import sys

import numpy as np
import pytest
from _trainer_helpers import (
    DEMO,
    free_port,
    head_jsonl,
    make_repo_copy,
    proc_output,
    progress_frame,
    run_trainer,
    save_random_weights,
    start_trainer,
    tiny_args,
    wait_for_text,
)
from test_rl_trainers import RL_TINY

from mmcore import cli, metrics, rollouts
from trainer.rules.args import cross_errors
from trainer.rules.records import EVAL_SPLIT_FILE

pytestmark = pytest.mark.timeout(1200)

GRPO_EVAL = ["eval/reward/mean", "eval/reward/format/mean", "eval/reward/rule/mean", "eval/accuracy",
             "eval/length/mean", "eval/truncated_frac", "eval/sampled/reward/mean", "eval/sampled/accuracy"]


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """A repository copy with tiny random base weights (reason, full_sft) and small data files."""
    root = make_repo_copy(tmp_path_factory.mktemp("heldout"))
    save_random_weights(root / "base", "reason", seed=3)
    save_random_weights(root / "base", "full_sft", seed=1)
    head_jsonl(DEMO / "rlaif.jsonl", root / "data" / "rlaif.jsonl", 8)
    lines = (DEMO / "rlaif.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    (root / "data" / "rlaif_held.jsonl").write_text("".join(lines[-6:]), encoding="utf-8")
    head_jsonl(DEMO / "pretrain.jsonl", root / "data" / "pretrain.jsonl", 12)
    head_jsonl(DEMO / "pretrain.jsonl", root / "data" / "pretrain_held.jsonl", 7)
    head_jsonl(DEMO / "dpo.jsonl", root / "data" / "dpo.jsonl", 12)
    head_jsonl(DEMO / "sft.jsonl", root / "data" / "sft.jsonl", 8)
    return root


def test_grpo_evaluates_held_out_prompts_and_keeps_the_answers(repo, tmp_path):
    run_dir = tmp_path / "grpo"
    proc = run_trainer(repo, "train_grpo.py", tiny_args(**{
        **RL_TINY, "data_path": repo / "data" / "rlaif.jsonl", "weight_dir": "../base", "num_generations": 2,
        "save_weight": "grpo_eval", "run_dir": run_dir, "eval_data": repo / "data" / "rlaif_held.jsonl",
        "eval_interval": 3, "eval_rows": 4}))
    assert proc.returncode == 0, proc_output(proc)
    # The upstream progress lines are all there and parse as before (4 steps: 8 prompts, 2 a step).
    assert list(progress_frame(proc.stdout)["step"]) == [1, 2, 3, 4]
    df = metrics.read(run_dir)
    assert list(df["global_step"]) == [0, 1, 2, 3, 4]
    # Baseline at step 0, every 3 optimizer steps, and at the end.
    evaluated = df.dropna(subset=["eval/reward/mean"])
    assert list(evaluated["global_step"]) == [0, 3, 4]
    for name in GRPO_EVAL:
        assert evaluated[name].map(math.isfinite).all(), name
    assert evaluated["eval/accuracy"].between(0, 1).all() and evaluated["eval/truncated_frac"].between(0, 1).all()
    assert math.isnan(df.loc[0, "loss"]) and df.loc[1:, "loss"].notna().all()  # step 0 trained nothing
    assert json.loads((run_dir / EVAL_SPLIT_FILE).read_text())["eval_data"].endswith("rlaif_held.jsonl")

    probes = rollouts.probes(run_dir)
    assert sorted(set(probes["step"])) == [0, 3, 4]
    first = probes[probes["step"] == 0]
    assert sorted(first["mode"]) == ["greedy"] * 4 + ["sampled"] * 4
    held = [json.loads(line) for line in (repo / "data" / "rlaif_held.jsonl").read_text().splitlines()[:4]]
    references = [row["conversations"][-1]["content"] for row in held]
    assert list(first[first["mode"] == "greedy"]["reference"]) == references
    # The parts add up to the reward; the means recorded are the answers' means.
    np.testing.assert_allclose(probes[["reward/format", "reward/rule"]].sum(axis=1), probes["reward"], atol=1e-6)
    for step, group in probes.groupby("step"):
        row = df.set_index("global_step").loc[step]
        greedy, sampled = group[group["mode"] == "greedy"], group[group["mode"] == "sampled"]
        assert row["eval/reward/mean"] == pytest.approx(greedy["reward"].mean(), abs=1e-6)
        assert row["eval/length/mean"] == pytest.approx(greedy["length"].mean(), abs=1e-6)
        assert row["eval/sampled/reward/mean"] == pytest.approx(sampled["reward"].mean(), abs=1e-6)
    # The training responses are stored as before, the held-out ones apart from them.
    assert sorted(set(rollouts.read(run_dir)["step"])) == [1, 2, 3, 4]
    # A second opinion with the training rule gives back the stored rule part of every response.
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["rescore", str(run_dir), "--reward", "rule", "--json"]) == 0
    scored = json.loads(out.getvalue())["responses_scored"]
    assert len(scored) == 16 and all(abs(r["rescore/rule"] - r["reward/rule"]) <= 1e-6 for r in scored)
    assert {"rescore/rule/mean", "rescore/rule/std"} <= set(metrics.read(run_dir).columns)


def test_dpo_holds_out_the_last_rows_of_its_file(repo, tmp_path):
    run_dir = tmp_path / "dpo"
    proc = run_trainer(repo, "train_dpo.py", tiny_args(
        data_path=repo / "data" / "dpo.jsonl", from_weight="full_sft", weight_dir="../base", learning_rate=1e-4,
        save_weight="dpo_eval", run_dir=run_dir, eval_holdout=4, eval_interval=1))
    assert proc.returncode == 0, proc_output(proc)
    assert set(progress_frame(proc.stdout)["total_steps"]) == {2}  # 12 - 4 rows in training, 4 a step
    split = json.loads((run_dir / EVAL_SPLIT_FILE).read_text())
    assert split["source"] == "holdout" and split["held_out_rows"] == [8, 12] and split["rows"] == 12
    df = metrics.read(run_dir).set_index("global_step")
    assert list(df.index) == [0, 1, 2]
    # Policy == reference before the first update: loss log 2, no margin, no pair won.
    assert df.loc[0, "eval/loss"] == pytest.approx(math.log(2), abs=1e-5)
    assert df.loc[0, "eval/reward_margin"] == pytest.approx(0, abs=1e-6)
    assert df.loc[0, "eval/reward_accuracy"] == 0
    assert df.loc[2, "eval/loss"] != pytest.approx(math.log(2), abs=1e-7)  # the policy moved


def test_held_out_file_and_rows_exclude_each_other():
    assert "eval_holdout" in cross_errors("sft", {"eval_data": "../dataset/x.jsonl", "eval_holdout": 3})
    assert cross_errors("sft", {"eval_data": "../dataset/x.jsonl", "eval_holdout": 0}) == {}


def test_torchrun_averages_the_evaluation_over_ranks(repo, tmp_path):
    """Two CPU processes evaluate 3 + 2 of 5 held-out rows; the all-reduced loss at step 0 (the same
    weights everywhere) equals one process's over all 5 rows."""
    common = dict(data_path=repo / "data" / "pretrain.jsonl", from_weight="full_sft", weight_dir="../base",
                  batch_size=1, accumulation_steps=1, eval_data=repo / "data" / "pretrain_held.jsonl", eval_rows=5,
                  eval_interval=4)
    single = run_trainer(repo, "train_pretrain.py", tiny_args(save_weight="single", run_dir=tmp_path / "one",
                                                               **common))
    assert single.returncode == 0, proc_output(single)
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                "--master_addr", "127.0.0.1", "--master_port", str(free_port())]
    ddp = run_trainer(repo, "train_pretrain.py", tiny_args(save_weight="ddp", run_dir=tmp_path / "two", **common),
                      launcher=launcher)
    assert ddp.returncode == 0, proc_output(ddp)
    one, two = metrics.read(tmp_path / "one"), metrics.read(tmp_path / "two")
    assert list(one.dropna(subset=["eval/loss"])["global_step"]) == [0, 4, 8, 12]
    assert list(two.dropna(subset=["eval/loss"])["global_step"]) == [0, 4, 6]  # 6 steps a rank
    assert two.loc[0, "eval/loss"] == pytest.approx(one.loc[0, "eval/loss"], abs=1e-5)
    assert ddp.stdout.count("Eval step 0:") == 1  # rank 0 alone prints


def test_a_resumed_run_keeps_its_eval_series(repo, tmp_path):
    data = head_jsonl(DEMO / "pretrain.jsonl", repo / "data" / "pretrain_20.jsonl", 4, repeat=5)  # 20 steps
    common = dict(data_path=data, batch_size=1, learning_rate=2e-3, accumulation_steps=2,
                  eval_data=repo / "data" / "pretrain_held.jsonl", eval_rows=3, eval_interval=3)
    straight = run_trainer(repo, "train_pretrain.py", tiny_args(save_weight="straight", run_dir=tmp_path / "a",
                                                                **common))
    assert straight.returncode == 0, proc_output(straight)
    log = tmp_path / "stopped.log"
    args = tiny_args(save_weight="stopped", run_dir=tmp_path / "b", **common)
    proc = start_trainer(repo, "train_pretrain.py", args, log)
    wait_for_text(log, "(8/20)", proc)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=300) == 143, log.read_text()
    resumed = run_trainer(repo, "train_pretrain.py", args + ["--from_resume", "1"])
    assert resumed.returncode == 0, proc_output(resumed)
    assert "Eval step 0:" not in resumed.stdout  # the baseline is kept, not made again

    a = metrics.read(tmp_path / "a").dropna(subset=["eval/loss"]).set_index("global_step")["eval/loss"]
    b = metrics.read(tmp_path / "b").dropna(subset=["eval/loss"]).set_index("global_step")["eval/loss"]
    # Optimizer steps after micro-batches 1, 3, 5, ...: every 3rd is after 5, 11, 17; and the last step.
    assert list(a.index) == [0, 5, 11, 17, 20]
    assert list(b.index) == list(a.index)  # no step lost, none twice
    assert b.to_dict() == pytest.approx(a.to_dict(), abs=1e-5)


@pytest.mark.parametrize("acc", [1, 2, 3, 8])
def test_optimizer_steps_are_counted_at_the_loops_boundaries(acc):
    from trainer.loop import is_update_step, updates_done
    iters, taken = 7, 0
    for epoch in range(3):
        for step in range(1, iters + 1):
            taken += is_update_step(step, acc)
            assert updates_done(epoch, step, iters, acc) == taken, (epoch, step)


@pytest.mark.parametrize("script, options, names", [
    ("train_spo.py", {**RL_TINY, "data_path": "rlaif.jsonl", "weight_dir": "../base", "save_weight": "spo_eval",
                      "accumulation_steps": 1}, ["eval/reward/mean", "eval/accuracy", "eval/sampled/reward/mean"]),
    ("train_lora.py", {"data_path": "sft.jsonl", "from_weight": "full_sft", "weight_dir": "../base",
                       "lora_name": "lora_eval"}, ["eval/loss"]),
])
def test_other_types_evaluate_rows_held_out_of_their_file(repo, tmp_path, script, options, names):
    """SPO (one answer a prompt, the value baseline) and LoRA (only the adapters train) with --eval_holdout."""
    run_dir = tmp_path / "run"
    proc = run_trainer(repo, script, tiny_args(**{**options, "data_path": repo / "data" / options["data_path"],
                                                  "run_dir": run_dir, "eval_holdout": 4, "eval_interval": 1,
                                                  "batch_size": 2}))
    assert proc.returncode == 0, proc_output(proc)
    assert set(progress_frame(proc.stdout)["total_steps"]) == {2}  # 8 rows, 4 held out, 2 a step
    df = metrics.read(run_dir)
    for name in names:
        assert list(df.dropna(subset=[name])["global_step"]) == [0, 1, 2], name
        assert df[name].dropna().map(math.isfinite).all(), name
