"""Read a MiniMind weight file (`.pth` state dict) and build the model it belongs to.

The size of the model is read from the state dict itself (hidden size from the embedding, layers
from the highest layer index, MoE from expert keys, KV heads and feed-forward width from the
projection shapes), so any MiniMind `.pth` — ours or upstream's — loads without being told its size.
Sizes passed explicitly must agree with the file. Files are read with `torch.load(weights_only=True)`:
a pickle that would run code is refused, not executed.
"""
import os
import re

import torch

from model.model_minimind import MiniMindConfig, MiniMindForCausalLM

#: The tokenizer shipped in this folder.
BUNDLED_TOKENIZER = os.path.dirname(os.path.abspath(__file__))

_LAYER = re.compile(r"^model\.layers\.(\d+)\.")
_EXPERT = re.compile(r"\.mlp\.experts\.(\d+)\.")
_SHARED = re.compile(r"\.mlp\.shared_experts\.(\d+)\.")


class WeightFileError(ValueError):
    """The file is not a MiniMind state dict (or does not match the sizes asked for)."""


def read_state_dict(path):
    """The tensors of a `.pth` file, keys without a DDP `module.` prefix; WeightFileError if it is not one."""
    if not os.path.isfile(path):
        raise WeightFileError(f"{path}: no such file")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # not a zip/pickle, a pickle that needs code, a truncated file...
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise WeightFileError(f"{path} is not a MiniMind state dict (torch.load refused it: {first})") from None
    if not isinstance(state, dict) or not state or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise WeightFileError(f"{path} is not a MiniMind state dict (expected a dict of tensors, "
                              f"got {type(state).__name__})")
    return {(k[len("module."):] if k.startswith("module.") else k): v for k, v in state.items()}


def is_lora_state(state):
    """True for a file that holds only LoRA adapter weights (`...lora.A.weight` / `...lora.B.weight`)."""
    return all(".lora." in k for k in state)


def infer_config(state, hidden_size=None, num_hidden_layers=None, use_moe=None, source="state dict"):
    """The MiniMindConfig a full state dict was saved from; explicit sizes must agree with it."""
    embed = state.get("model.embed_tokens.weight")
    if embed is None or embed.dim() != 2:
        hint = " (it holds LoRA adapters only: pass it as the LoRA of a base weight)" if is_lora_state(state) else ""
        raise WeightFileError(f"{source} is not a MiniMind state dict: no model.embed_tokens.weight{hint}")
    vocab, found_hidden = embed.shape
    layers = {int(m.group(1)) for k in state if (m := _LAYER.match(k))}
    found_layers = max(layers) + 1 if layers else 0
    experts = {int(m.group(1)) for k in state if (m := _EXPERT.search(k))}
    shared = {int(m.group(1)) for k in state if (m := _SHARED.search(k))}
    found_moe = bool(experts)
    for name, asked, found in (("hidden_size", hidden_size, found_hidden), ("num_hidden_layers", num_hidden_layers,
                               found_layers), ("use_moe", None if use_moe is None else bool(use_moe), found_moe)):
        if asked is not None and asked != found:
            raise WeightFileError(f"{source} has {name}={int(found)}, not {int(asked)} as asked")
    if not found_layers:
        raise WeightFileError(f"{source} is not a MiniMind state dict: no model.layers.N weights")
    extra = {}
    q = state.get("model.layers.0.self_attn.q_proj.weight")
    k = state.get("model.layers.0.self_attn.k_proj.weight")
    if q is not None and k is not None:
        heads = MiniMindConfig.num_attention_heads
        head_dim = q.shape[0] // heads
        if head_dim and k.shape[0] % head_dim == 0:
            extra["num_key_value_heads"] = k.shape[0] // head_dim
    gate = state.get("model.layers.0.mlp.gate_proj.weight", state.get("model.layers.0.mlp.experts.0.gate_proj.weight"))
    if gate is not None:
        extra["intermediate_size"] = gate.shape[0]
    if found_moe:
        extra["n_routed_experts"] = max(experts) + 1
        extra["n_shared_experts"] = max(shared) + 1 if shared else 0
    try:
        return MiniMindConfig(hidden_size=int(found_hidden), num_hidden_layers=found_layers, use_moe=found_moe,
                              vocab_size=int(vocab), **extra)
    except ValueError as exc:
        raise WeightFileError(f"{source}: sizes read from the file are not a valid MiniMind: {exc}") from None


def load_model(path, hidden_size=None, num_hidden_layers=None, use_moe=None, lora=None, device="cpu",
               dtype=torch.float32):
    """The model of weight file `path` (optionally with LoRA file `lora` merged in), in eval mode."""
    state = read_state_dict(path)
    config = infer_config(state, hidden_size, num_hidden_layers, use_moe, source=path)
    model = MiniMindForCausalLM(config)
    missing, unexpected = model.load_state_dict(state, strict=False)
    real_missing = [k for k in missing if k != "lm_head.weight" and "freqs" not in k]
    if real_missing or unexpected:
        raise WeightFileError(f"{path} does not match a MiniMind of its own size: {len(real_missing)} missing and "
                              f"{len(unexpected)} unexpected keys, e.g. {(real_missing + list(unexpected))[:3]}")
    if lora:
        from model.model_lora import apply_lora, load_lora, merge_lora
        lora_state = read_state_dict(lora)
        if not is_lora_state(lora_state):
            raise WeightFileError(f"{lora} is not a LoRA file (it holds more than ...lora.A/B weights)")
        rank = next(v.shape[0] for k, v in lora_state.items() if k.endswith("lora.A.weight"))
        apply_lora(model, rank=rank)
        try:
            load_lora(model, lora)
        except ValueError as exc:
            raise WeightFileError(str(exc)) from None
        merge_lora(model)
    return model.to(device=device, dtype=dtype).eval()


def load_tokenizer(path=None):
    """The tokenizer in folder `path` (tokenizer.json + tokenizer_config.json); default the bundled one."""
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(path or BUNDLED_TOKENIZER)
