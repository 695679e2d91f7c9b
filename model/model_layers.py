"""The layers a MiniMind block is made of, each built from a `MiniMindConfig` (`model.model_minimind`):

- `RMSNorm`; the rotary position tables (`precompute_freqs_cis`, YaRN-scaled when asked) and
  `apply_rotary_pos_emb`;
- `Attention`: grouped-query causal self-attention through `scaled_dot_product_attention`, filling a
  transformers `Cache` when given one, or attending within documents for packed rows;
- `FeedForward` (SwiGLU), and the mixture of experts: the `MoEGate` router (softmax top-k with the
  load-balancing auxiliary loss) and `MOEFeedForward` (routed plus shared experts).

Parameter names and maths are upstream MiniMind's; `model.model_minimind` re-exports every name here.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers.activations import ACT2FN

from .packing import DocumentAttention  # relative: an exported folder carries packing.py beside this file


class RMSNorm(nn.Module):
    """Root-mean-square layer norm, computed in float32."""

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        return self.weight * self._norm(x.float()).type_as(x)


def precompute_freqs_cis(dim: int, end: int = 32 * 1024, rope_base: float = 1e6, rope_scaling: dict | None = None):
    """Cos and sin tables [end, dim] of the rotary embedding, YaRN-scaled when `rope_scaling` is given."""
    freqs = 1.0 / (rope_base ** (torch.arange(0, dim, 2)[: dim // 2].float() / dim))
    attn_factor = 1.0
    if rope_scaling is not None:
        orig_max = rope_scaling.get("original_max_position_embeddings", 2048)
        factor = rope_scaling.get("factor", 16)
        beta_fast = rope_scaling.get("beta_fast", 32.0)
        beta_slow = rope_scaling.get("beta_slow", 1.0)
        attn_factor = rope_scaling.get("attention_factor", 1.0)
        if end / orig_max > 1.0:
            # YaRN: f'(i) = f(i) * ((1 - g) + g / factor), g a linear ramp in [0, 1] over the dimensions
            # whose wavelength lies between the beta_fast and beta_slow rotation counts.
            def inv_dim(b):
                return (dim * math.log(orig_max / (b * 2 * math.pi))) / (2 * math.log(rope_base))

            low = max(math.floor(inv_dim(beta_fast)), 0)
            high = min(math.ceil(inv_dim(beta_slow)), dim // 2 - 1)
            ramp = torch.clamp((torch.arange(dim // 2).float() - low) / max(high - low, 0.001), 0, 1)
            freqs = freqs * (1 - ramp + ramp / factor)
    t = torch.arange(end)
    freqs = torch.outer(t, freqs).float()
    freqs_cos = torch.cat([torch.cos(freqs), torch.cos(freqs)], dim=-1) * attn_factor
    freqs_sin = torch.cat([torch.sin(freqs), torch.sin(freqs)], dim=-1) * attn_factor
    return freqs_cos, freqs_sin


def apply_rotary_pos_emb(q, k, cos, sin):
    """Rotate q, k [B, T, heads, D] by the cos/sin rows [B or 1, T, D] of their positions."""

    def rotate_half(x):
        return torch.cat((-x[..., x.shape[-1] // 2:], x[..., : x.shape[-1] // 2]), dim=-1)

    cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


class Attention(nn.Module):
    """Grouped-query causal self-attention; 2 KV heads serve 8 query heads by default."""

    def __init__(self, config, layer_idx: int):
        super().__init__()
        self.layer_idx = layer_idx
        self.n_heads = config.num_attention_heads
        self.n_kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        self.q_proj = nn.Linear(config.hidden_size, self.n_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, self.n_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, self.n_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, config.hidden_size, bias=False)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.dropout = config.dropout

    def forward(self, x, position_embeddings, attn_mask=None, is_causal=True, cache=None):
        bsz, seq_len, _ = x.shape
        q = self.q_proj(x).view(bsz, seq_len, self.n_heads, self.head_dim)
        k = self.k_proj(x).view(bsz, seq_len, self.n_kv_heads, self.head_dim)
        v = self.v_proj(x).view(bsz, seq_len, self.n_kv_heads, self.head_dim)
        cos, sin = position_embeddings
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, heads, T, D]
        if cache is not None:
            # The cache returns this layer's keys/values for all positions so far.
            k, v = cache.update(k, v, self.layer_idx)
        dropout_p, gqa = (self.dropout if self.training else 0.0), self.n_heads != self.n_kv_heads
        if isinstance(attn_mask, DocumentAttention):  # packed rows: attention within each document
            out = attn_mask(q, k, v, dropout_p, gqa)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal and attn_mask is None,
                                                 dropout_p=dropout_p, enable_gqa=gqa)
        out = out.transpose(1, 2).reshape(bsz, seq_len, -1)
        return self.resid_dropout(self.o_proj(out))


class FeedForward(nn.Module):
    """SwiGLU feed-forward: down(act(gate(x)) * up(x))."""

    def __init__(self, config):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.dropout = nn.Dropout(config.dropout)
        self.act_fn = ACT2FN[config.hidden_act]

    def forward(self, x):
        return self.dropout(self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x)))


class MoEGate(nn.Module):
    """Router: softmax scores over the routed experts, top-k choice, load-balancing loss in training."""

    def __init__(self, config):
        super().__init__()
        self.top_k = config.num_experts_per_tok
        self.n_routed_experts = config.n_routed_experts
        self.alpha = config.aux_loss_alpha
        self.seq_aux = config.seq_aux
        self.norm_topk_prob = config.norm_topk_prob
        self.weight = nn.Parameter(torch.empty(self.n_routed_experts, config.hidden_size))
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))

    def forward(self, hidden_states):
        """Returns expert indices [N, k], their weights [N, k] and the auxiliary loss (N = B * T)."""
        bsz, seq_len, h = hidden_states.shape
        scores = F.linear(hidden_states.reshape(-1, h), self.weight).softmax(dim=-1)
        topk_weight, topk_idx = torch.topk(scores, k=self.top_k, dim=-1, sorted=False)
        if self.top_k > 1 and self.norm_topk_prob:
            topk_weight = topk_weight / (topk_weight.sum(dim=-1, keepdim=True) + 1e-20)

        if self.training and self.alpha > 0.0:
            if self.seq_aux:
                # Per sequence: (fraction of picks each expert got, scaled so uniform = 1) x (its mean score).
                picks = topk_idx.view(bsz, -1)
                ce = torch.zeros(bsz, self.n_routed_experts, device=hidden_states.device)
                ce.scatter_add_(1, picks, torch.ones(bsz, seq_len * self.top_k, device=hidden_states.device))
                ce.div_(seq_len * self.top_k / self.n_routed_experts)
                aux_loss = (ce * scores.view(bsz, seq_len, -1).mean(dim=1)).sum(dim=1).mean() * self.alpha
            else:
                fraction = F.one_hot(topk_idx.view(-1), num_classes=self.n_routed_experts).float().mean(0)
                aux_loss = (scores.mean(0) * fraction * self.n_routed_experts).sum() * self.alpha
        else:
            aux_loss = scores.new_zeros(())
        return topk_idx, topk_weight, aux_loss


class MOEFeedForward(nn.Module):
    """Mixture of experts: each token goes to its top-k routed experts, plus every shared expert."""

    def __init__(self, config):
        super().__init__()
        self.experts = nn.ModuleList([FeedForward(config) for _ in range(config.n_routed_experts)])
        self.gate = MoEGate(config)
        if config.n_shared_experts > 0:
            self.shared_experts = nn.ModuleList([FeedForward(config) for _ in range(config.n_shared_experts)])
        self.aux_loss = None

    def forward(self, x):
        bsz, seq_len, h = x.shape
        topk_idx, topk_weight, self.aux_loss = self.gate(x)
        x_flat = x.reshape(-1, h)
        y = torch.zeros_like(x_flat)
        for i, expert in enumerate(self.experts):
            token_idx, slot = (topk_idx == i).nonzero(as_tuple=True)
            if token_idx.numel() > 0:
                out = expert(x_flat[token_idx]) * topk_weight[token_idx, slot].unsqueeze(-1)
                y = y.index_add(0, token_idx, out.to(y.dtype))
            elif self.training:
                # Keep an unused expert in the graph so distributed training sees a gradient for it.
                y = y + 0 * sum(p.sum() for p in expert.parameters())
        y = y.view(bsz, seq_len, h)
        for expert in getattr(self, "shared_experts", []):
            y = y + expert(x)
        return y
