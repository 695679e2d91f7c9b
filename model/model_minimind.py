"""MiniMind: a small decoder-only transformer (dense or mixture-of-experts).

Parameter names, shapes, defaults and maths follow the upstream MiniMind model, so its published
`.pth` state dicts load with `load_state_dict` and give the same logits:

- pre-norm blocks with RMSNorm, rotary position embeddings (optionally YaRN-scaled at inference),
  grouped-query attention through `scaled_dot_product_attention`, SwiGLU feed-forward;
- optional MoE feed-forward: routed experts chosen by a softmax top-k gate plus always-on shared
  experts, with a load-balancing auxiliary loss while training;
- input embedding and output head share one weight matrix.

The model plugs into `transformers` generation: `generate()` passes a `Cache` (e.g. `DynamicCache`)
that the attention layers fill through `cache.update(k, v, layer_idx)`, and position ids derived
from the attention mask, so left-padded batches decode exactly like full recomputation.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PretrainedConfig, PreTrainedModel
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, DynamicCache
from transformers.utils import ModelOutput

from .packing import (
    DocumentAttention,  # relative: an exported folder carries packing.py beside this file
)

# YaRN settings upstream uses when `inference_rope_scaling` is on: 2048 trained positions
# stretched 16x, to 32768.
YARN_ROPE_SCALING = {
    "rope_type": "yarn",
    "factor": 16,
    "original_max_position_embeddings": 2048,
    "beta_fast": 32,
    "beta_slow": 1,
    "attention_factor": 1.0,
}


class MiniMindConfig(PretrainedConfig):
    """Hyper-parameters of MiniMind; the defaults are upstream's (the 26M-parameter dense model).

    `intermediate_size` defaults to 64 * ceil(int(8 * hidden_size / 3) / 64). YaRN rotary scaling is
    switched on with `inference_rope_scaling=True` (upstream's switch) or by passing a
    `rope_scaling` / `rope_parameters` dict whose `rope_type` (or `type`) is "yarn".
    """

    model_type = "minimind"

    hidden_size: int = 512
    num_hidden_layers: int = 8
    use_moe: bool = False
    dropout: float = 0.0
    vocab_size: int = 6400
    bos_token_id: int | None = 1
    eos_token_id: int | list[int] | None = 2
    pad_token_id: int | None = None
    hidden_act: str = "silu"
    intermediate_size: int | None = None
    max_position_embeddings: int = 32768
    num_attention_heads: int = 8
    num_key_value_heads: int = 2
    rms_norm_eps: float = 1e-5
    rope_theta: float = 1e6
    inference_rope_scaling: bool = False
    rope_parameters: dict | None = None
    tie_word_embeddings: bool = True
    use_cache: bool = True
    # Mixture of experts (ignored when use_moe is False).
    num_experts_per_tok: int = 2
    n_routed_experts: int = 4
    n_shared_experts: int = 1
    scoring_func: str = "softmax"
    aux_loss_alpha: float = 0.1
    seq_aux: bool = True
    norm_topk_prob: bool = True

    def __post_init__(self, **kwargs):
        for name in ("hidden_size", "num_hidden_layers", "vocab_size", "max_position_embeddings",
                     "num_attention_heads", "num_key_value_heads", "num_experts_per_tok", "n_routed_experts",
                     "n_shared_experts"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < (0 if name == "n_shared_experts" else 1):
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        # Configs arrive from argparse and JSON: accept ints where floats are meant and 0/1 for flags.
        for name in ("dropout", "rms_norm_eps", "rope_theta", "aux_loss_alpha"):
            setattr(self, name, float(getattr(self, name)))
        for name in ("use_moe", "inference_rope_scaling", "tie_word_embeddings", "seq_aux", "norm_topk_prob"):
            setattr(self, name, bool(getattr(self, name)))
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(f"hidden_size ({self.hidden_size}) must be a multiple of "
                             f"num_attention_heads ({self.num_attention_heads})")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                             f"num_key_value_heads ({self.num_key_value_heads})")
        if self.use_moe and not 1 <= self.num_experts_per_tok <= self.n_routed_experts:
            raise ValueError(f"num_experts_per_tok ({self.num_experts_per_tok}) must be between 1 and "
                             f"n_routed_experts ({self.n_routed_experts})")
        if self.scoring_func != "softmax":
            raise ValueError(f"unsupported MoE scoring_func {self.scoring_func!r}: only 'softmax'")
        if self.intermediate_size is None:
            self.intermediate_size = 64 * ((int(self.hidden_size * 8 / 3) + 64 - 1) // 64)
        if self.inference_rope_scaling and kwargs.get("rope_scaling") is None and not self.rope_parameters:
            self.rope_parameters = dict(YARN_ROPE_SCALING)
        # The base class moves a legacy `rope_scaling` kwarg into `rope_parameters` and adds
        # rope_type/rope_theta to it; `config.rope_scaling` reads it back.
        super().__post_init__(**kwargs)

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def yarn_parameters(self) -> dict | None:
        """The YaRN settings when YaRN rotary scaling is on, else None."""
        params = self.rope_parameters or {}
        return params if params.get("rope_type", params.get("type")) == "yarn" else None


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

    def __init__(self, config: MiniMindConfig, layer_idx: int):
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

    def __init__(self, config: MiniMindConfig):
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

    def __init__(self, config: MiniMindConfig):
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

    def __init__(self, config: MiniMindConfig):
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


class MiniMindBlock(nn.Module):
    """Pre-norm transformer block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, layer_id: int, config: MiniMindConfig):
        super().__init__()
        self.layer_id = layer_id
        self.self_attn = Attention(config, layer_id)
        self.input_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.mlp = MOEFeedForward(config) if config.use_moe else FeedForward(config)

    def forward(self, hidden_states, position_embeddings, attn_mask=None, is_causal=True, cache=None):
        hidden_states = hidden_states + self.self_attn(
            self.input_layernorm(hidden_states), position_embeddings, attn_mask, is_causal, cache)
        return hidden_states + self.mlp(self.post_attention_layernorm(hidden_states))


