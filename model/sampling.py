"""A lean sampler for MiniMind: the decoding loop RL rollouts run on.

`generate()` (transformers) works for any model and pays for it on every new token: logits
processors, stopping criteria and cache bookkeeping in Python, a prompt prefill per returned sequence.
For a model this small that overhead is a large part of each token. `sample()` decodes MiniMind
directly:

- the prompts are encoded once and their keys/values copied to each of the `num_samples` rows
  (`repeat_interleave`), instead of encoding every repeated prompt again;
- keys and values go into one pre-allocated buffer per layer (`StaticKVCache`), sized for the whole
  completion, so a step allocates nothing and concatenates nothing;
- one fused sampling step per token: temperature, top-k and top-p filtering (with the semantics of
  transformers' logits warpers), worked on the top-k candidates only when top-k is set, and an exact
  inverse-CDF draw from the filtered softmax (one uniform number per row, no host sync);
- on a CPU in float32 the decode step multiplies by the weights the way measured fastest on this
  machine for the batch's row count (`_fastest_path`): as they are, or reordered once per `sample`
  call for that row count by oneDNN or MKL (a small-batch GEMM on the weights as they are repacks
  every weight on every token; the reorder saves that where it pays for its own cost);
- the prompt is encoded with the output head on its last position only (the one a token is sampled
  from), and each decode step multiplies by every weight once for all rows;
- a finished row (it produced EOS) keeps being computed but emits `pad_id`; the loop stops when every
  row has finished (checked every step on CPU, every `check_every` steps on CUDA so the token loop
  does not wait on the device each step).

With `return_logps=True` it also returns each sampled token's log-probability under the model's
plain softmax (temperature 1, full vocabulary): the sampling policy's log-probs, which PPO reuses as
its old policy's when the two are the same model state.

`compile=True` compiles the one-token decode step with `torch.compile` (off by default: on CPU and for
short rollouts the compilation costs more than it saves).
"""
import functools
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F


class StaticKVCache:
    """Per-layer key/value buffers [B, kv_heads, max_len, head_dim], filled left to right.

    Duck-types the one method the attention layers call (`update`), so the model's own blocks run
    on it unchanged. Buffers are allocated at the first update of each layer with that update's
    dtype (so bf16 autocast gets a bf16 cache).
    """

    def __init__(self, num_layers, max_len):
        self.max_len = max_len
        self.keys = [None] * num_layers
        self.values = [None] * num_layers
        self.length = 0  # positions filled in every layer

    def update(self, k, v, layer_idx):
        """Write the new positions of layer `layer_idx`; return its keys/values up to them (views)."""
        if self.keys[layer_idx] is None:
            shape = (k.size(0), k.size(1), self.max_len, k.size(3))
            self.keys[layer_idx] = k.new_empty(shape)
            self.values[layer_idx] = v.new_empty(shape)
        end = self.length + k.size(2)
        if end > self.max_len:
            raise ValueError(f"cache of {self.max_len} positions cannot take {end}")
        self.keys[layer_idx][:, :, self.length:end] = k
        self.values[layer_idx][:, :, self.length:end] = v
        return self.keys[layer_idx][:, :, :end], self.values[layer_idx][:, :, :end]

    def advance(self, n):
        self.length += n

    def get_seq_length(self, layer_idx=0):
        return self.length


#: Extra candidates taken beyond top-k, so logits tied with the k-th stay in (as transformers keeps
#: every tie); more ties than this at exactly the k-th value would be cut.
TIE_SLACK = 8


def candidates(logits, temperature=1.0, top_k=0, top_p=1.0):
    """The tokens sampling may pick and their scaled logits: (values [B, C], ids [B, C] or None for
    the whole vocabulary); filtered-out candidates are at -inf.

    The order and rules of transformers' logits warpers: divide by `temperature`; keep the `top_k`
    largest (and every entry tied with the k-th; 0 = no limit); then keep the smallest set of most
    likely tokens whose probabilities add up to at least `top_p` (1.0 = no limit), always one.
    """
    values, ids = logits.float(), None
    if temperature != 1.0:
        values = values / temperature
    vocab = values.size(-1)
    if 0 < top_k < vocab:
        values, ids = torch.topk(values, min(vocab, top_k + TIE_SLACK), dim=-1)  # sorted, largest first
        values = values.masked_fill(values < values[:, top_k - 1:top_k], float("-inf"))
    if top_p < 1.0:
        if ids is None:
            values, ids = torch.sort(values, dim=-1, descending=True)
        probs = values.softmax(dim=-1)
        mass_before = probs.cumsum(dim=-1) - probs  # probability of the more likely tokens
        values = values.masked_fill(mass_before >= top_p, float("-inf"))
    return values, ids


