"""MiniMind: a small decoder-only transformer (dense or mixture-of-experts).

Parameter names, shapes, defaults and maths follow the upstream MiniMind model, so its published
`.pth` state dicts load with `load_state_dict` and give the same logits:

- pre-norm blocks with RMSNorm, rotary position embeddings (optionally YaRN-scaled at inference),
  grouped-query attention through `scaled_dot_product_attention`, SwiGLU feed-forward;
- optional MoE feed-forward: routed experts chosen by a softmax top-k gate plus always-on shared
  experts, with a load-balancing auxiliary loss while training;
- input embedding and output head share one weight matrix.

The config, the block, the body and the causal-LM head are here; the layers (norm, rotary tables,
attention, dense and MoE feed-forward) are in `model.model_layers`, and every one of their names is
importable from this module too.

The model plugs into `transformers` generation: `generate()` passes a `Cache` (e.g. `DynamicCache`)
that the attention layers fill through `cache.update(k, v, layer_idx)`, and position ids derived
from the attention mask, so left-padded batches decode exactly like full recomputation.
"""
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PretrainedConfig, PreTrainedModel
from transformers.cache_utils import Cache, DynamicCache
from transformers.utils import ModelOutput

# Relative: an exported folder carries model_layers.py and packing.py beside this file.
from .model_layers import (  # noqa: F401 (all re-exported: `from model.model_minimind import Attention` works)
    Attention,
    FeedForward,
    MOEFeedForward,
    MoEGate,
    RMSNorm,
    apply_rotary_pos_emb,
    precompute_freqs_cis,
)
from .packing import DocumentAttention

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
            from .shared_prefix import forward as shared_prefix_forward  # relative: travels with an export
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
