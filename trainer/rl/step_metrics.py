"""What an RL step records beyond its progress line: the step's metrics under stable names, and the
rows of the rollout store (see `trainer/rules/records.py`).

Shapes: B responses (groups of `group_size` consecutive responses share one prompt), R completion
tokens. Names follow TRL's GRPO metrics where there is one:

- `reward/<part>/mean|std`: each reward function's own (unweighted) scores;
- `frac_reward_zero_std`: share of groups whose rewards are all equal (GRPO; they carry no signal);
- `accuracy`: share of responses whose answer equals the reference, whatever decided the reward;
- `length/mean|min|max`, `length/terminated_mean`, `truncated_frac` (hit max_gen_len: no end token);
- `entropy`: mean -log p of the sampled tokens (the Monte-Carlo estimate of the policy's entropy);
- `advantage/mean|std`; `rm/clip_frac`: share of reward-model scores at the clip bound;
- `clip_frac` (PPO): share of responses whose probability ratio left [1 - eps, 1 + eps];
- timings come from the loop (`trainer.rules.records.StepTimer`): `time/generate_s`, `time/score_s`, ...
"""
import torch

from trainer.rl.rewards import REWARD_SCALE, format_reward, rule_reward
from trainer.rules.records import PART_PREFIX

FULL_FORMAT = 1.5  # format_reward of a complete think/answer response with each tag once


def truncated(completion_ids, eos_id):
    """Which responses hit max_gen_len: those without an end token [B] (bool)."""
    return ~(completion_ids == eos_id).any(dim=1)


def sequence_kl(logps, ref_logps, mask):
    """Per-response mean k3 KL to the reference over its tokens [B] (0 without a reference)."""
    delta = (ref_logps - logps).detach().float()
    kl = torch.exp(delta) - delta - 1
    m = mask.to(kl.dtype)
    return (kl * m).sum(dim=1) / m.sum(dim=1).clamp(min=1)


def _std(x):
    return x.std().item() if x.numel() > 1 else 0.0


def step_metrics(*, rewards, parts, advantages, mask, logps, is_truncated, accuracy, group_size=1,
                 reward_model_part=None, reward_scale=None):
    """The step's RL metrics (floats, by stable name; see the module docstring).

    `rewards` [B] totals, `parts` name -> unweighted scores [B], `advantages` [B], `mask` [B, R],
    `logps` [B, R] of the sampled tokens, `is_truncated` [B] bool, `accuracy` [B] 0/1.
    `reward_model_part`: the name of the reward-model part, whose share of scores at +-`reward_scale`
    is `rm/clip_frac`.
    """
    out = {}
    for name, values in parts.items():
        values = values.float()
        out[f"{PART_PREFIX}{name}/mean"] = values.mean().item()
        out[f"{PART_PREFIX}{name}/std"] = _std(values)
    rewards = rewards.detach().float().cpu()
    if group_size > 1:
        grouped = rewards.view(-1, group_size)
        out["frac_reward_zero_std"] = (grouped.max(dim=1).values == grouped.min(dim=1).values).float().mean().item()
    out["accuracy"] = accuracy.float().mean().item()
    lengths = mask.sum(dim=1).float().cpu()
    trunc = is_truncated.cpu()
    out["length/mean"] = lengths.mean().item()
    out["length/min"] = lengths.min().item()
    out["length/max"] = lengths.max().item()
    out["length/terminated_mean"] = lengths[~trunc].mean().item() if (~trunc).any() else 0.0
    out["truncated_frac"] = trunc.float().mean().item()
    m = mask.to(logps.dtype)
    out["entropy"] = (-(logps.detach() * m).sum() / m.sum().clamp(min=1)).item()
    adv = advantages.detach().float().cpu()
    out["advantage/mean"] = adv.mean().item()
    out["advantage/std"] = _std(adv)
    if reward_model_part is not None and reward_model_part in parts and reward_scale:
        scores = parts[reward_model_part].float().abs()
        out["rm/clip_frac"] = (scores >= reward_scale - 1e-6).float().mean().item()
    return out