def probabilities(logits, temperature=1.0, top_k=0, top_p=1.0):
    """The distribution `sampling_step` draws from, over the whole vocabulary [B, V]."""
    values, ids = candidates(logits, temperature, top_k, top_p)
    probs = values.softmax(dim=-1)
    return probs if ids is None else torch.zeros_like(logits, dtype=probs.dtype).scatter_(-1, ids, probs)


def draw(probs, generator=None):
    """One index per row, distributed exactly as `probs` [B, C] (rows summing to 1): inverse CDF, one
    uniform number per row (a zero-probability entry has an empty interval and is never drawn). No
    host synchronisation."""
    cdf = probs.cumsum(dim=-1)
    u = torch.rand(cdf.size(0), 1, device=cdf.device, generator=generator) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).clamp_(max=cdf.size(-1) - 1).squeeze(-1)


def sampling_step(logits, temperature=1.0, top_k=0, top_p=1.0, greedy=False, generator=None):
    """The next token of each row from its last logits [B, V]: argmax when `greedy`, else a draw from
    `probabilities(logits, temperature, top_k, top_p)`. (Argmax on some rows and a draw on the others:
    `mixed_step`.)"""
    if greedy:
        return logits.argmax(dim=-1)
    values, ids = candidates(logits, temperature, top_k, top_p)
    choice = draw(values.softmax(dim=-1), generator)
    return choice if ids is None else ids.gather(-1, choice.unsqueeze(-1)).squeeze(-1)


def mixed_step(logits, argmax_rows, drawn_rows, temperature=1.0, top_k=0, top_p=1.0, generator=None):
    """`sampling_step` with argmax on the rows of index tensor `argmax_rows` and a draw on those of
    `drawn_rows` (the rest); the draw filters and takes uniform numbers for the drawn rows only."""
    token = torch.empty(logits.size(0), dtype=torch.long, device=logits.device)
    token[argmax_rows] = logits[argmax_rows].argmax(dim=-1)
    if drawn_rows.numel():
        token[drawn_rows] = sampling_step(logits[drawn_rows], temperature, top_k, top_p, False, generator)
    return token


@dataclass
class Samples:
    """What `sample` returns: completions [B * n, T] (pad after each row's EOS), their mask (1 up to
    and including EOS), and with `return_logps` each token's log-prob under the plain softmax."""
    tokens: torch.Tensor
    mask: torch.Tensor
    logps: torch.Tensor | None = None


#: Rows from which `_FusedDecoder`, told no path, multiplies by oneDNN-reordered weights on a float32
#: CPU (`sample` measures the paths instead: `_fastest_path`). On a 512x8 model, one thread: 2 rows
#: decode as fast with the plain GEMM, which skips the reorder's ~50 ms per call; from 4 rows on the
#: reordered weights were 25-50% faster per token.
PACK_MIN_ROWS = 4


