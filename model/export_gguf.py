"""Write a dense MiniMind as a GGUF file for llama.cpp (and Ollama), with the `gguf` package only.

llama.cpp's `convert_hf_to_gguf.py` refuses MiniMind's tokenizer (it knows pre-tokenizers by the hash
of their output), so the file is written here: architecture `llama`, tensors under llama.cpp's names,
the byte-level BPE tokenizer as `gpt2` with the `gpt-2` pre-tokenizer (MiniMind's tokenizer is
exactly GPT-2's byte-level split), its special tokens as control tokens, and the chat template in
`tokenizer.chat_template`. A `Modelfile` for Ollama goes beside it.

llama.cpp's llama graph rotates interleaved pairs (x0, x1), (x2, x3), ... while MiniMind (like
transformers' Llama) rotates the two halves of each head; q_proj and k_proj rows are permuted once
here, as llama.cpp's converter does for Llama checkpoints, so the maths is unchanged.
"""
import json
import os

import numpy as np
import torch

from model.export_files import BOS_ID, EOS_ID, GENERATION_DEFAULTS, PAD_ID, chat_template
from model.export_llama import blockers

GGUF_TYPES = ("f32", "f16", "q8_0")
STOP_TOKENS = ("<|im_end|>", "<|endoftext|>")

_NAMES = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
          "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
          "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}


def gguf_name(name):
    """llama.cpp's name of a MiniMind tensor (`model.layers.3.mlp.up_proj.weight` -> `blk.3.ffn_up.weight`)."""
    if name == "model.embed_tokens.weight":
        return "token_embd.weight"
    if name == "model.norm.weight":
        return "output_norm.weight"
    if name == "lm_head.weight":
        return "output.weight"
    parts = name.split(".")  # model.layers.N.<module...>.weight
    return f"blk.{parts[2]}.{_NAMES['.'.join(parts[3:-1])]}.{parts[-1]}"


def permute_rotary(weight, n_heads):
    """Reorder each head's rows from the rotate-half layout to llama.cpp's interleaved pairs."""
    rows = weight.shape[0]
    return (weight.reshape(n_heads, 2, rows // n_heads // 2, *weight.shape[1:])
            .swapaxes(1, 2).reshape(weight.shape))


def file_name(gguf_type):
    """The GGUF file's name inside the export folder."""
    return f"model-{gguf_type}.gguf"


def _tokenizer(writer, tokenizer_path, vocab_size):
    """Vocabulary, merges, token types and special ids of the byte-level BPE tokenizer, padded with unused
    tokens to the model's `vocab_size` rows (llama.cpp wants one token per embedding row)."""
    import gguf
    with open(os.path.join(tokenizer_path, "tokenizer.json"), encoding="utf-8") as f:
        data = json.load(f)
    model = data["model"]
    if model.get("type") != "BPE" or (data.get("pre_tokenizer") or {}).get("type") != "ByteLevel":
        raise ValueError("GGUF export needs a byte-level BPE tokenizer (tokenizer.json of type BPE/ByteLevel)")
    added = {t["id"]: t for t in data.get("added_tokens", [])}
    vocab = dict(model["vocab"])
    for token_id, token in added.items():
        vocab.setdefault(token["content"], token_id)
    size = max(vocab.values()) + 1
    if size > vocab_size:
        raise ValueError(f"the tokenizer has {size} tokens, the model only {vocab_size}")
    size = vocab_size
    tokens, types = [f"[PAD{i}]" for i in range(size)], [gguf.TokenType.UNUSED] * size
    for text, token_id in vocab.items():
        tokens[token_id] = text
        special = added.get(token_id, {}).get("special")
        types[token_id] = (gguf.TokenType.CONTROL if special else gguf.TokenType.USER_DEFINED if token_id in added
                           else gguf.TokenType.NORMAL)
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(BOS_ID)
    writer.add_eos_token_id(EOS_ID)
    writer.add_pad_token_id(PAD_ID)
    writer.add_unk_token_id(PAD_ID)
    writer.add_add_bos_token(False)  # MiniMind's chat template writes <|im_start|> itself
    writer.add_add_eos_token(False)
    writer.add_chat_template(chat_template(tokenizer_path))


def _tensor(writer, name, tensor, gguf_type):
    """Add one tensor: 1-D tensors (norms) stay f32, matrices in the file's type (q8_0 where rows allow)."""
    import gguf
    data = tensor.detach().to("cpu", torch.float32).numpy()
    if data.ndim == 1 or gguf_type == "f32":
        writer.add_tensor(name, data.astype(np.float32))
    elif gguf_type == "q8_0" and data.shape[-1] % gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType.Q8_0][0] == 0:
        qtype = gguf.GGMLQuantizationType.Q8_0
        writer.add_tensor(name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)
    else:
        writer.add_tensor(name, data.astype(np.float16))


