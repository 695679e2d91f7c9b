"""Shared pieces of the PPO, GRPO and SPO trainers: rewards, the reward model, sampling, and the
algorithms' maths as small pure functions (so they can be checked against hand-computed values).

Shapes: B = responses in the batch, R = completion tokens. Log-probabilities are per token, [B, R];
masks are 0/1 tensors of the same shape that keep a response's tokens up to and including its first
end-of-sequence token.
"""
import json
import os
import re
from contextlib import ExitStack
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from trainer import roots
from trainer import trainer_utils as tu
from trainer.args import parse_args

# Reward-model scores are clipped to [-REWARD_SCALE, REWARD_SCALE]; SPO maps rewards to [0, 1] with it.
REWARD_SCALE = 3.0

# A complete reasoning response: think block, then answer block (one blank line between is tolerated).
_FORMAT_PATTERNS = (
    re.compile(r"^<think>\n.*?\n</think>\n<answer>\n.*?\n</answer>$", re.S),
    re.compile(r"^<think>\n.*?\n</think>\n\n<answer>\n.*?\n</answer>$", re.S),
)
_TAGS = ("<think>", "</think>", "<answer>", "</answer>")
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)
_CHATML_TURN = re.compile(r"<\|im_start\|>(system|user|assistant)\s+(.*?)<\|im_end\|>", re.S)


# --------------------------------------------------------------------------------------------------
# Rewards


def format_reward(response):
    """Reasoning format reward: 0.5 for a full think/answer match, plus 0.25 per tag present exactly once."""
    full = 0.5 if any(p.match(response) for p in _FORMAT_PATTERNS) else 0.0
    return full + 0.25 * sum(response.count(tag) == 1 for tag in _TAGS)


def extract_answer(text, reasoning):
    """The answer part of a response: the `<answer>` content with reasoning (None without one), else the text."""
    if not reasoning:
        return text.strip()
    match = _ANSWER.search(text)
    return match.group(1).strip() if match else None


def _normalise(text):
    return " ".join(text.split())


def rule_reward(response, reference, reasoning):
    """1.0 when the response's answer equals the reference answer (whitespace-insensitive), else 0.0.

    A reference written in the reasoning format (`<answer>...</answer>`) is compared by its answer content.
    """
    answer = extract_answer(response, reasoning)
    if answer is None:
        return 0.0
    ref_answer = extract_answer(reference, True) if _ANSWER.search(reference) else reference.strip()
    return 1.0 if _normalise(answer) == _normalise(ref_answer) else 0.0


def clip_score(score, scale=REWARD_SCALE):
    """Clip a reward-model score to [-scale, scale] so one outlier cannot dominate a batch."""
    return max(min(float(score), scale), -scale)


def blend_scores(response_score, answer_score):
    """With reasoning, the answer content weighs more than the whole response (thinking included)."""
    return 0.4 * response_score + 0.6 * answer_score


def prompt_messages(prompt):
    """Turn a ChatML prompt back into chat messages (the open assistant turn at the end is left out)."""
    return [{"role": role, "content": content.strip()} for role, content in _CHATML_TURN.findall(prompt)]


def reward_model_score(reward_model, prompt, response, reasoning):
    """Clipped reward-model score of one response; with reasoning, blended with its answer's score."""
    return reward_model_scores(reward_model, [prompt], [response], reasoning)[0]


def reward_model_scores(reward_model, prompts, responses, reasoning):
    """`reward_model_score` of each response, every chat of the batch scored in one call
    (`RewardModel.score_many`): the responses first, then the answers of those that have one."""
    histories = [prompt_messages(prompt) for prompt in prompts]
    chats = [h + [{"role": "assistant", "content": r}] for h, r in zip(histories, responses)]
    answers = [extract_answer(r, True) if reasoning else None for r in responses]
    with_answer = [i for i, answer in enumerate(answers) if answer is not None]
    chats += [histories[i] + [{"role": "assistant", "content": answers[i]}] for i in with_answer]
    score_many = getattr(reward_model, "score_many", None)  # any object with score(messages) also works
    raw = [clip_score(x) for x in (score_many(chats) if score_many else map(reward_model.score, chats))]
    scores = raw[:len(responses)]
    for j, i in enumerate(with_answer):
        scores[i] = blend_scores(scores[i], raw[len(responses) + j])
    return scores


