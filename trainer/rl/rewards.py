"""Rewards of sampled responses: a list of named reward functions with weights.

A `RewardFunction(name, weight, fn)` scores a batch of responses: `fn(prompts, responses, references)`
returns one float per response (`per_response` builds one from a function of a single response).
`score(functions, prompts, responses, references)` returns the weighted total of each response and
each function's own scores, by name, so every part can be logged and inspected on its own.
`reward_functions(reasoning, reward_model)` builds the configuration the trainers use:

- with `reasoning`: `format` (think/answer structure, up to 1.5);
- with a reward model: `reward_model` (its clipped score, blended with the answer's score when
  reasoning); without one: `rule` (1 when the answer equals the reference).
"""
from dataclasses import dataclass
from typing import Callable

import torch

from trainer.rules import reward_rules

#: Reward-model scores are clipped to [-REWARD_SCALE, REWARD_SCALE].
REWARD_SCALE = 3.0
#: The most `format_reward` gives (the rule rewards are torch-free: trainer/rules/reward_rules.py).
FORMAT_MAX = reward_rules.FORMAT_MAX


@dataclass(frozen=True)
class RewardFunction:
    """One named part of the reward: `fn(prompts, responses, references) -> list of floats`, one score
    per response of the (aligned) lists, counted `weight` times. Scoring a whole batch in one call lets
    a reward model score it in batches. `low` and `high` bound what `fn` can return (SPO normalises
    rewards over the total's range)."""
    name: str
    weight: float
    fn: Callable[[list, list, list], list]
    low: float = 0.0
    high: float = 1.0


@dataclass(frozen=True)
class Scored:
    """What a `RewardFunction.fn` may return instead of a plain list: its scores, plus values per
    response to keep beside them in the rollout store (e.g. `rm/raw`, a reward model's score before
    clipping) that do not count towards the reward."""
    values: list
    extras: dict


def per_response(fn):
    """A batch `fn` for `RewardFunction` from `fn(prompt, response, reference) -> float`."""
    return lambda prompts, responses, references: [fn(p, r, ref) for p, r, ref in zip(prompts, responses, references)]


def reward_range(functions):
    """(lowest, highest) weighted total that `functions` can give, e.g. (-3, 4.5) for format + reward model."""
    ends = [(f.weight * f.low, f.weight * f.high) for f in functions]
    return sum(min(e) for e in ends), sum(max(e) for e in ends)


def score(functions, prompts, responses, references, extras=None):
    """Rewards of aligned lists of prompts, responses and references.

    Returns `(total, parts)`: `total` is a float32 tensor [B] of the weighted sums, `parts` maps each
    function's name to its unweighted scores, a float32 tensor [B]. A dict passed as `extras` receives
    the per-response values the functions keep beside their scores (`Scored.extras`).
    """
    columns = {}
    for f in functions:
        result = f.fn(prompts, responses, references)
        if isinstance(result, Scored):
            if extras is not None:
                extras.update(result.extras)
            result = result.values
        columns[f.name] = [float(x) for x in result]
    totals = []
    for i in range(len(responses)):
        total = 0.0
        for f in functions:
            total += f.weight * columns[f.name][i]
        totals.append(total)
    return (torch.tensor(totals, dtype=torch.float32),
            {name: torch.tensor(values, dtype=torch.float32) for name, values in columns.items()})


def reward_functions(reasoning, reward_model=None):
    """The trainers' rewards: format (with reasoning), plus the reward model's score or, without a
    reward model, the rule reward against the reference. All weights are 1."""
    functions = []
    if reasoning:
        functions.append(RewardFunction("format", 1.0, per_response(lambda p, response, ref: format_reward(response)),
                                        low=0.0, high=FORMAT_MAX))
    if reward_model is not None:
        functions.append(RewardFunction(
            "reward_model", 1.0,
            lambda prompts, responses, references: reward_model_scores(reward_model, prompts, responses, reasoning,
                                                                        keep_raw=True),
            low=-REWARD_SCALE, high=REWARD_SCALE))
    else:
        functions.append(RewardFunction(
            "rule", 1.0, per_response(lambda p, response, reference: rule_reward(response, reference, reasoning)),
            low=0.0, high=1.0))
    return functions


format_reward = reward_rules.format_reward
extract_answer = reward_rules.extract_answer
rule_reward = reward_rules.rule_reward


def clip_score(score, scale=REWARD_SCALE):
    """Clip a reward-model score to [-scale, scale] so one outlier cannot dominate a batch."""
    return max(min(float(score), scale), -scale)


def blend_scores(response_score, answer_score):
    """With reasoning, the answer content weighs more than the whole response (thinking included)."""
    return 0.4 * response_score + 0.6 * answer_score


prompt_messages = reward_rules.prompt_messages


def reward_model_score(reward_model, prompt, response, reasoning):
    """Clipped reward-model score of one response; with reasoning, blended with its answer's score."""
    return reward_model_scores(reward_model, [prompt], [response], reasoning)[0]


def reward_model_scores(reward_model, prompts, responses, reasoning, keep_raw=False):
    """`reward_model_score` of each response, every chat of the batch scored in one call
    (`RewardModel.score_many`): the responses first, then the answers of those that have one.
    With `keep_raw`, a `Scored` whose extras hold `rm/raw`: the same blend of the unclipped scores."""
    histories = [prompt_messages(prompt) for prompt in prompts]
    chats = [h + [{"role": "assistant", "content": r}] for h, r in zip(histories, responses)]
    answers = [extract_answer(r, True) if reasoning else None for r in responses]
    with_answer = [i for i, answer in enumerate(answers) if answer is not None]
    chats += [histories[i] + [{"role": "assistant", "content": answers[i]}] for i in with_answer]
    score_many = getattr(reward_model, "score_many", None)  # any object with score(messages) also works
    unclipped = [float(x) for x in (score_many(chats) if score_many else map(reward_model.score, chats))]

    def blended(values):
        out = values[:len(responses)]
        for j, i in enumerate(with_answer):
            out[i] = blend_scores(out[i], values[len(responses) + j])
        return out

    scores = blended([clip_score(x) for x in unclipped])
    return Scored(scores, {"rm/raw": blended(unclipped)}) if keep_raw else scores