class _FusedDecoder:
    """The one-token decode step of a dense MiniMind as plain tensor calls on fused weights: q/k/v
    in one matrix, gate/up in one, no module calls. Same maths as the blocks (RMSNorm in float32,
    rotary, grouped-query attention over the cache, SwiGLU); built from the model's weights at the
    start of each `sample` call, so it always decodes the current policy.

    `path` is how the step multiplies by the weights (`DECODE_PATHS`): "plain" (`F.linear` on them as
    they are), "onednn" or "mkl" (each library's GEMM on weights it reordered once, here, for `rows`
    rows: a decode step multiplies a few rows by every weight, where the plain small-batch GEMM repacks
    each weight on every call). The products are the same up to float rounding. Without a path:
    "onednn" where `_prepacks` and from `PACK_MIN_ROWS` rows on, unless `reorder` is False."""

    def __init__(self, model, rows, reorder=True, path=None):
        body, c = model.model, model.config
        self.heads, self.kv_heads, self.head_dim = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.act = body.layers[0].mlp.act_fn
        self.embed, self.head = body.embed_tokens.weight, model.lm_head.weight
        self.cos, self.sin = body.freqs_cos, body.freqs_sin
        self.norm = (body.norm.weight, body.norm.eps)
        self.layers = []
        for layer in body.layers:
            attn, mlp = layer.self_attn, layer.mlp
            self.layers.append((
                (layer.input_layernorm.weight, layer.input_layernorm.eps),
                torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]).detach(),
                attn.o_proj.weight,
                (layer.post_attention_layernorm.weight, layer.post_attention_layernorm.eps),
                torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]).detach(),
                mlp.down_proj.weight))
        if path is None:
            path = "onednn" if reorder and rows >= PACK_MIN_ROWS and _prepacks(self.head) else "plain"
        self.path = path
        self.linear = {"plain": F.linear, "onednn": _onednn_linear, "mkl": _mkl_linear}[path]
        if path != "plain":
            pack = _REORDER[path]
            self.layers = [(norm_in, pack(qkv, rows), pack(o, rows), norm_post, pack(gate_up, rows), pack(down, rows))
                           for norm_in, qkv, o, norm_post, gate_up, down in self.layers]
            self.head = pack(self.head, rows)

    def multiply_all(self, x, x_wide):
        """Every weight's product once, as one decode step does (rows `x` [B, H], `x_wide` [B, I]):
        what `_fastest_path` times."""
        for _, w_qkv, w_o, _, w_gate_up, w_down in self.layers:
            for inputs, weight in ((x, w_qkv), (x, w_o), (x, w_gate_up), (x_wide, w_down)):
                self.linear(inputs, weight)
        self._head(x)

    def _head(self, x):
        if self.linear is F.linear:
            # W @ h^T: for a few rows this streams the [vocab, hidden] matrix once (F.linear measured 2-5x slower)
            return torch.mm(self.head, x.t()).t()
        return self.linear(x, self.head)

    @staticmethod
    def _rms(x, norm):
        weight, eps = norm
        xf = x.float()
        return weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).type_as(x)

    def __call__(self, token, position, key_mask, cache):
        """Logits [B, V] after `token` [B] at `position` [B, 1]; writes its keys/values into `cache`."""
        rows, h, kvh, d = token.size(0), self.heads, self.kv_heads, self.head_dim
        at, end = cache.length, cache.length + 1
        x = self.embed[token]  # [B, H]
        cos, sin = self.cos[position], self.sin[position]  # [B, 1, D]
        half = d // 2
        for i, (norm_in, w_qkv, w_o, norm_post, w_gate_up, w_down) in enumerate(self.layers):
            qkv = self.linear(self._rms(x, norm_in), w_qkv).view(rows, h + 2 * kvh, d)
            qk, v = qkv[:, :h + kvh], qkv[:, h + kvh:]
            rotated = torch.cat((-qk[..., half:], qk[..., :half]), dim=-1)
            qk = qk * cos + rotated * sin
            cache.keys[i][:, :, at] = qk[:, h:]
            cache.values[i][:, :, at] = v
            out = F.scaled_dot_product_attention(
                qk[:, :h].unsqueeze(2), cache.keys[i][:, :, :end], cache.values[i][:, :, :end],
                attn_mask=None if key_mask is None else key_mask[..., :end], enable_gqa=h != kvh)
            x = x + self.linear(out.reshape(rows, h * d), w_o)
            gate, up = self.linear(self._rms(x, norm_post), w_gate_up).chunk(2, dim=-1)
            x = x + self.linear(self.act(gate) * up, w_down)
        return self._head(self._rms(x, self.norm))


def _prepacks(weight):
    """Whether the decode step may run on reordered weights: float32 on a CPU with oneDNN, outside
    autocast (which would otherwise cast the products to bfloat16)."""
    return (weight.device.type == "cpu" and weight.dtype == torch.float32 and torch.backends.mkldnn.is_available()
            and not torch.is_autocast_enabled("cpu") and hasattr(torch.ops.mkldnn, "_reorder_linear_weight"))


def _onednn_linear(x, packed_weight):
    """x @ W^T with W reordered by `torch.ops.mkldnn._reorder_linear_weight`."""
    return torch.ops.mkldnn._linear_pointwise(x, packed_weight, None, "none", [], "")


def _mkl_linear(x, packed):
    """x @ W^T with W reordered by `torch.ops.mkl._mkl_reorder_linear_weight` (packed: the reordered
    weight, W itself, the row count it was reordered for)."""
    weight, original, rows = packed
    return torch.ops.mkl._mkl_linear(x, weight, original, None, rows)


_REORDER = {"onednn": lambda w, rows: torch.ops.mkldnn._reorder_linear_weight(w.detach(), rows),
            "mkl": lambda w, rows: (torch.ops.mkl._mkl_reorder_linear_weight(w.detach(), rows), w.detach(), rows)}
#: How a float32 CPU decode step may multiply by the weights (see `_FusedDecoder`).
DECODE_PATHS = ("plain", "onednn", "mkl")
_FASTEST = {}  # (rows, tokens, threads, weight shapes) -> the path `_fastest_path` measured fastest


