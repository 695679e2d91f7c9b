"""The RL steps as they were before the lean sampler, kept to measure against (`bench_train.py --baseline`).

A frozen, self-contained copy of the GRPO, SPO and PPO steps that sampled with `model.generate()`
(full vocabulary, temperature 0.8), scored each response on its own, ran the policy, reference and
(PPO) old-actor passes over the whole batch, and always built a reference model. Each step records
how its time splits (`StepTimer`), so `bench_train.py --only grpo|spo|ppo` can print today's split
beside the current trainers' split in the same process.

The maths (advantages, losses) is copied too, so later changes to the trainers cannot change what
this baseline measures.
"""
import time
from contextlib import contextmanager

import torch
import torch.nn.functional as F

from trainer.rl.losses import last_token_values
from trainer.rl.rewards import blend_scores, clip_score, extract_answer, format_reward, prompt_messages, rule_reward
from trainer.rl.rollout import completion_mask, trim_completions

# ---------------------------------------------------------------------------------------------------
# Timing


class StepTimer:
    """Seconds per named part of a step. On CUDA each part ends with a synchronize, so the time is
    the part's own and not the queue of kernels launched before it."""

    def __init__(self, device="cpu"):
        self.cuda = str(device).startswith("cuda")
        self.seconds = {}
        self.cpu_seconds = {}  # this process's CPU time: on a crowded machine, the steadier measure
        self.sampled_tokens = 0

    @contextmanager
    def part(self, name):
        if self.cuda:
            torch.cuda.synchronize()
        start, start_cpu = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            if self.cuda:
                torch.cuda.synchronize()
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start
            self.cpu_seconds[name] = self.cpu_seconds.get(name, 0.0) + time.process_time() - start_cpu


# ---------------------------------------------------------------------------------------------------
# Rewards: the trainers' reward functions, but a reward model scores one response per call


def reward_model_score(reward_model, prompt, response, reasoning):
    messages = prompt_messages(prompt)
    score = clip_score(reward_model.score(messages + [{"role": "assistant", "content": response}]))
    if reasoning:
        answer = extract_answer(response, True)
        if answer is not None:
            score = blend_scores(score, clip_score(reward_model.score(messages + [{"role": "assistant",
                                                                                    "content": answer}])))
    return score


def compute_rewards(prompts, responses, references, reasoning, reward_model=None):
    rewards = []
    for prompt, response, reference in zip(prompts, responses, references):
        reward = format_reward(response) if reasoning else 0.0
        if reward_model is not None:
            reward += reward_model_score(reward_model, prompt, response, reasoning)
        else:
            reward += rule_reward(response, reference, reasoning)
        rewards.append(reward)
    return torch.tensor(rewards, dtype=torch.float32)


# ---------------------------------------------------------------------------------------------------
# Rollout through generate()


def encode_prompts(tokenizer, prompts, max_len, device):
    enc = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left",
                    add_special_tokens=False, return_token_type_ids=False)
    ids, mask = enc["input_ids"][:, -max_len:], enc["attention_mask"][:, -max_len:]
    keep = mask.any(dim=0).nonzero()
    start = int(keep[0]) if len(keep) else 0
    return ids[:, start:].to(device), mask[:, start:].to(device)


@torch.no_grad()
def sample(model, prompt_ids, prompt_mask, max_new_tokens, pad_id, eos_id, num_return_sequences=1,
           temperature=0.8):
    was_training = model.training
    model.eval()
    out = model.generate(input_ids=prompt_ids, attention_mask=prompt_mask, max_new_tokens=max_new_tokens,
                         do_sample=True, temperature=temperature, top_k=0, top_p=1.0,
                         num_return_sequences=num_return_sequences, pad_token_id=pad_id, eos_token_id=eos_id,
                         use_cache=True)
    model.train(was_training)
    return out[:, prompt_ids.size(1):]


def completion_logps(model, input_ids, attention_mask, num_completion):
    out = model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=num_completion + 1)
    logits = out.logits[:, :-1, :]
    logps = torch.gather(F.log_softmax(logits.float(), dim=-1), 2,
                         input_ids[:, -num_completion:].unsqueeze(-1)).squeeze(-1)
    aux = getattr(out, "aux_loss", None)
    return logps, (aux if aux is not None else logps.new_zeros(()))


def rollout(timer, model, tokenizer, prompts, references, max_prompt_len, max_gen_len, device, n=1):
    """Returns (prompts, references, responses, input_ids, attention_mask, completion_mask), repeated n times."""
    with timer.part("encode"):
        prompt_ids, prompt_mask = encode_prompts(tokenizer, prompts, max_prompt_len, device)
    with timer.part("sample"):
        completion_ids = sample(model, prompt_ids, prompt_mask, max_gen_len, tokenizer.pad_token_id,
                                tokenizer.eos_token_id, num_return_sequences=n)
        mask = completion_mask(completion_ids, tokenizer.eos_token_id)
        timer.sampled_tokens += completion_ids.numel()
        completion_ids, mask = trim_completions(completion_ids, mask)
        prompt_ids = prompt_ids.repeat_interleave(n, dim=0)
        prompt_mask = prompt_mask.repeat_interleave(n, dim=0)
        responses = [tokenizer.decode(ids[m.bool()], skip_special_tokens=True) for ids, m in zip(completion_ids, mask)]
    return ([p for p in prompts for _ in range(n)], [r for r in references for _ in range(n)], responses,
            torch.cat([prompt_ids, completion_ids], dim=1), torch.cat([prompt_mask, mask.to(prompt_mask.dtype)], dim=1),
            mask)


