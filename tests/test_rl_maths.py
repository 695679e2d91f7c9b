"""Unit tests of the RL maths in trainer/rl/ against hand-computed values."""
import math

import pytest
import torch

from trainer.rl import losses, reward_model, rewards, rollout

FULL = "<think>\nadd them\n</think>\n<answer>\n8\n</answer>"


# --- rewards ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("response, expected", [
    (FULL, 1.5),                                                    # full match + 4 tags
    ("<think>\nadd them\n</think>\n\n<answer>\n8\n</answer>", 1.5),  # one blank line is tolerated
    ("<think>\nx\n</think>\n<answer>\n8\n</answer> trailing", 1.0),  # tags but no full match
    ("<think>\nx\n</think>", 0.5),                                  # two tags
    ("<think><think></think>", 0.25),                               # <think> twice: only </think> counts
    ("8", 0.0),
])
def test_format_reward(response, expected):
    assert rewards.format_reward(response) == pytest.approx(expected)


def test_rule_reward_reasoning_uses_answer_content():
    assert rewards.rule_reward(FULL, "8", reasoning=1) == 1.0
    assert rewards.rule_reward(FULL, "9", reasoning=1) == 0.0
    assert rewards.rule_reward("8", "8", reasoning=1) == 0.0  # no <answer> block: nothing to compare
    # a reference in the reasoning format is compared by its answer
    assert rewards.rule_reward(FULL, "<think>\n4+4\n</think>\n<answer>\n8\n</answer>", reasoning=1) == 1.0


def test_rule_reward_plain_compares_stripped_response():
    assert rewards.rule_reward("  8 \n", "8", reasoning=0) == 1.0
    assert rewards.rule_reward(FULL, "8", reasoning=0) == 0.0


def test_clip_and_blend():
    assert rewards.clip_score(7.5) == 3.0
    assert rewards.clip_score(-4) == -3.0
    assert rewards.clip_score(1.25) == 1.25
    assert rewards.blend_scores(1.0, 2.0) == pytest.approx(0.4 + 1.2)


def test_prompt_messages_parses_chatml():
    prompt = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n3+5=?<|im_end|>\n<|im_start|>assistant\n"
    assert rewards.prompt_messages(prompt) == [{"role": "system", "content": "Be brief."},
                                          {"role": "user", "content": "3+5=?"}]


class FixedScores:
    """A reward model stand-in that scores by the assistant message's text (a lookup table)."""

    def __init__(self, table):
        self.table, self.seen = table, []

    def score(self, messages):
        self.seen.append(messages)
        return self.table[messages[-1]["content"]]


def test_reward_model_score_blends_clipped_scores():
    prompt = "<|im_start|>user\n3+5=?<|im_end|>\n<|im_start|>assistant\n"
    model = FixedScores({FULL: 5.0, "8": -1.0})
    # whole response clipped to 3, answer -1: 0.4*3 + 0.6*(-1)
    assert rewards.reward_model_score(model, prompt, FULL, reasoning=1) == pytest.approx(0.6)
    assert model.seen[0][0] == {"role": "user", "content": "3+5=?"}
    assert rewards.reward_model_score(model, prompt, FULL, reasoning=0) == pytest.approx(3.0)
    # no answer block: the whole-response score alone
    assert rewards.reward_model_score(FixedScores({"hm": -9.0}), prompt, "hm", reasoning=1) == pytest.approx(-3.0)


def test_score_rule_and_model():
    prompts = ["<|im_start|>user\n3+5=?<|im_end|>\n<|im_start|>assistant\n"] * 3
    responses = [FULL, "<think>\nx\n</think>\n<answer>\n7\n</answer>", "8"]
    total, parts = rewards.score(rewards.reward_functions(1), prompts, responses, ["8"] * 3)
    assert total.tolist() == pytest.approx([2.5, 1.5, 0.0])
    assert list(parts) == ["format", "rule"]  # each part by name, unweighted
    assert parts["format"].tolist() == pytest.approx([1.5, 1.5, 0.0]) and parts["rule"].tolist() == [1.0, 0.0, 0.0]
    total, parts = rewards.score(rewards.reward_functions(0), prompts, responses, ["8"] * 3)
    assert total.tolist() == pytest.approx([0.0, 0.0, 1.0]) and list(parts) == ["rule"]
    model = FixedScores({FULL: 1.0, "8": 2.0, "<think>\nx\n</think>\n<answer>\n7\n</answer>": 0.0, "7": -1.0})
    total, parts = rewards.score(rewards.reward_functions(1, model), prompts, responses, ["8"] * 3)
    # format + blended score; the rule reward is not used with a reward model
    assert total.tolist() == pytest.approx([1.5 + 0.4 * 1 + 0.6 * 2, 1.5 + 0.6 * -1, 2.0])
    assert list(parts) == ["format", "reward_model"]