def decode_paths(weight):
    """The paths a decode step with this head weight can take here."""
    if not _prepacks(weight):
        return ["plain"]
    mkl = torch.backends.mkl.is_available() and hasattr(torch.ops.mkl, "_mkl_reorder_linear_weight")
    return ["plain", "onednn"] + (["mkl"] if mkl else [])


#: How much faster than `PACK_MIN_ROWS`'s choice a measured path must be to be taken instead, so that
#: near-ties (where a busy machine's noise could tip the measurement either way) always decode alike.
FASTER_BY = 0.10


def _fastest_path(model, rows, tokens):
    """The decode path (`DECODE_PATHS`) for a `sample` call of `rows` rows and up to `tokens` new
    tokens on this machine. Which is fastest depends on the processor, the thread count and the row
    count (measured at 8 rows of a 512x8 model: oneDNN's reordered weights 1.5x faster than the plain
    GEMM on one Xeon, MKL's 1.35x faster than oneDNN's on another), so each path's cost is measured:
    its weight preparation (once per call) plus `tokens` passes over every weight. The rule's path
    (oneDNN from `PACK_MIN_ROWS` rows on, else plain) is kept unless another costs `FASTER_BY` less.
    Measured once per process for each row count, token count, thread count and model shape (a few
    hundred ms for a 512x8 model), without drawing from the random number generators."""
    paths = decode_paths(model.lm_head.weight)
    rule = "onednn" if rows >= PACK_MIN_ROWS and len(paths) > 1 else "plain"
    if len(paths) == 1:
        return rule
    key = (rows, tokens, torch.get_num_threads(), tuple(tuple(p.shape) for p in model.parameters()))
    if key not in _FASTEST:
        x = torch.full((rows, model.config.hidden_size), 0.01)
        x_wide = torch.full((rows, model.config.intermediate_size), 0.01)
        costs = {}
        for path in paths:
            start = time.perf_counter()
            decoder = _FusedDecoder(model, rows, path=path)
            prepare = time.perf_counter() - start
            passes = []
            for _ in range(3):  # the least of three: a busy machine's pauses only ever add time
                start = time.perf_counter()
                decoder.multiply_all(x, x_wide)
                passes.append(time.perf_counter() - start)
            costs[path] = prepare + tokens * min(passes)
        fastest = min(costs, key=costs.get)
        _FASTEST[key] = fastest if costs[fastest] < (1 - FASTER_BY) * costs[rule] else rule
    return _FASTEST[key]


def _decode_layers(model, hidden, position_ids, attn_mask, is_causal, cache):
    """The transformer body on new positions with the cache; returns the last position's logits."""
    body = model.model
    position_embeddings = (body.freqs_cos[position_ids], body.freqs_sin[position_ids])
    for layer in body.layers:
        hidden = layer(hidden, position_embeddings, attn_mask, is_causal, cache)
    hidden = body.norm(hidden[:, -1])
    # W @ h^T: for a few rows this streams the large [vocab, hidden] head matrix once, where
    # F.linear's small-batch GEMM on CPU measured 2-5x slower.
    return torch.mm(model.lm_head.weight, hidden.t()).t()


@torch.no_grad()
def sample(model, prompt_ids, prompt_mask, max_new_tokens, *, eos_id, pad_id, num_samples=1, temperature=1.0,
           top_k=0, top_p=1.0, greedy=False, return_logps=False, generator=None, check_every=None,
           compile=False):
    """Sample `num_samples` completions of each left-padded prompt [P, L] (mask 1 = token) from a
    `MiniMindForCausalLM`; rows come out prompt-major (prompt 0's samples first), as `generate()`'s
    `num_return_sequences`. Returns `Samples`. The model is put in eval mode for the loop and back.
    `greedy` is True, False or a bool tensor [P * num_samples] saying which rows take the argmax
    (`mixed_step`): greedy and sampled answers in one call.
    """
    if max_new_tokens < 1:
        raise ValueError("max_new_tokens must be at least 1")
    if isinstance(greedy, torch.Tensor):
        if greedy.shape != (prompt_ids.size(0) * num_samples,):
            raise ValueError(f"greedy has shape {tuple(greedy.shape)}, the rows {prompt_ids.size(0) * num_samples}")
        greedy = greedy.to(device=prompt_ids.device, dtype=torch.bool)
    was_training = model.training
    model.eval()
    try:
        return _sample(model, prompt_ids, prompt_mask.to(torch.bool), max_new_tokens, eos_id, pad_id, num_samples,
                       dict(temperature=temperature, top_k=top_k, top_p=top_p, greedy=greedy, generator=generator),
                       return_logps, check_every, compile)
    finally:
        model.train(was_training)


