"""MiniMind <-> Llama: a dense MiniMind *is* a Llama, so it exports as plain `LlamaForCausalLM`.

Checked against the two implementations (model/model_layers.py and transformers' modeling_llama):
same weight names (`model.embed_tokens`, `model.layers.N.self_attn.{q,k,v,o}_proj`,
`mlp.{gate,up,down}_proj`, `input_layernorm`, `post_attention_layernorm`, `model.norm`), no biases,
no q/k norm, RMSNorm computed in float32 and scaled after casting back, rotary embedding in the
rotate-half layout with `rope_theta`, grouped-query attention with a 1/sqrt(head_dim) scale, SwiGLU
with SiLU, and the head tied to the embedding. So the folder needs no custom code: transformers,
vLLM, TGI, PEFT and llama.cpp's own converter all know the architecture.

What Llama cannot express exactly, `blockers` names: a mixture of experts, and MiniMind's YaRN
rotary scaling (its ramp and attention factor are not transformers' YaRN). Those models keep the
custom-code folder (`model.export_hf`).

`minimind_state_from_llama` is the way back (import): a Llama folder written here, or any Llama
checkpoint of a shape MiniMind has, becomes a MiniMind state dict.
"""
import json
import os

import torch

from model.export_files import BOS_ID, EOS_ID, PAD_ID, copy_tokenizer, write_generation_config
from model.model_minimind import MiniMindConfig

SAFETENSORS = "model.safetensors"


def blockers(config):
    """Why `config` (a MiniMindConfig) cannot be written as a Llama model exactly; [] when it can."""
    reasons = []
    if config.use_moe:
        reasons.append("it is a mixture of experts (Llama has one feed-forward per layer)")
    if config.yarn_parameters():
        reasons.append("it uses MiniMind's YaRN rotary scaling, which differs from transformers' YaRN")
    if config.hidden_act != "silu":
        reasons.append(f"its activation is {config.hidden_act}, not silu")
    return reasons


def llama_config(config, dtype=torch.float32):
    """The LlamaConfig of the same model."""
    from transformers import LlamaConfig
    return LlamaConfig(
        vocab_size=config.vocab_size, hidden_size=config.hidden_size, intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_hidden_layers, num_attention_heads=config.num_attention_heads,
        num_key_value_heads=config.num_key_value_heads, head_dim=config.head_dim, hidden_act="silu",
        max_position_embeddings=config.max_position_embeddings, rms_norm_eps=config.rms_norm_eps,
        rope_parameters={"rope_type": "default", "rope_theta": config.rope_theta},
        tie_word_embeddings=config.tie_word_embeddings, attention_bias=False, mlp_bias=False,
        attention_dropout=0.0, bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID,
        architectures=["LlamaForCausalLM"], dtype=str(dtype).removeprefix("torch."))


def llama_state(model, dtype=torch.float32):
    """The model's tensors under Llama's names (the same names), contiguous, in `dtype`; a tied head is
    stored once, as the embedding (as transformers saves tied Llama models)."""
    state = {}
    for name, tensor in model.state_dict().items():
        if name == "lm_head.weight" and model.config.tie_word_embeddings:
            continue
        state[name] = tensor.detach().to("cpu", dtype).contiguous().clone()
    return state


def write_llama_folder(model, folder, tokenizer_path, dtype=torch.float32):
    """Write config.json, model.safetensors, the tokenizer and generation_config.json into `folder`."""
    from safetensors.torch import save_file
    why = blockers(model.config)
    if why:
        raise ValueError("cannot export as Llama: " + "; ".join(why))
    config = llama_config(model.config, dtype)
    config.save_pretrained(folder)
    # Tools that read config.json themselves (older transformers, vLLM, llama.cpp's converter) look
    # for a top-level rope_theta; transformers 5 reads rope_parameters and accepts both.
    path = os.path.join(folder, "config.json")
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    data["rope_theta"] = model.config.rope_theta
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, sort_keys=True)
    save_file(llama_state(model, dtype), os.path.join(folder, SAFETENSORS), metadata={"format": "pt"})
    copy_tokenizer(tokenizer_path, folder)
    write_generation_config(folder)
    return config


# -- the way back: a Llama folder as a MiniMind weight ------------------------------------------------

def _rope_theta(data):
    params = data.get("rope_parameters") or data.get("rope_scaling") or {}
    kind = params.get("rope_type", params.get("type", "default"))
    if kind not in (None, "default"):
        raise ValueError(f"its rotary embedding is scaled ({kind}); MiniMind imports plain rotary only")
    return float(params.get("rope_theta", data.get("rope_theta", 10000.0)))


def minimind_config_from_llama(folder):
    """The MiniMindConfig of the Llama model in `folder`; ValueError for a Llama MiniMind cannot run."""
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        data = json.load(f)
    if data.get("model_type") != "llama":
        raise ValueError(f"{folder} is not a Llama folder (model_type {data.get('model_type')!r})")
    hidden, heads = data["hidden_size"], data["num_attention_heads"]
    if data.get("head_dim", hidden // heads) != hidden // heads:
        raise ValueError("its head_dim is not hidden_size / num_attention_heads, as MiniMind needs")
    if data.get("attention_bias") or data.get("mlp_bias"):
        raise ValueError("it has attention or MLP biases, which MiniMind does not")
    if data.get("hidden_act", "silu") != "silu":
        raise ValueError(f"its activation is {data['hidden_act']}, not silu")
    return MiniMindConfig(
        hidden_size=hidden, num_hidden_layers=data["num_hidden_layers"], vocab_size=data["vocab_size"],
        num_attention_heads=heads, num_key_value_heads=data.get("num_key_value_heads", heads),
        intermediate_size=data["intermediate_size"], rms_norm_eps=float(data.get("rms_norm_eps", 1e-6)),
        rope_theta=_rope_theta(data), max_position_embeddings=data.get("max_position_embeddings", 32768),
        tie_word_embeddings=bool(data.get("tie_word_embeddings", False)))


def minimind_state_from_llama(folder):
    """(MiniMindConfig, state dict) of the Llama model in `folder` (safetensors, one file or shards)."""
    from safetensors.torch import load_file
    config = minimind_config_from_llama(folder)
    files = sorted(n for n in os.listdir(folder) if n.endswith(".safetensors") and not n.startswith("adapter"))
    if not files:
        raise ValueError(f"{folder} has no .safetensors weights")
    state = {}
    for name in files:
        state.update(load_file(os.path.join(folder, name)))
    state = {k: v for k, v in state.items() if not k.endswith("rotary_emb.inv_freq")}
    if config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    elif "lm_head.weight" not in state:
        raise ValueError(f"{folder} has an untied head but no lm_head.weight")
    return config, state
