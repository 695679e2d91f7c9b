"""Sampling responses with the KV cache, and the per-token log-probabilities the RL losses need."""
from dataclasses import dataclass

import torch
import torch.nn.functional as F


def encode_prompts(tokenizer, prompts, max_len, device):
    """Left-padded prompt ids and mask, keeping each prompt's last `max_len` tokens (its end matters most)."""
    enc = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left",
                    add_special_tokens=False, return_token_type_ids=False)
    ids, mask = enc["input_ids"][:, -max_len:], enc["attention_mask"][:, -max_len:]
    keep = mask.any(dim=0).nonzero()  # drop columns that are padding in every row
    start = int(keep[0]) if len(keep) else 0
    return ids[:, start:].to(device), mask[:, start:].to(device)


@torch.no_grad()
def sample(model, prompt_ids, prompt_mask, max_new_tokens, pad_id, eos_id, num_return_sequences=1,
           temperature=0.8):
    """Sample completions with the KV cache; returns completion ids [B * n, R] (prompts repeated n times)."""
    was_training = model.training
    model.eval()
    out = model.generate(input_ids=prompt_ids, attention_mask=prompt_mask, max_new_tokens=max_new_tokens,
                         do_sample=True, temperature=temperature, top_k=0, top_p=1.0,
                         num_return_sequences=num_return_sequences, pad_token_id=pad_id, eos_token_id=eos_id,
                         use_cache=True)
    model.train(was_training)
    return out[:, prompt_ids.size(1):]


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


def completion_logps(model, input_ids, attention_mask, num_completion):
    """Per-token log-probs of the last `num_completion` tokens of `input_ids` under `model` -> [B, R].

    Returns (logps, aux_loss); only the logits needed are computed (`logits_to_keep`).
    """
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

    @property
    def num_completion(self):
        return self.completion_mask.size(1)

    def response_lengths(self):
        return self.completion_mask.sum(dim=1).float()


def rollout(model, tokenizer, prompts, references, max_prompt_len, max_gen_len, device, num_generations=1):
    """Sample `num_generations` responses per prompt from `model` (unwrapped, not DDP) and assemble
    the sequences the loss passes run on, trimmed after the longest response."""
    prompt_ids, prompt_mask = encode_prompts(tokenizer, prompts, max_prompt_len, device)
    completion_ids = sample(model, prompt_ids, prompt_mask, max_gen_len, tokenizer.pad_token_id,
                            tokenizer.eos_token_id, num_return_sequences=num_generations)
    mask = completion_mask(completion_ids, tokenizer.eos_token_id)
    completion_ids, mask = trim_completions(completion_ids, mask)
    prompt_ids = prompt_ids.repeat_interleave(num_generations, dim=0)
    prompt_mask = prompt_mask.repeat_interleave(num_generations, dim=0)
    return Rollout(
        prompts=[p for p in prompts for _ in range(num_generations)],
        references=[r for r in references for _ in range(num_generations)],
        responses=decode(tokenizer, completion_ids, mask),
        input_ids=torch.cat([prompt_ids, completion_ids], dim=1),
        attention_mask=torch.cat([prompt_mask, mask.to(prompt_mask.dtype)], dim=1),
        completion_mask=mask,
    )