def compute_rewards(prompts, responses, references, reasoning, reward_model=None):
    """Reward of each response (all three lists aligned): format rewards with reasoning, plus either
    the reward model's score or, without a reward model, the rule reward against the reference."""
    rewards = [format_reward(response) if reasoning else 0.0 for response in responses]
    if reward_model is not None:
        scores = reward_model_scores(reward_model, prompts, responses, reasoning)
    else:
        scores = [rule_reward(response, reference, reasoning) for response, reference in zip(responses, references)]
    return torch.tensor([r + s for r, s in zip(rewards, scores)], dtype=torch.float32)


# --------------------------------------------------------------------------------------------------
# Reward model


class RewardModel:
    """A reward model read from a local transformers folder.

    Two kinds are accepted: a model whose remote code offers InternLM2-style
    `get_score(tokenizer, messages) -> float` (loaded with AutoModel and `trust_remote_code=True`, only
    from a folder an admin allowed: see trainer/roots.py), or
    any `AutoModelForSequenceClassification` with one label, whose logit is the score.
    """

    def __init__(self, path, device="cpu"):
        from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification, AutoTokenizer
        from transformers.utils import logging as hf_logging

        check_reward_model_path(path)
        hf_logging.disable_progress_bar()  # a loading bar per start only clutters the training log
        dtype = torch.float16 if str(device).startswith("cuda") else torch.float32
        self.device = device
        # A folder's own Python code runs only where an admin allowed it (trainer/roots.py).
        trust = roots.trusts_code(path)
        self.tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust)
        config = AutoConfig.from_pretrained(path, trust_remote_code=trust)
        model = None
        if "AutoModel" in (getattr(config, "auto_map", None) or {}):
            if not trust:
                raise ValueError(f"{os.path.abspath(path)} needs its own code to run (auto_map in config.json), "
                                 f"and it is not among the folders an admin allowed ({roots.TRUSTED_CODE_ENV})")
            model = AutoModel.from_pretrained(path, dtype=dtype, trust_remote_code=True)
            if not callable(getattr(model, "get_score", None)):
                model = None  # remote code without get_score: try it as a classifier below
        if model is not None:
            self.kind = "get_score"
        else:
            model = AutoModelForSequenceClassification.from_pretrained(path, dtype=dtype, trust_remote_code=trust)
            if model.config.num_labels != 1:
                raise ValueError(f"reward model {path}: a sequence classifier needs num_labels=1, "
                                 f"this one has {model.config.num_labels}")
            self.kind = "classifier"
            if model.config.pad_token_id is None:
                model.config.pad_token_id = self.tokenizer.pad_token_id
        self.model = model.to(device).eval().requires_grad_(False)

    def _chat_text(self, messages):
        if getattr(self.tokenizer, "chat_template", None):
            return self.tokenizer.apply_chat_template(messages, tokenize=False)
        return "\n".join(f"{m['role']}: {m['content']}" for m in messages)

    @torch.no_grad()
    def score(self, messages):
        """The reward of a chat whose last message is the assistant's response."""
        return self.score_many([messages])[0]

    #: Chats per classifier forward pass in `score_many`.
    BATCH = 16

    @torch.no_grad()
    def score_many(self, chats):
        """`score` of each chat: a classifier scores them in right-padded batches (each row attends to
        its own tokens only, so it gets the score it gets alone); a get_score model is asked
        once per chat, or once in all through its `get_scores` where it has one."""
        if self.kind == "get_score":
            if callable(getattr(self.model, "get_scores", None)) and len(chats) > 1:
                return [float(x) for x in self.model.get_scores(self.tokenizer, chats)]
            return [float(self.model.get_score(self.tokenizer, messages)) for messages in chats]
        limit = getattr(self.model.config, "max_position_embeddings", None)
        pad_id = self.model.config.pad_token_id
        scores = []
        for start in range(0, len(chats), self.BATCH):
            rows = [self.tokenizer(self._chat_text(m), add_special_tokens=False)["input_ids"]
                    for m in chats[start:start + self.BATCH]]
            rows = [r[-limit:] if limit else r for r in rows]  # keep the response's end, where the score is read
            width = max(len(r) for r in rows)
            ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
            mask = torch.zeros((len(rows), width), dtype=torch.long)
            for i, r in enumerate(rows):
                ids[i, :len(r)], mask[i, :len(r)] = torch.tensor(r, dtype=torch.long), 1
            # The classifier reads each row at its last non-pad token, as it does for a chat alone.
            logits = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device)).logits
            scores += [float(x) for x in logits[:, 0]]
        return scores