# ---------------------------------------------------------------------------------------------------
# Maths


def k3_kl(logps, ref_logps):
    delta = ref_logps - logps
    return torch.exp(delta) - delta - 1


def masked_mean_per_sequence(values, mask):
    mask = mask.to(values.dtype)
    return ((values * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)).mean()


# ---------------------------------------------------------------------------------------------------
# Steps: each takes the parts (see bench_rl_steps.RLParts) and a batch, returns the metrics


def optimizer_step(timer, parts, loss):
    """Backward, clip and step every trained part (the same in the baseline and the current steps)."""
    with timer.part("backward"):
        loss.backward()
    with timer.part("optimizer"):
        for module, optimizer in parts.trained:
            torch.nn.utils.clip_grad_norm_(module.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)


def _policy_and_reference(timer, parts, ids, attn, mask):
    with timer.part("policy_forward"):
        logps, aux = completion_logps(parts.policy, ids, attn, mask.size(1))
    with timer.part("reference"), torch.no_grad():
        ref_logps, _ = completion_logps(parts.reference, ids, attn, mask.size(1))
    return logps, aux, ref_logps


def grpo_step(timer, parts, batch):
    a, n = parts.args, parts.args.num_generations
    prompts, refs, responses, ids, attn, mask = rollout(timer, parts.policy, parts.tokenizer, batch["prompt"],
                                                        batch["answer"], a.max_seq_len, a.max_gen_len, a.device, n)
    with timer.part("score"):
        rewards = compute_rewards(prompts, responses, refs, a.reasoning, parts.reward_model).to(a.device)
        grouped = rewards.view(-1, n)
        adv = (rewards - grouped.mean(1).repeat_interleave(n)) / (grouped.std(1).repeat_interleave(n) + 1e-4)
    logps, aux, ref_logps = _policy_and_reference(timer, parts, ids, attn, mask)
    with timer.part("loss"):
        kl = k3_kl(logps, ref_logps)
        per_token = -(torch.exp(logps - logps.detach()) * adv.unsqueeze(1) - a.beta * kl)
        loss = masked_mean_per_sequence(per_token, mask) + aux
    optimizer_step(timer, parts, loss)
    return {"reward": rewards.mean().item(), "tokens": int(mask.sum())}


def spo_step(timer, parts, batch):
    a = parts.args
    prompts, refs, responses, ids, attn, mask = rollout(timer, parts.policy, parts.tokenizer, batch["prompt"],
                                                        batch["answer"], a.max_seq_len, a.max_gen_len, a.device)
    with timer.part("score"):
        rewards = compute_rewards(prompts, responses, refs, a.reasoning, parts.reward_model).to(a.device)
        adv = (rewards - 0.0).clamp(-5, 5)  # a fixed baseline: its value does not change the cost
    logps, aux, ref_logps = _policy_and_reference(timer, parts, ids, attn, mask)
    with timer.part("loss"):
        kl = k3_kl(logps, ref_logps)
        loss = masked_mean_per_sequence(-logps * adv.unsqueeze(1) + a.beta * kl, mask) + aux
        mask_f = mask.to(logps.dtype)
        float(((logps.detach() * mask_f).sum() / mask_f.sum()).item())  # the value tracker's input
    optimizer_step(timer, parts, loss)
    return {"reward": rewards.mean().item(), "tokens": int(mask.sum())}


def ppo_step(timer, parts, batch):
    a = parts.args
    prompts, refs, responses, ids, attn, mask = rollout(timer, parts.policy, parts.tokenizer, batch["prompt"],
                                                        batch["answer"], a.max_seq_len, a.max_gen_len, a.device)
    with timer.part("score"):
        rewards = compute_rewards(prompts, responses, refs, a.reasoning, parts.reward_model).to(a.device)
    with timer.part("critic_forward"):
        values = last_token_values(parts.critic(ids, attn), attn)
    with timer.part("policy_forward"):
        logps, aux = completion_logps(parts.policy, ids, attn, mask.size(1))
    m = mask.to(logps.dtype)
    with timer.part("old_forward"), torch.no_grad():
        old_logps, _ = completion_logps(parts.old_actor, ids, attn, mask.size(1))
    with timer.part("reference"), torch.no_grad():
        ref_logps, _ = completion_logps(parts.reference, ids, attn, mask.size(1))
    with timer.part("loss"):
        logp, old, ref = (logps * m).sum(1), (old_logps * m).sum(1), (ref_logps * m).sum(1)
        adv = rewards - values.detach()
        ratio = torch.exp(logp - old)
        policy_loss = -torch.min(ratio * adv, ratio.clamp(1 - a.clip_epsilon, 1 + a.clip_epsilon) * adv).mean()
        loss = policy_loss + a.vf_coef * F.mse_loss(values.float(), rewards) + a.kl_coef * (logp - ref).mean() + aux
    optimizer_step(timer, parts, loss)
    return {"reward": rewards.mean().item(), "tokens": int(mask.sum())}


STEPS = {"grpo": grpo_step, "spo": spo_step, "ppo": ppo_step}