def test_reward_model_raw_scores_are_kept_beside_the_clipped_part():
    prompts = ["<|im_start|>user\n3+5=?<|im_end|>\n<|im_start|>assistant\n"] * 2
    responses = [FULL, "hm"]
    model = FixedScores({FULL: 5.0, "8": -1.0, "hm": -9.0})
    kept = {}
    total, parts = rewards.score(rewards.reward_functions(1, model), prompts, responses, ["8"] * 2, extras=kept)
    # clipped: 0.4*3 + 0.6*(-1) and -3; raw: the same blend of the unclipped scores, not in the total
    assert parts["reward_model"].tolist() == pytest.approx([0.6, -3.0])
    assert kept["rm/raw"] == pytest.approx([0.4 * 5.0 + 0.6 * -1.0, -9.0])
    assert total.tolist() == pytest.approx([1.5 + 0.6, 0.0 - 3.0])
    # without a dict to fill, scoring is unchanged
    assert rewards.score(rewards.reward_functions(1, model), prompts, responses, ["8"] * 2)[0].tolist() == total.tolist()


def test_score_weights_each_named_part():
    double = rewards.RewardFunction("double", 2.0, rewards.per_response(lambda prompt, response, ref: len(response)))
    minus = rewards.RewardFunction("minus", -0.5, lambda prompts, responses, references: [1.0] * len(responses))
    total, parts = rewards.score([double, minus], ["p", "p"], ["ab", "abcd"], ["r", "r"])
    assert total.tolist() == [2 * 2 - 0.5, 2 * 4 - 0.5]
    assert parts["double"].tolist() == [2.0, 4.0] and parts["minus"].tolist() == [1.0, 1.0]
    assert total.dtype == torch.float32 and parts["double"].dtype == torch.float32


def test_missing_reward_model_path_names_it(tmp_path):
    missing = tmp_path / "no-such-reward-model"
    with pytest.raises(FileNotFoundError, match="no-such-reward-model"):
        reward_model.check_reward_model_path(str(missing))
    assert reward_model.load_reward_model(None, "cpu") is None
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="no config.json"):
        reward_model.check_reward_model_path(str(empty))
    (empty / "config.json").write_text("{broken")
    with pytest.raises(ValueError, match="not valid JSON"):
        reward_model.check_reward_model_path(str(empty))


# --- masks --------------------------------------------------------------------------------------------

def test_completion_mask_stops_after_first_eos():
    eos = 2
    ids = torch.tensor([[5, 6, 2, 0, 0],
                        [5, 2, 7, 2, 0],
                        [5, 6, 7, 8, 9],
                        [2, 0, 0, 0, 0]])
    assert rollout.completion_mask(ids, eos).tolist() == [[1, 1, 1, 0, 0],
                                                    [1, 1, 0, 0, 0],
                                                    [1, 1, 1, 1, 1],
                                                    [1, 0, 0, 0, 0]]


def test_trim_completions_drops_trailing_columns():
    ids = torch.tensor([[5, 2, 0, 0], [5, 6, 2, 0]])
    mask = rollout.completion_mask(ids, 2)
    trimmed, trimmed_mask = rollout.trim_completions(ids, mask)
    assert trimmed.tolist() == [[5, 2, 0], [5, 6, 2]]
    assert trimmed_mask.tolist() == [[1, 1, 0], [1, 1, 1]]


def test_token_logps_gathers_targets():
    logits = torch.log(torch.tensor([[[0.5, 0.25, 0.25], [0.1, 0.1, 0.8]]]))
    assert rollout.token_logps(logits, torch.tensor([[0, 2]]))[0].tolist() == pytest.approx([math.log(0.5), math.log(0.8)])


# --- GRPO ---------------------------------------------------------------------------------------------

def test_group_advantages_normalise_per_group_then_over_the_batch():
    # Upstream: (r - group mean) / (group std + 1e-4), unbiased std, clamped to +-10, then
    # (a - batch mean) / (batch std + 1e-8). The second group is flat: its advantages stay 0.
    rewards = torch.tensor([1.0, 3.0, 2.0, 2.0])
    adv, std = losses.group_advantages(rewards, group_size=2)
    s = math.sqrt(2.0)  # unbiased std of (1, 3)
    a = 1 / (s + 1e-4)  # first step: (-a, a, 0, 0), mean 0
    batch_std = math.sqrt(2 * a * a / 3)  # unbiased std of (-a, a, 0, 0)
    assert adv.tolist() == pytest.approx([-a / batch_std, a / batch_std, 0.0, 0.0], rel=1e-6)
    assert std.tolist() == pytest.approx([s, s, 0.0, 0.0])


