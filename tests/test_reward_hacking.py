"""The reward-hacking check (mmcore.runs.health, rule `reward_hacking`) on records written by the trainers'
own writers and rescored by the dashboard's rescore: it fires for a run whose reward paid for length alone
(the training reward rises, the held-out accuracy and a rule rescore stay flat) and stays quiet when the
held-out signals keep rising with the reward. An evaluation's own records never read as a NaN loss."""
import numpy as np
import pytest

from mmcore import metrics, rollouts
from mmcore.runs import health
from trainer.rules.records import RunRecords

S = health.HealthSettings(window=5)
PROMPT = "<|im_start|>user\n3+5=?<|im_end|>\n<|im_start|>assistant\n"


def length_run(run_dir, steps=30, learns=False, eval_every=10):
    """A run trained on a reward that pays for length (len / 100): its responses grow; with `learns` they
    also become right, more of them step by step. Held-out accuracy is recorded every `eval_every` steps (step 0 first), as
    the trainer's evaluation writes it: records of their own, without a training loss. With `learns`, more
    of them are right step by step, and the held-out accuracy rises with them."""
    records = RunRecords(run_dir, "grpo", rollouts=True, meta={"group_size": 4, "reasoning": 0})
    rng = np.random.default_rng(1)
    records.log(0, 0, 0, {"eval/accuracy": 0.0, "eval/length/mean": 5.0}, 0, 0)
    for step in range(1, steps + 1):
        right = round(4 * step / steps) if learns else 0  # responses of the group that are right
        responses = [("8" if i < right else "9") + " padding" * (step // 2 + i) for i in range(4)]
        reward = [len(r) / 100 for r in responses]
        records.add_rollouts(step, 0, [[{"prompt": PROMPT, "reference": "8", "response": r, "reward": x,
                                         "advantage": x - float(np.mean(reward)), "length": len(r), "truncated": False,
                                         "parts": {"length": x}} for r, x in zip(responses, reward)]])
        logged = {"loss": 0.1 + 0.01 * rng.standard_normal(), "reward": float(np.mean(reward)), "lr": 1e-4}
        if step % eval_every == 0:
            logged.update({"eval/accuracy": right / 4, "eval/length/mean": 5.0 + step})
        records.log(step, 0, step, logged, step * 4, step * 40)
    records.close()
    rollouts.rescore(run_dir, "rule")  # the second opinion: is the answer right?
    return metrics.read(run_dir)


def test_fires_when_a_length_paying_reward_rises_and_the_held_out_signals_stay_flat(tmp_path):
    df = length_run(tmp_path / "run")
    assert df["reward"].dropna().iloc[-1] > df["reward"].dropna().iloc[0] + 0.3
    found = {f.rule: f for f in health.evaluate(df, S)}
    assert set(found) == {"reward_hacking"}, found
    finding = found["reward_hacking"]
    values = dict(finding.values)
    assert values["rise"] >= S.hack_rise and values["gain"] <= health.HELD_OUT_FLAT
    assert values["signals"] == "eval/accuracy, rescore/rule/mean"
    assert "rescore/rule/mean" in finding.message and finding.title and finding.advice
    assert finding.since_step in (10, 20, 25)


def test_quiet_when_the_held_out_signals_rise_with_the_reward(tmp_path):
    df = length_run(tmp_path / "run", learns=True)
    assert "reward_hacking" not in {f.rule for f in health.evaluate(df, S)}


def test_quiet_without_held_out_signals_or_a_big_enough_rise(tmp_path):
    df = length_run(tmp_path / "run")
    training_only = df[[c for c in df.columns if not c.startswith(("eval/", "rescore/"))]]
    assert health.evaluate(training_only, S) == []
    assert "reward_hacking" not in {f.rule for f in health.evaluate(df, health.HealthSettings(window=5, hack_rise=5))}


def test_an_evaluation_record_is_not_a_nan_loss(tmp_path):
    df = length_run(tmp_path / "run", eval_every=7)  # evaluations at steps that are also logged, and step 0
    assert np.isnan(df.loc[df["global_step"] == 0, "loss"]).all()
    assert "nonfinite_loss" not in {f.rule for f in health.evaluate(df, S)}
    df.loc[df["global_step"] == 12, "loss"] = float("nan")  # a real NaN loss still fires at once
    assert {f.rule: f.since_step for f in health.evaluate(df, S)}.get("nonfinite_loss") == 12


def test_the_rise_bound_is_checked():
    with pytest.raises(ValueError):
        health.save_settings("/nonexistent", health.HealthSettings(hack_rise=0))
