"""The records of real GRPO, SPO and PPO runs (tiny model, CPU): the metrics stream has every RL
metric; the rollout store's parts add up to each reward and its advantages can be recomputed from
the stored rewards; a SIGTERM-stopped or killed run leaves a readable store and a resumed run
continues it without duplicates."""
import math
import signal

import numpy as np
import pytest
from _trainer_helpers import proc_output, run_trainer, start_trainer, wait_for_text
from test_rl_trainers import classifier_reward_model, repo, rl_args, trainer_environment  # noqa: F401  (fixtures)

from mmcore.runs import metric_stream, rollout_store

pytestmark = pytest.mark.timeout(300)

RL_METRICS = ["loss", "reward", "reward/format/mean", "reward/format/std", "accuracy", "length/mean", "length/min",
              "length/max", "truncated_frac", "entropy", "kl", "advantage/mean", "advantage/std", "lr",
              "time/generate_s", "time/score_s", "time/update_s", "time/step_s", "tokens_per_s"]
STORE_COLUMNS = ["step", "group", "sample", "prompt", "response", "reference", "reward", "advantage", "length",
                 "truncated", "reward/format", "kl", "accuracy", "format_ok"]


def check_records(run_dir, steps, extra_metrics=(), part="rule", group_size=1):
    df = metric_stream.read(run_dir)
    assert list(df["global_step"]) == list(range(1, steps + 1))
    for name in RL_METRICS + list(extra_metrics) + [f"reward/{part}/mean"]:
        assert name in df.columns and df[name].map(math.isfinite).all(), name
    assert (df["samples"].diff().dropna() > 0).all() and (df["tokens"].diff().dropna() > 0).all()
    ro = rollout_store.read(run_dir)
    for column in STORE_COLUMNS + [f"reward/{part}"]:
        assert column in ro.columns, column
    assert sorted(set(ro["step"])) == list(range(1, steps + 1))
    assert not ro.duplicated(["step", "group", "sample"]).any()
    assert (ro.groupby(["step", "group"]).size() == group_size).all()
    parts = [c for c in ro.columns if c.startswith("reward/")]
    assert parts == ["reward/format", f"reward/{part}"]
    # the parts add up to the total reward of every stored response
    np.testing.assert_allclose(ro[parts].sum(axis=1), ro["reward"], atol=1e-5)
    assert set(ro["truncated"]) <= {True, False} and (ro["length"] >= 1).all()
    return df, ro


def test_grpo_records_parts_and_advantages(repo, tmp_path):
    run_dir = tmp_path / "grpo"
    proc = run_trainer(repo, "train_grpo.py", rl_args(repo, num_generations=4, save_weight="grpo_rec",
                                                      run_dir=run_dir))
    assert proc.returncode == 0, proc_output(proc)
    df, ro = check_records(run_dir, 2, extra_metrics=["frac_reward_zero_std"], group_size=4)
    # the advantages recomputed from the stored rewards: (r - group mean) / (group std + 1e-4)
    grouped = ro.groupby(["step", "group"])["reward"]
    expected = (ro["reward"] - grouped.transform("mean")) / (grouped.transform("std") + 1e-4)
    np.testing.assert_allclose(ro["advantage"], expected, atol=1e-5)
    zero_std = ro.groupby(["step", "group"])["reward"].nunique().eq(1).groupby("step").mean()
    np.testing.assert_allclose(df["frac_reward_zero_std"], zero_std.to_numpy())
    assert rollout_store.meta(run_dir)["group_size"] == 4


def test_spo_records_baseline_and_rho(repo, tmp_path):
    run_dir = tmp_path / "spo"
    proc = run_trainer(repo, "train_spo.py", rl_args(repo, save_weight="spo_rec", run_dir=run_dir,
                                                     accumulation_steps=2))
    assert proc.returncode == 0, proc_output(proc)
    df, ro = check_records(run_dir, 2, extra_metrics=["baseline", "rho"])
    expected = (ro["reward"] - ro["baseline_reward"]).clip(-5, 5)
    np.testing.assert_allclose(ro["advantage"], expected, atol=1e-5)
    assert ro["rho"].between(0, 1).all()


def test_ppo_with_a_tiny_reward_model(repo, tmp_path, classifier_reward_model):  # noqa: F811
    run_dir = tmp_path / "ppo"
    proc = run_trainer(repo, "train_ppo.py", rl_args(repo, save_weight="ppo_rec_actor", run_dir=run_dir,
                                                     reward_model_path=classifier_reward_model))
    assert proc.returncode == 0, proc_output(proc)
    df, ro = check_records(run_dir, 2, extra_metrics=["clip_frac", "rm/clip_frac", "critic_loss", "kl_ref",
                                                      "critic_lr"], part="reward_model")
    np.testing.assert_allclose(ro["advantage"], ro["reward"] - ro["value"], atol=1e-5)
    assert (ro["reward/reward_model"].abs() <= 3.0).all()  # clipped to the reward scale
    # the raw score is kept beside it: the clipped part is the raw one clipped (no reasoning: no blend)
    np.testing.assert_allclose(ro["reward/reward_model"], ro["rm/raw"].clip(-3.0, 3.0), atol=1e-5)
    assert df["accuracy"].between(0, 1).all()  # judged against the reference, though the model decides


def test_sigterm_kill_and_resume_keep_the_store_whole(repo, tmp_path):
    """6 steps of GRPO (12 prompts, 2 a step); SIGTERM after step 2, resume to the end; then a run
    killed with SIGKILL mid-way leaves a readable store with whole steps only."""
    from _trainer_helpers import DEMO, head_jsonl
    data = head_jsonl(DEMO / "rlaif.jsonl", tmp_path / "rl12.jsonl", 12)
    run_dir = tmp_path / "resumed"
    args = dict(num_generations=2, save_weight="grpo_term", run_dir=run_dir, data_path=data, save_interval=1)
    log = tmp_path / "term.log"
    proc = start_trainer(repo, "train_grpo.py", rl_args(repo, **args), log)
    wait_for_text(log, "Step: 2/6", proc)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 143, log.read_text()
    stopped_at = list(rollout_store.steps(run_dir)["step"])
    assert stopped_at and stopped_at == list(range(1, len(stopped_at) + 1))
    proc = run_trainer(repo, "train_grpo.py", rl_args(repo, **args, from_resume=1))
    assert proc.returncode == 0, proc_output(proc)
    df, ro = check_records(run_dir, 6, extra_metrics=["frac_reward_zero_std"], group_size=2)
    assert list(rollout_store.steps(run_dir)["step"]) == list(range(1, 7))

    killed_dir = tmp_path / "killed"
    log = tmp_path / "kill.log"
    proc = start_trainer(repo, "train_grpo.py", rl_args(repo, **{**args, "save_weight": "grpo_kill",
                                                                  "run_dir": killed_dir}), log)
    wait_for_text(log, "Step: 2/6", proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    steps = list(rollout_store.steps(killed_dir)["step"])
    ro = rollout_store.read(killed_dir)
    assert steps and sorted(set(ro["step"])) == steps
    assert (ro.groupby("step").size() == 4).all()  # 2 prompts x 2 responses: no half-written step
    assert list(metric_stream.read(killed_dir)["global_step"]) == list(range(1, len(metric_stream.read(killed_dir)) + 1))
