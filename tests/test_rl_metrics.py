"""The RL step metrics and rollout rows (trainer/rl/step_metrics.py) against hand-computed values."""
import math

import pytest
import torch

from trainer.rl import step_metrics as rm


def test_step_metrics_by_hand():
    # two groups of two: group 0 rewards differ, group 1 all equal
    rewards = torch.tensor([1.5, 0.5, 1.0, 1.0])
    parts = {"format": torch.tensor([0.5, 0.5, 0.0, 0.0]), "rule": torch.tensor([1.0, 0.0, 1.0, 1.0])}
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 0, 0]])
    logps = torch.log(torch.full((4, 4), 0.5))
    trunc = torch.tensor([False, True, False, False])
    out = rm.step_metrics(rewards=rewards, parts=parts, advantages=torch.tensor([0.7, -0.7, 0.0, 0.0]), mask=mask,
                          logps=logps, is_truncated=trunc, accuracy=torch.tensor([1, 0, 1, 1]), group_size=2)
    assert out["reward/format/mean"] == pytest.approx(0.25)
    assert out["reward/rule/std"] == pytest.approx(torch.tensor([1.0, 0.0, 1.0, 1.0]).std().item())
    assert out["frac_reward_zero_std"] == 0.5
    assert out["accuracy"] == 0.75
    assert (out["length/mean"], out["length/min"], out["length/max"]) == (2.5, 1.0, 4.0)
    assert out["length/terminated_mean"] == pytest.approx(2.0)
    assert out["truncated_frac"] == 0.25
    assert out["entropy"] == pytest.approx(math.log(2))
    assert out["advantage/mean"] == pytest.approx(0.0) and out["advantage/std"] > 0
    assert "rm/clip_frac" not in out


def test_single_response_groups_have_no_zero_std_metric_and_rm_clip_frac():
    out = rm.step_metrics(rewards=torch.tensor([3.0, -1.0]), parts={"reward_model": torch.tensor([3.0, -1.0])},
                          advantages=torch.tensor([1.0, -1.0]), mask=torch.ones(2, 3), logps=torch.zeros(2, 3),
                          is_truncated=torch.tensor([True, True]), accuracy=torch.tensor([0, 0]),
                          reward_model_part="reward_model", reward_scale=3.0)
    assert "frac_reward_zero_std" not in out
    assert out["rm/clip_frac"] == 0.5 and out["truncated_frac"] == 1.0 and out["length/terminated_mean"] == 0.0


def test_truncated_sequence_kl_and_clip_frac():
    ids = torch.tensor([[5, 2, 0], [5, 6, 7]])
    assert rm.truncated(ids, eos_id=2).tolist() == [False, True]
    logps = torch.log(torch.tensor([[0.5, 0.5], [0.25, 0.25]]))
    assert rm.sequence_kl(logps, logps, torch.ones(2, 2)).tolist() == [0.0, 0.0]
    kl = rm.sequence_kl(logps, torch.log(torch.tensor([[0.25, 0.25], [0.25, 0.25]])), torch.tensor([[1, 0], [1, 1]]))
    d = math.log(0.5)  # ref - logp for row 0's one masked token
    assert kl[0].item() == pytest.approx(math.exp(d) - d - 1) and kl[1].item() == 0.0
    assert rm.ppo_clip_frac(torch.tensor([0.0, 0.5]), torch.tensor([0.0, 0.0]), 0.1) == 0.5


def test_rollout_groups_weighted_parts_add_up():
    rewards = torch.tensor([2.5, 0.5, 0.0, 1.0])  # format weight 1, rule weight 2
    parts = {"format": torch.tensor([0.5, 0.5, 0.0, 1.0]), "rule": torch.tensor([1.0, 0.0, 0.0, 0.0])}
    groups = rm.rollout_groups(prompts=["p", "p", "q", "q"], references=["a", "a", "b", "b"],
                               responses=["r0", "r1", "r2", "r3"], rewards=rewards, parts=parts,
                               weights={"format": 1.0, "rule": 2.0}, advantages=torch.tensor([1.0, -1.0, -1.0, 1.0]),
                               lengths=torch.tensor([3, 4, 5, 6]), is_truncated=torch.tensor([0, 0, 1, 0]).bool(),
                               group_size=2, extras={"kl": torch.tensor([0.1, 0.2, 0.3, 0.4]), "baseline": 0.5})
    assert [len(g) for g in groups] == [2, 2]
    for group in groups:
        for row in group:
            assert sum(row["parts"].values()) == pytest.approx(row["reward"])
    assert groups[1][0]["truncated"] is True and groups[1][0]["prompt"] == "q"
    assert groups[0][1]["extras"] == {"kl": pytest.approx(0.2), "baseline": 0.5}


def test_step_timer_counts_the_rest_as_update():
    from trainer.rules.records import StepTimer
    timer = StepTimer()
    with timer("generate"):
        pass
    with timer("score"):
        pass
    out = timer.finish(1.0)
    assert set(out) == {"time/generate_s", "time/score_s", "time/update_s", "time/step_s"}
    assert out["time/update_s"] == pytest.approx(1.0 - out["time/generate_s"] - out["time/score_s"])
    assert timer.finish(0.5) == {"time/update_s": 0.5, "time/step_s": 0.5}
