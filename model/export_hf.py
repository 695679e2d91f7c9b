"""Export a MiniMind weight file to a self-contained transformers folder.

The folder holds `config.json` (with `auto_map`), `model.safetensors`, the modeling code
(`model_minimind.py` and the modules it imports), the tokenizer files and `generation_config.json`,
so anywhere with transformers installed:

    model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)
    tokenizer = AutoTokenizer.from_pretrained(folder)

load it and `model.generate()` works. A LoRA file is merged into the base weights first.

    python -m model.export_hf out/full_sft_512.pth exported/full_sft_512 [--lora out/lora/x_512.pth]
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

import torch

from model.weights import BUNDLED_TOKENIZER, WeightFileError, load_model
from trainer.rules.export_options import DTYPE_NAMES, add_export_options

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
                   "merges.txt", "chat_template.jinja")
#: Upstream MiniMind's chat sampling settings (eval_llm.py).
GENERATION_DEFAULTS = {"do_sample": True, "temperature": 0.85, "top_p": 0.85, "max_new_tokens": 512}
DTYPES = dict(zip(DTYPE_NAMES, (torch.float32, torch.float16, torch.bfloat16)))


def export(weight, out_dir, *, hidden_size=None, num_hidden_layers=None, use_moe=None, lora=None,
           tokenizer_path=None, dtype="float32"):
    """Write the transformers folder `out_dir` for `weight` (+ merged `lora`); returns its config.

    The folder is built beside `out_dir` and renamed into place, so a failed export leaves nothing
    half-written; an existing non-empty `out_dir` is refused.
    """
    from transformers import GenerationConfig

    from model.model_minimind import MiniMindConfig, MiniMindForCausalLM

    tokenizer_path = tokenizer_path or BUNDLED_TOKENIZER
    if not os.path.isfile(os.path.join(tokenizer_path, "tokenizer.json")):
        raise WeightFileError(f"tokenizer folder {tokenizer_path} has no tokenizer.json")
    if os.path.isdir(out_dir) and os.listdir(out_dir):
        raise FileExistsError(f"{out_dir} exists and is not empty: choose a new folder")
    model = load_model(weight, hidden_size, num_hidden_layers, use_moe, lora=lora, dtype=DTYPES[dtype])
    config = model.config
    parent = os.path.dirname(os.path.abspath(out_dir))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".export-", dir=parent)
    try:
        # Registering the classes makes save_pretrained copy model_minimind.py and write auto_map.
        MiniMindConfig.register_for_auto_class()
        MiniMindForCausalLM.register_for_auto_class("AutoModelForCausalLM")
        config.architectures = ["MiniMindForCausalLM"]
        config.pad_token_id = 0
        model.save_pretrained(tmp, safe_serialization=True)
        for name in TOKENIZER_FILES:
            src = os.path.join(tokenizer_path, name)
            if os.path.isfile(src):
                shutil.copyfile(src, os.path.join(tmp, name))
        GenerationConfig(bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id, pad_token_id=0,
                         **GENERATION_DEFAULTS).save_pretrained(tmp)
        with open(os.path.join(tmp, "minimind_export.json"), "w", encoding="utf-8") as f:
            json.dump({"weight": os.path.abspath(weight), "lora": os.path.abspath(lora) if lora else None,
                       "tokenizer_path": os.path.abspath(tokenizer_path), "dtype": dtype}, f, indent=2)
        if os.path.isdir(out_dir):
            os.rmdir(out_dir)  # empty (checked above)
        os.replace(tmp, out_dir)
    finally:
        if os.path.isdir(tmp):
            shutil.rmtree(tmp)
    return config


def build_parser():
    parser = argparse.ArgumentParser(prog="python -m model.export_hf",
                                     description="Export a MiniMind .pth weight file to a transformers folder")
    add_export_options(parser)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        config = export(args.weight, args.out_dir, hidden_size=args.hidden_size,
                        num_hidden_layers=args.num_hidden_layers, use_moe=args.use_moe, lora=args.lora,
                        tokenizer_path=args.tokenizer_path, dtype=args.dtype)
    except (WeightFileError, FileExistsError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"exported {args.weight}{' + ' + args.lora if args.lora else ''} -> {args.out_dir} "
          f"(hidden_size={config.hidden_size}, num_hidden_layers={config.num_hidden_layers}, "
          f"use_moe={int(config.use_moe)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