def ppo_clip_frac(logp, old_logp, clip_epsilon):
    """Share of responses whose ratio exp(logp - old_logp) (whole-response log-probs [B]) left
    [1 - eps, 1 + eps], i.e. whose policy gradient the clip cut off on one side."""
    ratio = torch.exp((logp - old_logp).detach().float())
    return ((ratio - 1).abs() > clip_epsilon).float().mean().item()


def rollout_groups(*, prompts, references, responses, rewards, parts, weights, advantages, lengths,
                   is_truncated, group_size=1, extras=None):
    """The rows of the rollout store for one step: a list of groups, each a list of response dicts.

    `parts` are unweighted scores by name; the stored `reward/<part>` values are weighted (`weights`:
    name -> weight), so that they add up to the stored `reward`. `extras`: name -> [B] values per
    response (kl, accuracy, format_ok, value, ...) or a float shared by the step (baseline, rho).
    """
    extras = extras or {}
    rewards, advantages = rewards.detach().float().cpu().tolist(), advantages.detach().float().cpu().tolist()
    lengths, is_truncated = lengths.cpu().tolist(), is_truncated.cpu().tolist()
    part_values = {name: [weights.get(name, 1.0) * v for v in values.float().cpu().tolist()]
                   for name, values in parts.items()}
    extra_values = {name: (values.detach().float().cpu().tolist() if torch.is_tensor(values)
                           else list(values) if isinstance(values, (list, tuple)) else [float(values)] * len(rewards))
                    for name, values in extras.items()}
    groups = []
    for i in range(len(responses)):
        if i % group_size == 0:
            groups.append([])
        groups[-1].append({
            "prompt": prompts[i], "reference": references[i], "response": responses[i], "reward": rewards[i],
            "advantage": advantages[i], "length": int(lengths[i]), "truncated": bool(is_truncated[i]),
            "parts": {name: values[i] for name, values in part_values.items()},
            "extras": {name: values[i] for name, values in extra_values.items()}})
    return groups


def record(run, ro, *, reward_fns, rewards, parts, advantages, logps, ref_logps, eos_id, group_size=1,
           extras=None):
    """What an RL step function hands on besides its loss: returns the step's metrics (see the module
    docstring), counts the rollout's tokens and, when the store keeps this step, gives `run.records`
    its rows (per response: weighted parts, advantage, length, truncation, KL to the reference,
    accuracy, format_ok with reasoning, and `extras`: name -> [B] values or one float per step)."""
    reasoning = run.args.reasoning
    is_truncated = truncated(ro.input_ids[:, -ro.num_completion:], eos_id)
    accuracy = torch.tensor([rule_reward(r, ref, reasoning) for r, ref in zip(ro.responses, ro.references)])
    names = [f.name for f in reward_fns]
    out = step_metrics(rewards=rewards, parts=parts, advantages=advantages, mask=ro.completion_mask, logps=logps,
                       is_truncated=is_truncated, accuracy=accuracy, group_size=group_size,
                       reward_model_part="reward_model" if "reward_model" in names else None,
                       reward_scale=REWARD_SCALE)
    run.records.add_tokens(ro.attention_mask.sum())
    if run.records.wants_rollouts():
        per_response = {"kl": sequence_kl(logps, ref_logps, ro.completion_mask), "accuracy": accuracy}
        if reasoning:
            per_response["format_ok"] = [float(format_reward(r) >= FULL_FORMAT) for r in ro.responses]
        run.records.add_rollouts(rollout_groups(
            prompts=ro.prompts, references=ro.references, responses=ro.responses, rewards=rewards, parts=parts,
            weights={f.name: f.weight for f in reward_fns}, advantages=advantages,
            lengths=ro.completion_mask.sum(dim=1), is_truncated=is_truncated, group_size=group_size,
            extras={**per_response, **(extras or {})}))
    return out