def check_reward_model_path(path):
    """Raise FileNotFoundError naming `path` unless it is a folder holding a transformers config."""
    if not os.path.isdir(path):
        raise FileNotFoundError(f"reward model folder not found: {os.path.abspath(path)} "
                                f"(--reward_model_path {path}; use 'none' for rule rewards only)")
    config = os.path.join(path, "config.json")
    if not os.path.isfile(config):
        raise FileNotFoundError(f"reward model folder {os.path.abspath(path)} has no config.json")
    try:
        with open(config, encoding="utf-8") as f:
            json.load(f)  # a broken config fails here, before any training starts
    except ValueError as e:
        raise ValueError(f"reward model config {os.path.abspath(config)} is not valid JSON: {e}") from None


def load_reward_model(path, device):
    """The reward model at `path`, or None for 'none' (rule rewards only). A folder that cannot be
    loaded is a `SetupError` naming it (one clear line instead of a traceback)."""
    if str(path).strip().lower() == "none":
        return None
    try:
        return RewardModel(path, device)
    except (OSError, ValueError) as e:
        raise tu.SetupError(f"could not load the reward model at {os.path.abspath(path)}: {e}") from None


# --------------------------------------------------------------------------------------------------
# Sampling and log-probabilities


def encode_prompts(tokenizer, prompts, max_len, device):
    """Left-padded prompt ids and mask, keeping each prompt's last `max_len` tokens (its end matters most)."""
    enc = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left",
                    add_special_tokens=False, return_token_type_ids=False)
    ids, mask = enc["input_ids"][:, -max_len:], enc["attention_mask"][:, -max_len:]
    keep = mask.any(dim=0).nonzero()  # drop columns that are padding in every row
    start = int(keep[0]) if len(keep) else 0
    return ids[:, start:].to(device), mask[:, start:].to(device)


def sample(model, prompt_ids, prompt_mask, max_new_tokens, pad_id, eos_id, num_return_sequences=1,
           temperature=0.8, top_k=50, top_p=1.0):
    """Sample completions with the lean sampler (`model.sampling`): the prompts encoded once, a
    pre-allocated KV cache, stopping when every response has ended. Returns `Samples`: completion
    ids [B * n, R] (prompts repeated n times, pad after EOS), their mask, and the sampled tokens'
    log-probs under the sampling policy."""
    from model.sampling import sample as lean_sample
    return lean_sample(model, prompt_ids, prompt_mask, max_new_tokens, eos_id=eos_id, pad_id=pad_id,
                       num_samples=num_return_sequences, temperature=temperature, top_k=top_k, top_p=top_p,
                       return_logps=True)


def completion_mask(completion_ids, eos_id):
    """1 for each token up to and including the first EOS, 0 after it (all ones when there is none)."""
    is_eos = completion_ids == eos_id
    length = completion_ids.size(1)
    first_eos = torch.where(is_eos.any(dim=1), is_eos.int().argmax(dim=1), torch.full_like(is_eos[:, 0], length - 1,
                                                                                            dtype=torch.long))
    positions = torch.arange(length, device=completion_ids.device).unsqueeze(0)
    return (positions <= first_eos.unsqueeze(1)).int()


def trim_completions(completion_ids, mask):
    """Cut the columns after the last one any response uses, so no step computes on trailing pads."""
    used = mask.any(dim=0).nonzero()
    end = int(used[-1]) + 1 if len(used) else 1
    return completion_ids[:, :end], mask[:, :end]


def token_logps(logits, targets):
    """log p(target) for each position: logits [B, T, V], targets [B, T] -> [B, T]."""
    return torch.gather(F.log_softmax(logits.float(), dim=-1), 2, targets.unsqueeze(-1)).squeeze(-1)


