"""Sampling responses (the lean sampler of `model.sampling`), and the per-token log-probabilities the RL
losses need."""
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel


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
    plain = model.module if isinstance(model, DistributedDataParallel) else model
    config = getattr(plain, "_orig_mod", plain).config  # inside DDP and/or torch.compile wrappers
    shared = None
    if ro.group_size > 1 and not config.use_moe and config.dropout == 0:
        shared = (ro.input_ids.size(1) - ro.num_completion, ro.group_size)
    return completion_logps(model, ro.input_ids, ro.attention_mask, ro.num_completion, shared_prefix=shared)


def sampling_options(args):
    """The rollout's sampling keywords from the RL options."""
    return {"temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p}
