"""Import a base weight: a Llama-format folder (ours or any Llama of a shape MiniMind has) or an upstream
MiniMind `.pth`, written as `{name}_{hidden}[_moe].pth` in a weight folder, where the Train page's base
weight (`from_weight`) finds it.

A `.pth` carries only tensors: the trainers read the size from them and assume MiniMind's other settings
(8 attention heads, rope_theta 1e6, rms eps 1e-5, tied head). A Llama whose settings differ cannot run as
that file, so it is refused with the difference named rather than imported wrong. Round trip: export
(`--format llama`) then import gives the same tensors, and so the same logits.

    python -m model.import_weight exported/full_sft_512 out/imported_512.pth   (or out/imported)
"""
import argparse
import os
import sys

import torch

from model.export_llama import minimind_state_from_llama
from model.weights import WeightFileError, infer_config, read_state_dict

#: Settings the trainers do not read from a .pth: an imported model must have MiniMind's.
_IMPLIED = ("num_attention_heads", "num_key_value_heads", "intermediate_size", "rope_theta", "rms_norm_eps",
            "tie_word_embeddings", "vocab_size")


def weight_name(prefix, state):
    """`{prefix}_{hidden}[_moe].pth`, the trainers' file name for a state dict."""
    config = infer_config(state)
    return f"{prefix}_{config.hidden_size}{'_moe' if config.use_moe else ''}.pth"


def load_source(source):
    """The MiniMind state dict of `source` (a Llama folder or a MiniMind .pth); WeightFileError otherwise."""
    if os.path.isdir(source):
        try:
            config, state = minimind_state_from_llama(source)
        except (ValueError, OSError, KeyError) as exc:
            raise WeightFileError(f"{source}: cannot import: {exc}") from None
        if config.tie_word_embeddings:
            state["lm_head.weight"] = state["model.embed_tokens.weight"]
        implied = infer_config(state, source=source)
        differ = [f"{name}={getattr(config, name)} (MiniMind: {getattr(implied, name)})" for name in _IMPLIED
                  if getattr(config, name) != getattr(implied, name)]
        if differ:
            raise WeightFileError(f"{source}: a MiniMind .pth cannot carry these settings: {', '.join(differ)}")
        return state
    state = read_state_dict(source)
    infer_config(state, source=source)  # refuses what is not a full MiniMind state dict
    return state


def import_weight(source, out_path):
    """Write `source` as the MiniMind weight file `out_path` (never over an existing file); returns its config.
    An `out_path` without `.pth` is a prefix: `{out_path}_{hidden}[_moe].pth`, the trainers' name."""
    state = load_source(source)
    if not out_path.endswith(".pth"):
        out_path = os.path.join(os.path.dirname(out_path), weight_name(os.path.basename(out_path), state))
    if os.path.exists(out_path):
        raise FileExistsError(f"{out_path} exists: choose another name")
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    tmp = f"{out_path}.tmp{os.getpid()}"
    try:
        torch.save({k: v.contiguous() for k, v in state.items()}, tmp)
        os.replace(tmp, out_path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    config = infer_config(state, source=out_path)
    config.out_path = out_path
    return config


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m model.import_weight",
                                     description="Import a Llama-format folder or a MiniMind .pth as a base weight")
    parser.add_argument("source", help="Llama-format folder (config.json + safetensors) or MiniMind .pth")
    parser.add_argument("out_path", help="weight file to write (out/imported_512.pth), or a prefix (out/imported: "
                                         "the size is added as the trainers name their files)")
    args = parser.parse_args(argv)
    try:
        config = import_weight(args.source, args.out_path)
    except (WeightFileError, FileExistsError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"imported {args.source} -> {config.out_path} (hidden_size={config.hidden_size}, "
          f"num_hidden_layers={config.num_hidden_layers}, use_moe={int(config.use_moe)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