def completion_logps(model, input_ids, attention_mask, num_completion, shared_prefix=None):
    """Per-token log-probs of the last `num_completion` tokens of `input_ids` under `model` -> [B, R].

    Returns (logps, aux_loss); only the logits needed are computed (`logits_to_keep`). With
    `shared_prefix=(prompt_len, group_size)` each group's prompt is computed once (see
    `model.shared_prefix`).
    """
    if shared_prefix is not None:
        out = model(input_ids=input_ids, attention_mask=attention_mask, shared_prefix=shared_prefix)
    else:
        out = model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=num_completion + 1)
    logps = token_logps(out.logits[:, :-1, :], input_ids[:, -num_completion:])
    aux = getattr(out, "aux_loss", None)
    return logps, (aux if aux is not None else logps.new_zeros(()))


def decode(tokenizer, completion_ids, mask):
    """Response texts, each cut at its mask (its first EOS), special tokens removed."""
    return [tokenizer.decode(ids[m.bool()], skip_special_tokens=True) for ids, m in zip(completion_ids, mask)]


@dataclass
class Rollout:
    """Sampled responses of one batch; prompts and references are repeated to align with responses."""
    prompts: list
    references: list
    responses: list
    input_ids: torch.Tensor        # [B, P + R] prompt (left-padded) + completion
    attention_mask: torch.Tensor   # [B, P + R] prompt mask + completion mask
    completion_mask: torch.Tensor  # [B, R]
    sample_logps: torch.Tensor = None  # [B, R] the sampled tokens' log-probs under the sampling policy
    group_size: int = 1            # consecutive responses sharing one prompt

    @property
    def num_completion(self):
        return self.completion_mask.size(1)

    def response_lengths(self):
        return self.completion_mask.sum(dim=1).float()


def rollout(model, tokenizer, prompts, references, max_prompt_len, max_gen_len, device, num_generations=1,
            temperature=0.8, top_k=50, top_p=1.0):
    """Sample `num_generations` responses per prompt from `model` (unwrapped, not DDP) and assemble
    the sequences the loss passes run on, trimmed after the longest response."""
    prompt_ids, prompt_mask = encode_prompts(tokenizer, prompts, max_prompt_len, device)
    out = sample(model, prompt_ids, prompt_mask, max_gen_len, tokenizer.pad_token_id, tokenizer.eos_token_id,
                 num_return_sequences=num_generations, temperature=temperature, top_k=top_k, top_p=top_p)
    completion_ids, mask = trim_completions(out.tokens, out.mask)
    prompt_ids = prompt_ids.repeat_interleave(num_generations, dim=0)
    prompt_mask = prompt_mask.repeat_interleave(num_generations, dim=0)
    return Rollout(
        prompts=[p for p in prompts for _ in range(num_generations)],
        references=[r for r in references for _ in range(num_generations)],
        responses=decode(tokenizer, completion_ids, mask),
        input_ids=torch.cat([prompt_ids, completion_ids], dim=1),
        attention_mask=torch.cat([prompt_mask, mask.to(prompt_mask.dtype)], dim=1),
        completion_mask=mask,
        sample_logps=out.logps[:, :mask.size(1)],
        group_size=num_generations,
    )


def rollout_logps(model, ro):
    """`completion_logps` of a rollout's responses under `model` (plain or DDP-wrapped). Groups of
    responses to one prompt share one pass over it when that is exact (dense model, no dropout)."""
    config = tu.unwrap_model(model).config
    shared = None
    if ro.group_size > 1 and not config.use_moe and config.dropout == 0:
        shared = (ro.input_ids.size(1) - ro.num_completion, ro.group_size)
    return completion_logps(model, ro.input_ids, ro.attention_mask, ro.num_completion, shared_prefix=shared)