def test_group_advantages_clamp_before_the_batch_step():
    # One success among 150 samples: z = (1 - 1/150) / (std + 1e-4) is above 10 and is clamped first.
    rewards = torch.zeros(150)
    rewards[0] = 1.0
    z = (1 - 1 / 150) / (rewards.std().item() + 1e-4)
    assert z > 10
    first = torch.full((150,), (0 - 1 / 150) / (rewards.std().item() + 1e-4))
    first[0] = 10.0
    expected = (first - first.mean()) / (first.std() + 1e-8)
    adv, _ = losses.group_advantages(rewards, group_size=150)
    assert torch.allclose(adv, expected, rtol=1e-5)


def test_masked_mean_over_all_tokens_and_per_row():
    values = torch.tensor([[1.0, 3.0, 100.0], [2.0, 100.0, 100.0], [7.0, 7.0, 7.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]])
    assert losses.masked_mean(values, mask).item() == pytest.approx((1 + 3 + 2) / 3)
    assert losses.masked_mean(values, mask, dim=1).tolist() == pytest.approx([2.0, 2.0, 0.0])  # empty row: 0


def test_k3_kl():
    logp = torch.tensor([math.log(0.5), math.log(0.2)])
    ref = torch.tensor([math.log(0.25), math.log(0.2)])
    # r = ref/p = 0.5: 0.5 - ln 0.5 - 1 ; equal probabilities: 0
    assert losses.k3_kl(logp, ref).tolist() == pytest.approx([0.5 - math.log(0.5) - 1, 0.0], abs=1e-6)


def test_grpo_loss_value_and_gradient():
    logps = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, -9.0]], requires_grad=True)
    ref = logps.detach().clone()
    ref[0, 0] = -1.5
    adv = torch.tensor([1.0, -2.0])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    loss, kl = losses.grpo_loss(logps, ref, adv, mask, beta=0.1)
    kl00 = math.exp(-0.5) + 0.5 - 1
    # row 0: (-1 + 0.1*kl00 - 1) / 2 ; row 1: (2 + 2 + 2) / 3
    expected = ((-2 + 0.1 * kl00) / 2 + 2.0) / 2
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    assert kl.item() == pytest.approx(kl00 / 5, rel=1e-5)
    loss.backward()
    # d/dlogp of -A: -A / (tokens in row) / rows; masked tokens get nothing
    assert logps.grad[1].tolist() == pytest.approx([2 / 3 / 2] * 3, rel=1e-5)
    assert logps.grad[0, 2].item() == 0.0
    assert logps.grad[0, 1].item() == pytest.approx(-1 / 2 / 2, rel=1e-5)


# --- SPO ----------------------------------------------------------------------------------------------

def test_value_tracker_first_update_and_baseline():
    tracker = losses.ValueTracker(-3.0, 3.0)
    assert tracker.alpha == pytest.approx(1.0) and tracker.beta == pytest.approx(1.0)  # 0.5 / (1 - 0.5)
    assert tracker.baseline() == pytest.approx(0.5)
    assert tracker.baseline_reward() == pytest.approx(0.0)
    normalised = tracker.normalise(torch.tensor([0.0, 3.0]))
    assert normalised.tolist() == pytest.approx([0.5, 1.0])
    rho = tracker.update(normalised.mean(), mean_logp=-2.0)
    assert rho == pytest.approx(0.9)  # no previous log-prob yet
    assert tracker.alpha == pytest.approx(0.9 + 0.75)
    assert tracker.beta == pytest.approx(0.9 + 0.25)
    assert tracker.baseline() == pytest.approx(1.65 / 2.8)


@pytest.mark.parametrize("reasoning, with_model, low, high", [
    (1, True, -3.0, 4.5),   # format (0..1.5) + reward model (-3..3): upstream's (r + 3) / 6 passes 1 here
    (1, False, 0.0, 2.5),   # format + rule (0..1)
    (0, True, -3.0, 3.0),
    (0, False, 0.0, 1.0),
])
def test_spo_normalises_over_the_real_reward_range(reasoning, with_model, low, high):
    functions = rewards.reward_functions(reasoning, FixedScores({}) if with_model else None)
    assert rewards.reward_range(functions) == (low, high)
    tracker = losses.ValueTracker(*rewards.reward_range(functions))
    assert tracker.normalise(torch.tensor([low, high])).tolist() == [0.0, 1.0]
    assert tracker.baseline_reward() == pytest.approx((low + high) / 2)
    # A policy that always earns the top reward: the baseline reaches it, and the advantage goes to 0.
    for _ in range(300):
        tracker.update(tracker.normalise(torch.tensor([high])).mean(), mean_logp=-1.0)
    assert tracker.baseline_reward() == pytest.approx(high, abs=1e-3)
    assert losses.spo_advantages(torch.tensor([high]), tracker.baseline_reward()).abs().item() < 1e-3