class MiniMindModel(nn.Module):
    """The transformer body: embeddings, blocks and final norm; returns hidden states."""

    def __init__(self, config: MiniMindConfig):
        super().__init__()
        self.config = config
        self.vocab_size, self.num_hidden_layers = config.vocab_size, config.num_hidden_layers
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.dropout = nn.Dropout(config.dropout)
        self.layers = nn.ModuleList([MiniMindBlock(i, config) for i in range(config.num_hidden_layers)])
        self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        freqs_cos, freqs_sin = self.rope_tables()
        # Not persistent: derived from the config, and absent from upstream's state dicts.
        self.register_buffer("freqs_cos", freqs_cos, persistent=False)
        self.register_buffer("freqs_sin", freqs_sin, persistent=False)

    def rope_tables(self):
        c = self.config
        return precompute_freqs_cis(dim=c.head_dim, end=c.max_position_embeddings, rope_base=c.rope_theta,
                                    rope_scaling=c.yarn_parameters())

    def forward(self, input_ids, attention_mask=None, cache=None, use_cache=False, position_ids=None,
                document_ids=None):
        """Returns (hidden states [B, T, H] after the final norm, cache or None, summed MoE aux loss).

        `document_ids` [B, T] (packed rows, no cache): each token attends only to earlier tokens of
        its own document, and positions restart at 0 where a document starts.
        """
        if document_ids is not None:
            return self._forward_documents(input_ids, document_ids)
        if input_ids is None or input_ids.dim() != 2:
            raise ValueError("input_ids must be a [batch, seq_len] tensor of token ids")
        bsz, seq_len = input_ids.shape
        if cache is not None and not isinstance(cache, Cache):
            raise TypeError(f"past_key_values must be a transformers Cache (e.g. DynamicCache), got {type(cache).__name__}")
        if use_cache and cache is None:
            cache = DynamicCache(config=self.config)
        past_len = cache.get_seq_length() if cache is not None else 0
        total_len = past_len + seq_len

        if attention_mask is not None:
            if attention_mask.dim() != 2 or attention_mask.shape != (bsz, total_len):
                raise ValueError(f"attention_mask must have shape [batch, past + new tokens] = "
                                 f"{[bsz, total_len]}, got {list(attention_mask.shape)}")
            attention_mask = attention_mask.bool()

        if position_ids is None:
            if total_len > self.config.max_position_embeddings:
                raise ValueError(f"sequence of {total_len} tokens exceeds max_position_embeddings "
                                 f"({self.config.max_position_embeddings})")
            if attention_mask is not None:
                # Count only real tokens, so a left-padded row starts at position 0 like an unpadded one.
                position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)[:, past_len:]
            else:
                position_ids = torch.arange(past_len, total_len, device=input_ids.device).unsqueeze(0)
        position_embeddings = (self.freqs_cos[position_ids], self.freqs_sin[position_ids])

        attn_mask, is_causal = self._attention_mask(attention_mask, past_len, seq_len, input_ids.device)

        hidden_states = self.dropout(self.embed_tokens(input_ids))
        for layer in self.layers:
            hidden_states = layer(hidden_states, position_embeddings, attn_mask, is_causal, cache)
        hidden_states = self.norm(hidden_states)
        return hidden_states, cache, self._aux_loss(hidden_states)

    def _forward_documents(self, input_ids, document_ids):
        seq_len = input_ids.size(1)
        if document_ids.shape != input_ids.shape:
            raise ValueError("document_ids must have the shape of input_ids")
        if seq_len > self.config.max_position_embeddings:
            raise ValueError(f"sequence of {seq_len} tokens exceeds max_position_embeddings "
                             f"({self.config.max_position_embeddings})")
        attn_mask = DocumentAttention(document_ids)
        position_ids = attn_mask.position_ids()
        position_embeddings = (self.freqs_cos[position_ids], self.freqs_sin[position_ids])
        hidden_states = self.dropout(self.embed_tokens(input_ids))
        for layer in self.layers:
            hidden_states = layer(hidden_states, position_embeddings, attn_mask, False, None)
        hidden_states = self.norm(hidden_states)
        return hidden_states, None, self._aux_loss(hidden_states)

    def _aux_loss(self, hidden_states):
        aux_loss = hidden_states.new_zeros((), dtype=torch.float32)
        for layer in self.layers:
            if isinstance(layer.mlp, MOEFeedForward):
                aux_loss = aux_loss + layer.mlp.aux_loss
        return aux_loss

    @staticmethod
    def _attention_mask(attention_mask, past_len, seq_len, device):
        """Boolean SDPA mask [B, 1, T, past+T] (True = may attend), or None with an is_causal flag.

        Masks are built only when needed, so unpadded and right-padded training batches keep the
        fast causal kernels: with right padding, causality alone already hides the pads from every
        real token.
        """
        if attention_mask is None:
            pads_matter = False
        elif past_len == 0:
            pads_matter = bool((attention_mask[:, 1:] > attention_mask[:, :-1]).any())  # a pad before a token
        else:
            pads_matter = not bool(attention_mask.all())
        if not pads_matter:
            if past_len == 0:
                return None, True
            if seq_len == 1:
                return None, False  # one new token may see everything cached
        q_pos = torch.arange(past_len, past_len + seq_len, device=device).unsqueeze(1)
        k_pos = torch.arange(past_len + seq_len, device=device).unsqueeze(0)
        allowed = (k_pos <= q_pos).unsqueeze(0)  # [1, T, S]
        if pads_matter:
            allowed = allowed & attention_mask.unsqueeze(1)
            # A padding query would otherwise see nothing and produce NaN, which then leaks into
            # every later token through 0 * NaN; letting it see itself keeps it finite.
            allowed = allowed | (k_pos == q_pos).unsqueeze(0)
        return allowed.unsqueeze(1), False