def write_gguf(model, path, tokenizer_path, gguf_type="f16", name="MiniMind"):
    """Write `model` (a dense MiniMindForCausalLM) to the GGUF file `path` in `gguf_type`."""
    import gguf
    if gguf_type not in GGUF_TYPES:
        raise ValueError(f"gguf_type must be one of {', '.join(GGUF_TYPES)}")
    why = blockers(model.config)
    if why:
        raise ValueError("cannot write GGUF (llama architecture): " + "; ".join(why))
    c = model.config
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_name(name)
    writer.add_context_length(c.max_position_embeddings)
    writer.add_embedding_length(c.hidden_size)
    writer.add_block_count(c.num_hidden_layers)
    writer.add_feed_forward_length(c.intermediate_size)
    writer.add_head_count(c.num_attention_heads)
    writer.add_head_count_kv(c.num_key_value_heads)
    writer.add_rope_dimension_count(c.head_dim)
    writer.add_rope_freq_base(c.rope_theta)
    writer.add_layer_norm_rms_eps(c.rms_norm_eps)
    writer.add_file_type({"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
                          "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[gguf_type])
    if gguf_type == "q8_0":
        writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    _tokenizer(writer, tokenizer_path, c.vocab_size)
    writer.add_vocab_size(c.vocab_size)
    for key, tensor in model.state_dict().items():
        if key == "lm_head.weight" and c.tie_word_embeddings:
            continue  # llama.cpp uses token_embd as the head when output.weight is absent
        if key.endswith("q_proj.weight"):
            tensor = permute_rotary(tensor, c.num_attention_heads)
        elif key.endswith("k_proj.weight"):
            tensor = permute_rotary(tensor, c.num_key_value_heads)
        _tensor(writer, gguf_name(key), tensor, gguf_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


# -- Ollama --------------------------------------------------------------------------------------------

#: MiniMind's chat format in Ollama's Go template language: the system turn (upstream's default when
#: none is given), every turn as <|im_start|>role\n...<|im_end|>\n, then the assistant's header.
OLLAMA_TEMPLATE = """{{- if .System }}<|im_start|>system
{{ .System }}<|im_end|>
{{ else }}<|im_start|>system
You are a helpful assistant<|im_end|>
{{ end }}
{{- range .Messages }}{{ if ne .Role "system" }}<|im_start|>{{ .Role }}
{{ .Content }}<|im_end|>
{{ end }}{{ end }}<|im_start|>assistant
"""


def modelfile_text(gguf_file):
    """The Ollama Modelfile for `gguf_file` (a name beside it): template, stop tokens, default sampling."""
    stops = "".join(f'PARAMETER stop "{s}"\n' for s in STOP_TOKENS)
    return (f"FROM ./{gguf_file}\n"
            f'TEMPLATE """{OLLAMA_TEMPLATE}"""\n'
            f"{stops}"
            f"PARAMETER temperature {GENERATION_DEFAULTS['temperature']}\n"
            f"PARAMETER top_p {GENERATION_DEFAULTS['top_p']}\n"
            f"PARAMETER num_predict {GENERATION_DEFAULTS['max_new_tokens']}\n")


def ollama_name(folder):
    """A model name Ollama accepts, from the export folder's name."""
    base = os.path.basename(os.path.abspath(folder)).lower()
    return "".join(ch if ch.isalnum() or ch in "._-" else "-" for ch in base).strip("-._") or "minimind"


def ollama_command(folder):
    """The one command that makes the export an Ollama model."""
    return f"ollama create {ollama_name(folder)} -f {os.path.join(os.path.abspath(folder), 'Modelfile')}"