def test_value_tracker_rho_from_logprob_change_and_clipping():
    tracker = losses.ValueTracker(-3.0, 3.0)
    tracker.update(0.5, mean_logp=-2.0)
    # moved 0.03 = half of D_half: 2^-0.5
    assert tracker.rho(-2.03) == pytest.approx(2 ** -0.5)
    assert tracker.rho(-2.0) == pytest.approx(0.96)   # no change: clipped to the upper bound
    assert tracker.rho(-3.0) == pytest.approx(0.5)    # big change: clipped to the lower bound
    alpha, beta = tracker.alpha, tracker.beta
    normalised = tracker.normalise(torch.tensor([-3.0, -6.0]))
    assert normalised.tolist() == [0.0, 0.0]  # -6 is below the scale: clamped
    rho = tracker.update(normalised.mean(), mean_logp=-2.03)
    assert rho == pytest.approx(2 ** -0.5)
    assert tracker.alpha == pytest.approx(rho * alpha)
    assert tracker.beta == pytest.approx(rho * beta + 1)
    state = tracker.state_dict()
    other = losses.ValueTracker(-3.0, 3.0)
    other.load_state_dict(state)
    assert other.baseline() == pytest.approx(tracker.baseline()) and other.old_mean_logp == pytest.approx(-2.03)


def test_spo_advantages_and_loss():
    adv = losses.spo_advantages(torch.tensor([1.0, 9.0, -8.0]), baseline_reward=0.5)
    assert adv.tolist() == pytest.approx([0.5, 5.0, -5.0])
    logps = torch.tensor([[-1.0, -2.0], [-1.0, -1.0]])
    ref = torch.tensor([[-1.0, -2.0], [-1.0, -1.0 + math.log(2)]])
    loss, kl = losses.spo_loss(logps, ref, torch.tensor([2.0, -1.0]), torch.tensor([[1, 1], [1, 0]]), beta=0.5)
    # row 0: (2 + 4) / 2 = 3 ; row 1: -1 * 1 (second token masked)
    assert loss.item() == pytest.approx((3 - 1) / 2)
    assert kl.item() == pytest.approx(0.0, abs=1e-7)
    loss, kl = losses.spo_loss(logps, ref, torch.tensor([0.0, 0.0]), torch.ones(2, 2), beta=0.5)
    k = 2 - math.log(2) - 1
    assert loss.item() == pytest.approx((0 + 0.5 * k / 2) / 2, rel=1e-5)
    assert kl.item() == pytest.approx(k / 4, rel=1e-5)


# --- PPO ----------------------------------------------------------------------------------------------

def test_ppo_clipped_loss():
    logp = torch.tensor([math.log(1.5), math.log(0.5)])
    old = torch.zeros(2)
    ref = torch.tensor([0.0, math.log(0.5)])
    values = torch.tensor([0.5, 1.0], requires_grad=True)
    rewards = torch.tensor([1.5, 0.0])
    out = losses.ppo_losses(logp, old, ref, values, rewards, clip_epsilon=0.2, vf_coef=0.5, kl_coef=0.1)
    # A = (1.0, -1.0); ratio = (1.5, 0.5): min(1.5, 1.2) = 1.2 ; min(-0.5, -0.8) = -0.8
    assert out["policy_loss"].item() == pytest.approx(-(1.2 - 0.8) / 2)
    assert out["value_loss"].item() == pytest.approx((1.0 + 1.0) / 2)
    assert out["kl"].item() == pytest.approx((math.log(1.5) + math.log(0.5)) / 2)
    assert out["kl_ref"].item() == pytest.approx(math.log(1.5) / 2)
    assert out["loss"].item() == pytest.approx(-0.2 + 0.5 * 1.0 + 0.1 * math.log(1.5) / 2)
    out["loss"].backward()
    assert values.grad.tolist() == pytest.approx([0.5 * (0.5 - 1.5), 0.5 * 1.0])  # only the value loss


def test_last_token_values():
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[1, 1, 0], [0, 1, 1]])
    assert losses.last_token_values(values, mask).tolist() == [2.0, 6.0]