def _sample(model, prompt_ids, prompt_mask, max_new, eos_id, pad_id, n, how, return_logps, check_every, compile):
    device = prompt_ids.device
    body = model.model
    if check_every is None:
        check_every = 16 if device.type == "cuda" else 1
    prompt_len = prompt_ids.size(1)
    total = prompt_len + max_new
    if total > model.config.max_position_embeddings:
        raise ValueError(f"{total} positions exceed max_position_embeddings ({model.config.max_position_embeddings})")

    # 1. Encode each prompt once, then give each of its n rows a copy of its keys and values.
    prompt_cache = StaticKVCache(len(body.layers), prompt_len)
    positions = (prompt_mask.long().cumsum(-1) - 1).clamp(min=0)
    attn_mask, is_causal = body._attention_mask(prompt_mask, 0, prompt_len, device)
    logits = _decode_layers(model, body.embed_tokens(prompt_ids), positions, attn_mask, is_causal, prompt_cache)
    cache = StaticKVCache(len(body.layers), total)
    for i in range(len(body.layers)):
        k = prompt_cache.keys[i].repeat_interleave(n, dim=0)
        v = prompt_cache.values[i].repeat_interleave(n, dim=0)
        cache.keys[i] = k.new_empty((k.size(0), k.size(1), total, k.size(3)))
        cache.values[i] = v.new_empty(cache.keys[i].shape)
        cache.keys[i][:, :, :prompt_len] = k
        cache.values[i][:, :, :prompt_len] = v
    cache.length = prompt_len
    del prompt_cache
    logits = logits.repeat_interleave(n, dim=0)
    rows = logits.size(0)

    # Keys each row may attend to: its prompt tokens, then every generated position.
    key_mask = torch.ones(rows, 1, 1, total, dtype=torch.bool, device=device)
    key_mask[:, 0, 0, :prompt_len] = prompt_mask.repeat_interleave(n, dim=0)
    pads = not bool(prompt_mask.all())
    next_pos = positions[:, -1:].repeat_interleave(n, dim=0) + 1  # [rows, 1]

    tokens = torch.full((rows, max_new), pad_id, dtype=torch.long, device=device)
    logps = torch.zeros(rows, max_new, device=device) if return_logps else None
    done = torch.zeros(rows, dtype=torch.bool, device=device)

    pick = functools.partial(sampling_step, **how)
    if isinstance(how["greedy"], torch.Tensor):  # the rows' indices found once, not a host sync every token
        greedy = how.pop("greedy")
        pick = functools.partial(mixed_step, argmax_rows=greedy.nonzero().squeeze(1),
                                 drawn_rows=(~greedy).nonzero().squeeze(1), **how)

    def step(logits, t):
        token = pick(logits)
        if return_logps:
            logps[:, t] = torch.log_softmax(logits.float(), dim=-1).gather(1, token.unsqueeze(1)).squeeze(1)
        token = token.masked_fill(done, pad_id)
        tokens[:, t] = token
        done.logical_or_(token == eos_id)
        return token

    if model.config.use_moe:  # routed experts: through the blocks themselves
        def decode(token, t, next_pos):
            mask = key_mask[..., :prompt_len + t + 1] if pads else None
            return _decode_layers(model, body.embed_tokens(token.unsqueeze(1)), next_pos, mask, False, cache)
    else:
        # inductor cannot lower the reordered-weight GEMMs: a compiled step multiplies by the weights as they are
        fused = _FusedDecoder(model, rows, path="plain" if compile else _fastest_path(model, rows, max_new))

        def decode(token, t, next_pos):
            return fused(token, next_pos, key_mask if pads else None, cache)

    if compile:
        decode = torch.compile(decode, dynamic=True, **({} if compile is True else {"backend": compile}))

    steps = max_new
    for t in range(max_new):
        token = step(logits, t)
        if t + 1 == max_new or ((t + 1) % check_every == 0 and bool(done.all())):
            steps = t + 1
            break
        logits = decode(token, t, next_pos)
        cache.advance(1)
        next_pos = next_pos + 1

    tokens = tokens[:, :steps]
    mask = _completion_mask(tokens, eos_id)
    return Samples(tokens=tokens, mask=mask, logps=logps[:, :steps] * mask if return_logps else None)


def _completion_mask(tokens, eos_id):
    """1 up to and including each row's first EOS (all ones when it has none)."""
    is_eos = (tokens == eos_id).int()
    before = is_eos.cumsum(dim=1) - is_eos  # EOS tokens strictly before each position
    return (before == 0).int()