@dataclass
class MiniMindOutput(ModelOutput):
    """Output of `MiniMindForCausalLM.forward`; `past_key_values` is another name for `cache`."""

    loss: torch.Tensor | None = None
    aux_loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    cache: Cache | None = None
    hidden_states: torch.Tensor | None = None

    @property
    def past_key_values(self):
        return self.cache


class MiniMindForCausalLM(PreTrainedModel, GenerationMixin):
    """MiniMind with its language-model head (tied to the input embedding)."""

    config_class = MiniMindConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config: MiniMindConfig | None = None):
        config = config or MiniMindConfig()
        super().__init__(config)
        self.model = MiniMindModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            # Upstream shares the head's (Linear-initialised) matrix with the embedding, not the reverse.
            self.model.embed_tokens.weight = self.lm_head.weight
        self.post_init()

    def _init_weights(self, module):
        # Parameters keep PyTorch's default initialisation, as upstream's do; only the rotary tables,
        # which are lost when transformers builds the model on the meta device, are recomputed here.
        if isinstance(module, MiniMindModel):
            freqs_cos, freqs_sin = module.rope_tables()
            module.freqs_cos.copy_(freqs_cos)
            module.freqs_sin.copy_(freqs_sin)

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def get_output_embeddings(self):
        return self.lm_head

    def _next_token_loss(self, input_ids, attention_mask, position_ids, document_ids, labels):
        """`loss_only`: the head and cross entropy run only where a label counts - without the gather
        when every label counts (full rows). A dense body skips the last position (it predicts
        nothing); a MoE body keeps it, since upstream's router auxiliary loss counts every position."""
        def cut(x):
            return x if x is None or self.config.use_moe else x[:, :-1]
        hidden_states, _, aux_loss = self.model(cut(input_ids), cut(attention_mask), None, False, cut(position_ids),
                                                cut(document_ids))
        if self.config.use_moe:
            hidden_states = hidden_states[:, :-1]
        targets = labels[:, 1:]
        counted = targets != -100
        if bool(counted.all()):
            logits, targets = self.lm_head(hidden_states).flatten(0, 1), targets.reshape(-1)
        else:
            logits, targets = self.lm_head(hidden_states[counted]), targets[counted]
        return MiniMindOutput(loss=F.cross_entropy(logits, targets), aux_loss=aux_loss, hidden_states=hidden_states)

    def forward(self, input_ids=None, attention_mask=None, past_key_values=None, use_cache=False,
                logits_to_keep=0, labels=None, position_ids=None, cache=None, shared_prefix=None,
                document_ids=None, loss_only=False, **kwargs):
        """Logits for `input_ids` [B, T].

        `past_key_values` (or `cache`, the name `generate()` uses) is a transformers `Cache`; it is
        extended in place and returned. `logits_to_keep` > 0 computes logits for only the last that
        many positions (or pass a tensor of indices). `labels` [B, T] give the next-token cross
        entropy (shifted here; -100 ignored) as `loss`; the MoE `aux_loss` is returned separately.

        `loss_only=True` (with `labels`): the head runs only where a label counts, and `logits` is
        None - the loss without computing logits for padding or masked-out positions.
        `document_ids` [B, T]: packed rows, attention within each document (see `MiniMindModel`).
        `shared_prefix=(prefix_len, group_size)`: consecutive groups of `group_size` rows share their
        first `prefix_len` columns (a prompt and its sampled responses); the prompt is computed once
        per group and logits come for the last `T - prefix_len + 1` positions only (see
        `model.shared_prefix`; dense models, no cache, no labels).
        """
        if shared_prefix is not None:
            if labels is not None or use_cache or cache is not None or past_key_values is not None:
                raise ValueError("shared_prefix takes no labels and no cache")
            from .shared_prefix import (
                forward as shared_prefix_forward,  # relative: travels with an export
            )
            hidden_states = shared_prefix_forward(self.model, input_ids, attention_mask, *shared_prefix)
            return MiniMindOutput(aux_loss=hidden_states.new_zeros((), dtype=torch.float32),
                                  logits=self.lm_head(hidden_states), hidden_states=hidden_states)
        if past_key_values is not None and cache is not None:
            raise ValueError("pass the cache as past_key_values or cache, not both")
        cache = cache if cache is not None else past_key_values
        if loss_only and labels is not None and cache is None:
            return self._next_token_loss(input_ids, attention_mask, position_ids, document_ids, labels)
        hidden_states, cache, aux_loss = self.model(input_ids, attention_mask, cache, use_cache, position_ids,
                                                    document_ids)
        slice_indices = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
        logits = self.lm_head(hidden_states[:, slice_indices, :])
        loss = None
        if labels is not None:
            if logits.shape[1] != labels.shape[1]:
                raise ValueError("labels need logits at every position: call with logits_to_keep=0")
            shift_logits, shift_labels = logits[:, :-1, :], labels[:, 1:]
            loss = F.cross_entropy(shift_logits.reshape(-1, shift_logits.size(-1)), shift_labels.reshape(-1),
                                   ignore_index=-100)
        return MiniMindOutput(loss=loss, aux_loss=aux_loss, logits=logits, cache=cache, hidden_states=hidden_states)