def sampling_options(args):
    """The rollout's sampling keywords from the RL options."""
    return {"temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p}


# --------------------------------------------------------------------------------------------------
# GRPO


def group_advantages(rewards, group_size, eps=1e-4):
    """GRPO advantages: each reward normalised within its group of `group_size` samples of one prompt,
    (r - mean) / (std + eps), std unbiased as in TRL's GRPOTrainer. Returns (advantages, group std)."""
    grouped = rewards.view(-1, group_size)
    mean = grouped.mean(dim=1).repeat_interleave(group_size)
    std = grouped.std(dim=1).repeat_interleave(group_size)
    return (rewards - mean) / (std + eps), std


def k3_kl(logps, ref_logps):
    """Per-token k3 estimate of KL(policy || reference): exp(ref - logp) - (ref - logp) - 1 (never negative)."""
    delta = ref_logps - logps
    return torch.exp(delta) - delta - 1


def masked_mean_per_sequence(values, mask):
    """Mean of `values` over each row's masked tokens, then over rows."""
    mask = mask.to(values.dtype)
    return ((values * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)).mean()


def grpo_loss(logps, ref_logps, advantages, mask, beta):
    """GRPO loss (TRL's single-update form): -(ratio * A - beta * KL) per token, where ratio is
    exp(logp - logp.detach()) = 1 whose gradient is the policy gradient; mean over each response,
    then over responses. Returns (loss, mean per-token KL)."""
    kl = k3_kl(logps, ref_logps)
    ratio = torch.exp(logps - logps.detach())
    per_token = -(ratio * advantages.unsqueeze(1) - beta * kl)
    mask_f = mask.to(kl.dtype)
    mean_kl = (kl.detach() * mask_f).sum() / mask_f.sum().clamp(min=1)
    return masked_mean_per_sequence(per_token, mask), mean_kl


# --------------------------------------------------------------------------------------------------
# SPO


class ValueTracker:
    """SPO's adaptive baseline: a Beta(alpha, beta) belief about the normalised reward in [0, 1].

    Each update decays the old evidence by rho and adds the batch's mean normalised reward. rho comes
    from how far the policy moved (the change in mean token log-prob, d): rho = 2^(-d / d_half), clipped
    to [rho_min, rho_max]; a policy that moves fast forgets old rewards fast.
    """

    def __init__(self, d_half=0.06, rho_min=0.5, rho_max=0.96, rho_first=0.9, scale=REWARD_SCALE):
        self.d_half, self.rho_min, self.rho_max, self.rho_first, self.scale = d_half, rho_min, rho_max, rho_first, scale
        prior = 1.0 / (1.0 - rho_min)  # the evidence a stream of updates at the slowest decay settles to
        self.alpha = 0.5 * prior
        self.beta = 0.5 * prior
        self.old_mean_logp = None

    def baseline(self):
        """Expected normalised reward, in [0, 1]."""
        return self.alpha / (self.alpha + self.beta)

    def baseline_reward(self):
        """The baseline mapped back to the reward scale ([-scale, scale])."""
        return self.baseline() * 2 * self.scale - self.scale

    def normalise(self, rewards):
        """Rewards mapped from [-scale, scale] to [0, 1] (clamped so alpha and beta stay positive)."""
        return ((rewards + self.scale) / (2 * self.scale)).clamp(0.0, 1.0)

    def rho(self, mean_logp):
        """Decay for a policy whose mean token log-prob is now `mean_logp`."""
        if self.old_mean_logp is None:
            return self.rho_first
        rho = 2 ** (-abs(self.old_mean_logp - mean_logp) / self.d_half)
        return max(min(rho, self.rho_max), self.rho_min)

    def update(self, mean_normalised_reward, mean_logp):
        """Fold in one batch: its mean normalised reward (see `normalise`) and the policy's mean token
        log-prob on it. Returns the rho used."""
        rho = self.rho(mean_logp)
        self.old_mean_logp = mean_logp
        avg = float(mean_normalised_reward)
        self.alpha = rho * self.alpha + avg
        self.beta = rho * self.beta + (1 - avg)
        return rho

    def state_dict(self):
        return {"alpha": self.alpha, "beta": self.beta, "old_mean_logp": self.old_mean_logp}

    def load_state_dict(self, state):
        self.alpha, self.beta, self.old_mean_logp = state["alpha"], state["beta"], state["old_mean_logp"]


def spo_advantages(rewards, baseline_reward, limit=5.0):
    """SPO advantage: reward minus the tracker's baseline (on the reward scale), clamped to +-limit."""
    return (rewards - baseline_reward).clamp(-limit, limit)


def spo_loss(logps, ref_logps, advantages, mask, beta):
    """SPO loss: -logp * A + beta * KL per token, mean over each response, then over responses.
    Returns (loss, mean per-token KL)."""
    kl = k3_kl(logps, ref_logps)
    per_token = -logps * advantages.unsqueeze(1) + beta * kl
    mask_f = mask.to(kl.dtype)
    mean_kl = (kl.detach() * mask_f).sum() / mask_f.sum().clamp(min=1)
    return masked_mean_per_sequence(per_token, mask), mean_kl


def masked_mean(values, mask):
    """Mean of `values` over all masked tokens."""
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp(min=1)


# --------------------------------------------------------------------------------------------------
# PPO


class Critic(nn.Module):
    """PPO value model: the MiniMind body (`causal_lm.model`) with a Linear(hidden, 1) value head."""

    def __init__(self, causal_lm):
        super().__init__()
        self.model = causal_lm.model
        self.value_head = nn.Linear(causal_lm.config.hidden_size, 1)

    def forward(self, input_ids, attention_mask=None):
        out = self.model(input_ids=input_ids, attention_mask=attention_mask)
        hidden = out[0] if isinstance(out, (tuple, list)) else getattr(out, "last_hidden_state", out)
        return self.value_head(hidden).squeeze(-1)  # [B, T]


def last_token_values(values, attention_mask):
    """Each row's value at its last attended position: values [B, T], mask [B, T] -> [B]."""
    positions = torch.arange(attention_mask.size(1), device=attention_mask.device)
    last = (attention_mask.long() * positions).argmax(dim=1)
    return values[torch.arange(values.size(0), device=values.device), last]


def ppo_losses(logp, old_logp, ref_logp, values, rewards, clip_epsilon, vf_coef, kl_coef):
    """PPO on whole responses (as upstream MiniMind): log-probs summed over each response's tokens [B],
    the critic's value at the response end [B], rewards [B].

    advantage = reward - value (detached); policy loss = -mean(min(ratio * A, clip(ratio) * A)) with
    ratio = exp(logp - old_logp); value loss = MSE(value, reward); KL terms are mean log-ratios.
    Returns a dict: loss, policy_loss, value_loss, kl (to the old actor), kl_ref (to the reference).
    """
    advantages = rewards - values.detach()
    ratio = torch.exp(logp - old_logp)
    surrogate = torch.min(ratio * advantages, ratio.clamp(1 - clip_epsilon, 1 + clip_epsilon) * advantages)
    policy_loss = -surrogate.mean()
    value_loss = F.mse_loss(values, rewards)
    kl = (logp - old_logp).mean()
    kl_ref = (logp - ref_logp).mean()
    loss = policy_loss + vf_coef * value_loss + kl_coef * kl_ref
    return {"loss": loss, "policy_loss": policy_loss, "value_loss": value_loss, "kl": kl, "kl_ref": kl_ref}


def base_weight_name(reasoning):
    """PPO/GRPO/SPO start from the reasoning model or from the full SFT model."""
    return "reason" if reasoning else "full_sft"


def critic_weight_name(save_weight):
    """The critic's file prefix beside the actor's: `ppo_actor` -> `ppo_critic`, else `{save_weight}_critic`."""
    return save_weight.replace("actor", "critic") if "actor" in save_weight else f"{save_weight}_critic"


def global_mean(value, info):
    """The mean of a float over all processes (itself in a plain run), e.g. to keep SPO's tracker in step."""
    if not info.distributed:
        return float(value)
    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    t = torch.tensor([float(value)], device=device, dtype=torch.float64)
    dist.all_reduce(t)
    return float(t.item()) / info.world_size


# --------------------------------------------------------------------------------------------------
# The RL training loop


@dataclass
class Trained:
    """One optimised module (possibly DDP-wrapped), its optimizer and its peak learning rate."""
    module: nn.Module
    optimizer: torch.optim.Optimizer
    learning_rate: float


def run_rl_training(args, info, *, trained, config, dataset, collate_fn, step_fn, progress_line, save_fn,
                    stop, resume_state=None, tracker=None, extras=None, after_update=None):
    """The loop shared by PPO, GRPO and SPO (same conventions as `trainer_utils.run_supervised_training`).

    - `trained`: list of `Trained`; the first is the policy, whose state is the resume file's `model`.
    - `step_fn(batch) -> (loss, metrics)`: rollout, rewards and loss of one micro-batch; `metrics` is an
      ordered dict of floats for the progress line.
    - `progress_line(epoch, step, iters, metrics, lrs) -> str` (epoch 0-based, lrs one per `trained`).
    - `save_fn()` writes the weight file(s) (rank 0); the resume state goes to
      `resume_path(args.save_weight, ...)` with `extras` (name -> object with state_dict/load_state_dict:
      a critic, its optimizer, SPO's value tracker), which are restored from `resume_state`.
    - `after_update(step)` runs after each optimizer step (PPO refreshes its old actor there).
    Gradient accumulation, clipping, the cosine schedule per micro-step, logging every `log_interval`
    steps, saves every `save_interval` steps and at each epoch's end, SIGTERM -> save and exit 143.
    """
    extras = extras or {}
    policy = trained[0]
    ckpt = tu.resume_path(args.save_weight, config.hidden_size, config.use_moe)
    scaler = tu.make_grad_scaler(info.device, args.dtype)
    start_epoch, start_step = 0, 0
    if resume_state is not None:
        tu.unwrap_model(policy.module).load_state_dict(resume_state["model"])
        policy.optimizer.load_state_dict(resume_state["optimizer"])
        if resume_state.get("scaler"):
            scaler.load_state_dict(resume_state["scaler"])
        for name, obj in extras.items():
            if resume_state.get(name) is not None:
                (tu.unwrap_model(obj) if isinstance(obj, nn.Module) else obj).load_state_dict(resume_state[name])
        tu.set_rng_states(resume_state.get("rng"))
        start_epoch, start_step = resume_state["epoch"], resume_state["step"]
    iters = tu.batches_per_epoch(len(dataset), args.batch_size, info.world_size)
    if start_step >= iters:
        start_epoch, start_step = start_epoch + 1, 0
    if start_epoch >= args.epochs:
        tu.log(f"Nothing to do: the resume state at {os.path.abspath(ckpt)} is already past epoch {args.epochs}")
        return
    autocast = tu.autocast_context(info.device, args.dtype)
    wandb_id = tu.tracker_run_id(tracker)

    def save(epoch, boundary_step):
        if tu.is_main_process():
            save_fn()
            tu.save_resume(ckpt, model=policy.module, optimizer=policy.optimizer, scaler=scaler, epoch=epoch,
                           step=boundary_step, world_size=info.world_size, global_step=epoch * iters + boundary_step,
                           wandb_id=wandb_id, **extras)
            tu.record_save(args, epoch, boundary_step, epoch * iters + boundary_step)

    stop.arm()
    for t in trained:
        t.module.train()
    for epoch in range(start_epoch, args.epochs):
        skip = start_step if epoch == start_epoch else 0
        loader = tu.make_loader(dataset, args.batch_size, epoch, info, collate_fn, args.num_workers, skip)
        if skip:
            tu.log(f"Epoch [{epoch + 1}/{args.epochs}]: skipping the first {skip} steps, starting at step {skip + 1}")
        boundary = skip
        for step, batch in enumerate(loader, start=skip + 1):
            lrs = [tu.get_lr(epoch * iters + step, args.epochs * iters, t.learning_rate) for t in trained]
            for t, lr in zip(trained, lrs):
                for group in t.optimizer.param_groups:
                    group["lr"] = lr
            is_boundary = step % args.accumulation_steps == 0 or step == iters
            with ExitStack() as no_sync:
                if info.distributed and not is_boundary:  # all-reduce gradients once per optimizer step
                    for t in trained:
                        no_sync.enter_context(t.module.no_sync())
                with autocast:
                    loss, metrics = step_fn(batch)
                scaler.scale(loss / args.accumulation_steps).backward()
            if is_boundary:
                for t in trained:
                    scaler.unscale_(t.optimizer)
                    torch.nn.utils.clip_grad_norm_([p for p in t.module.parameters() if p.requires_grad],
                                                   args.grad_clip)
                    scaler.step(t.optimizer)
                scaler.update()
                for t in trained:
                    t.optimizer.zero_grad(set_to_none=True)
                boundary = step
                if after_update is not None:
                    after_update(step)

            if step % args.log_interval == 0 or step == iters:
                tu.log(progress_line(epoch, step, iters, metrics, lrs))
                if tracker is not None:
                    tracker.log({**metrics, **{f"lr_{i}": lr for i, lr in enumerate(lrs)}})
            if step % args.save_interval == 0 or step == iters:
                save(epoch, boundary)
            if stop.should_stop():
                save(epoch, boundary)
                if info.distributed:
                    dist.barrier()
                tu.log(tu.stopped_message(epoch, args.epochs, boundary, iters, ckpt))
                raise SystemExit(tu.SIGTERM_EXIT)
        start_step = 0
    if info.distributed:
        dist.barrier()


# --------------------------------------------------------------------------------------------------
# Setup shared by the three scripts


def start_rl(rl_type):
    """The first steps of every RL script, in this order: parse the options of `rl_type` ("ppo",
    "grpo" or "spo"), catch SIGTERM, start the processes, seed each rank, check the inputs.
    Returns (args, stop, info)."""
    args = parse_args(rl_type)
    stop = tu.StopSignal()
    info = tu.init_distributed(args)
    tu.setup_seed(tu.BASE_SEED + info.rank)
    check_rl_inputs(args)
    return args, stop, info


def load_resume_and_tracker(args, info, config, rl_type):
    """The resume state (with --from_resume 1, else None) and the experiment tracker, whose run
    continues the resumed one. Returns (resume, tracker)."""
    return tu.resume_and_tracker(
        args, info, args.save_weight, config,
        f"MiniMind-{rl_type.upper()}-Epoch-{args.epochs}-BS-{args.batch_size}-LR-{args.learning_rate}")


@dataclass
class RLSetup:
    """Everything a single-policy RL script (GRPO, SPO) needs for its loop; built by `setup_rl`."""
    args: object          # the parsed options
    stop: object          # tu.StopSignal, armed by run_rl_training
    info: object          # tu.init_distributed's process info
    config: object        # MiniMindConfig
    policy: nn.Module     # the unwrapped policy: sampling runs on it
    model: nn.Module      # the same policy, DDP-wrapped in a distributed run: the loss runs on it
    reference: nn.Module  # the frozen starting model, for the KL penalty
    tokenizer: object
    reward_model: object  # RewardModel, or None for rule rewards
    dataset: object       # RLAIFDataset
    collate_fn: object
    optimizer: torch.optim.Optimizer
    resume: object        # the resume state dict, or None
    tracker: object       # the experiment tracker, or None
    save_path: str        # where save_weights writes the policy


def setup_rl(rl_type):
    """Set up a GRPO or SPO run: options, processes, policy + frozen reference + tokenizer (logged as
    "Policy"), reward model, dataset, AdamW, resume state, tracker, DDP wrapper and weight path.
    Returns an `RLSetup`."""
    args, stop, info = start_rl(rl_type)
    from dataset.lm_dataset import pad_collate

    config = tu.model_config(args.hidden_size, args.num_hidden_layers, args.use_moe)
    policy, reference, tokenizer = load_policy_and_reference(args, config)
    tu.log_model_size(policy, config, label="Policy")
    reward_model = load_reward_model(args.reward_model_path, args.device)
    dataset = load_rlaif_dataset(args, tokenizer)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=args.learning_rate)
    resume, tracker = load_resume_and_tracker(args, info, config, rl_type)
    model = tu.wrap_ddp(policy, info, find_unused_parameters=bool(args.use_moe))
    return RLSetup(args=args, stop=stop, info=info, config=config, policy=policy, model=model, reference=reference,
                   tokenizer=tokenizer, reward_model=reward_model, dataset=dataset,
                   collate_fn=pad_collate(tokenizer.pad_token_id), optimizer=optimizer, resume=resume,
                   tracker=tracker,
                   save_path=tu.weight_path(args.save_dir, args.save_weight, config.hidden_size, config.use_moe))


def check_rl_inputs(args):
    """Fail fast, before any model is built: the data file and the reward-model folder must exist."""
    tu.check_data_file(args.data_path)
    if str(args.reward_model_path).strip().lower() != "none":
        try:
            check_reward_model_path(args.reward_model_path)
        except (FileNotFoundError, ValueError) as e:
            raise tu.SetupError(str(e)) from None


def load_policy_and_reference(args, config):
    """The policy and a frozen reference, both from `{weight_dir}/reason_...` (reasoning) or `full_sft_...`.
    Without a KL penalty (`beta` or PPO's `kl_coef` 0) the reference is None: it is never built."""
    base = base_weight_name(args.reasoning)
    policy, tokenizer = tu.init_model(config, base, args.weight_dir, args.device, tokenizer=args.tokenizer_path)
    reference = None
    if getattr(args, "beta", getattr(args, "kl_coef", 1)) > 0:
        reference, _ = tu.init_model(config, base, args.weight_dir, args.device, tokenizer=False)
        reference.eval().requires_grad_(False)
    return policy, reference, tokenizer


def load_rlaif_dataset(args, tokenizer):
    from dataset.lm_dataset import RLAIFDataset
    return RLAIFDataset(args.data_path, tokenizer, max_length=args.max_seq_len)
