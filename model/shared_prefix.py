"""One forward pass over groups of sequences that share their prompt (GRPO's responses to one prompt).

`MiniMindForCausalLM.forward(..., shared_prefix=(prefix_len, group_size))` runs the transformer on
the first `prefix_len` columns of one row per group only (rows are group-major, as
`repeat_interleave` lays them out), gives each row of the group a copy of that prompt's keys and
values, and runs the remaining columns of every row against them. The result is the same as the
plain forward over the full rows - each row attends to the same keys and values and gets the same
positions - while the prompt is computed (and, in training, back-propagated) once per group instead
of `group_size` times; gradients of the shared keys and values add up over the group through the
copy.

Hidden states are returned for the last prompt position (copied to the group) and every later
column: what the next-token log-probs of the completions need. The dense model only: a mixture of
experts' load-balancing loss averages over the tokens it sees, so for MoE models callers use the
plain forward.
"""
import torch


class _PrefixKV:
    """Cache handed to the attention layers: first records each layer's prompt keys/values, then
    (after `expand`) serves them, copied to every row of the group, in front of the new ones."""

    def __init__(self, num_layers):
        self.keys = [None] * num_layers
        self.values = [None] * num_layers
        self.expanded = False

    def update(self, k, v, layer_idx):
        if not self.expanded:
            self.keys[layer_idx], self.values[layer_idx] = k, v
            return k, v
        return (torch.cat([self.keys[layer_idx], k], dim=2), torch.cat([self.values[layer_idx], v], dim=2))

    def expand(self, group_size):
        self.keys = [k.repeat_interleave(group_size, dim=0) for k in self.keys]
        self.values = [v.repeat_interleave(group_size, dim=0) for v in self.values]
        self.expanded = True

    def get_seq_length(self, layer_idx=0):
        return self.keys[layer_idx].size(2) if self.keys[layer_idx] is not None else 0


def check(config, input_ids, prefix_len, group_size):
    """Raise ValueError unless a shared-prefix pass can run on this model and batch."""
    if config.use_moe:
        raise ValueError("shared_prefix needs a dense model (MoE's auxiliary loss depends on every token)")
    if config.dropout > 0:
        raise ValueError("shared_prefix needs dropout 0 (a shared prompt would share its dropout mask)")
    bsz, seq_len = input_ids.shape
    if group_size < 1 or bsz % group_size:
        raise ValueError(f"shared_prefix: batch of {bsz} rows is not a whole number of groups of {group_size}")
    if not 0 < prefix_len < seq_len:
        raise ValueError(f"shared_prefix: prefix length {prefix_len} must be within 1..{seq_len - 1}")


def forward(body, input_ids, attention_mask, prefix_len, group_size):
    """Hidden states [B, T - prefix_len + 1, H] of `MiniMindModel` `body` (see the module docstring)."""
    check(body.config, input_ids, prefix_len, group_size)
    bsz, seq_len = input_ids.shape
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids, dtype=torch.bool)
    attention_mask = attention_mask.bool()
    position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    cache = _PrefixKV(len(body.layers))

    def run(ids, positions, mask, is_causal):
        hidden = body.dropout(body.embed_tokens(ids))
        embeddings = (body.freqs_cos[positions], body.freqs_sin[positions])
        for layer in body.layers:
            hidden = layer(hidden, embeddings, mask, is_causal, cache)
        return body.norm(hidden)

    # 1. The prompts, one row per group.
    prefix_mask = attention_mask[::group_size, :prefix_len]
    mask, is_causal = body._attention_mask(prefix_mask, 0, prefix_len, input_ids.device)
    prompt_last = run(input_ids[::group_size, :prefix_len], position_ids[::group_size, :prefix_len], mask,
                      is_causal)[:, -1:]
    # 2. Every row's remaining columns against its group's prompt keys/values.
    cache.expand(group_size)
    mask, is_causal = body._attention_mask(attention_mask, prefix_len, seq_len - prefix_len, input_ids.device)
    rest = run(input_ids[:, prefix_len:], position_ids[:, prefix_len:], mask, is_causal)
    return torch.cat([prompt_last.repeat_interleave(group_size, dim=0), rest], dim=1)
