"""Export a MiniMind weight file for use outside this repository, in one of four formats, and verify it.

- `llama` (the default where the model allows it): a plain `LlamaForCausalLM` folder (config.json,
  model.safetensors, tokenizer with its chat template, generation_config.json) that transformers, vLLM,
  TGI, PEFT and llama.cpp's converter load with no custom code (`model.export_llama`);
- `minimind`: the custom-code folder (config.json with `auto_map` plus model_minimind.py and the modules
  it imports): what a model Llama cannot express (MoE, MiniMind's YaRN) falls back to, saying why;
- `gguf`: `model-<type>.gguf` (f32, f16 or q8_0) for llama.cpp, and an Ollama `Modelfile` beside it
  (`model.export_gguf`);
- `peft`: a LoRA file as a PEFT adapter (adapter_config.json + adapter_model.safetensors) with the
  Llama-format base in `base/` (`model.export_peft`).

With `--lora`, `llama`, `minimind` and `gguf` merge the adapter into the weights; `peft` keeps it apart.
Each export is checked right after writing (`model.export_verify`) and the result goes into the folder's
`minimind_export.json` with the source, format and size. The folder is built beside OUT_DIR and renamed
into place, so a failed export leaves nothing half-written; an existing non-empty OUT_DIR is refused.
Progress lines (`Epoch:[1/1](k/n)`) let the dashboard show an export job's progress.

    python -m model.export_hf out/full_sft_512.pth exported/full_sft_512 [--format gguf --gguf_type q8_0]
"""
import argparse
import os
import sys
import time

import torch

from model import export_files, export_gguf, export_llama, export_verify
from model.weights import BUNDLED_TOKENIZER, WeightFileError, load_model, load_tokenizer, read_state_dict
from trainer.rules.export_options import DTYPE_NAMES, add_export_options

TOKENIZER_FILES = export_files.TOKENIZER_FILES
GENERATION_DEFAULTS = export_files.GENERATION_DEFAULTS
DTYPES = dict(zip(DTYPE_NAMES, (torch.float32, torch.float16, torch.bfloat16)))


class Progress:
    """Prints `Epoch:[1/1](k/n)` lines (the dashboard's progress bar) and a stage line before each."""

    def __init__(self, total, quiet=False):
        self.total, self.done, self.start, self.quiet = total, 0, time.time(), quiet

    def step(self, what):
        self.done += 1
        if not self.quiet:
            print(f"[{self.done}/{self.total}] {what}", flush=True)
            print(f"Epoch:[1/1]({self.done}/{self.total}) elapsed_s: {time.time() - self.start:.2f}", flush=True)


def write_custom_folder(model, folder, tokenizer_path):
    """The custom-code transformers folder (config.json with auto_map, the modeling code, safetensors)."""
    from model.model_minimind import MiniMindConfig, MiniMindForCausalLM
    # Registering the classes makes save_pretrained copy model_minimind.py and write auto_map.
    MiniMindConfig.register_for_auto_class()
    MiniMindForCausalLM.register_for_auto_class("AutoModelForCausalLM")
    model.config.architectures = ["MiniMindForCausalLM"]
    model.config.pad_token_id = export_files.PAD_ID
    model.save_pretrained(folder, safe_serialization=True)
    export_files.copy_tokenizer(tokenizer_path, folder)
    export_files.write_generation_config(folder)


def resolve_format(fmt, config, lora):
    """(format to write, why it differs from the one asked or None); ValueError where none fits."""
    why = export_llama.blockers(config)
    if fmt in (None, "", "llama"):
        if why:
            return "minimind", ("written as the custom-code MiniMind folder, not Llama, because " + "; ".join(why)
                                + ". Load it with trust_remote_code=True.")
        return "llama", None
    if fmt in ("gguf", "peft") and why:
        raise ValueError(f"cannot export as {fmt}: " + "; ".join(why))
    if fmt == "peft" and not lora:
        raise ValueError("--format peft needs --lora (the adapter to write)")
    return fmt, None


def export(weight, out_dir, *, hidden_size=None, num_hidden_layers=None, use_moe=None, lora=None,
           tokenizer_path=None, dtype="float32", fmt=None, gguf_type="f16", verify=True, quiet=True):
    """Write `weight` (+ `lora`) to `out_dir` in `fmt` and verify it; returns the manifest (a dict)."""
    tokenizer_path = tokenizer_path or BUNDLED_TOKENIZER
    try:
        export_files.check_tokenizer(tokenizer_path)
    except ValueError as exc:
        raise WeightFileError(str(exc)) from None
    export_files.refuse_taken(out_dir)
    progress = Progress(4 if verify else 3, quiet)
    # The reference: float32, the LoRA merged (for peft, the merged model is what base + adapter must equal).
    reference = load_model(weight, hidden_size, num_hidden_layers, use_moe, lora=lora)
    asked = fmt or "llama"
    fmt, fallback = resolve_format(fmt, reference.config, lora)
    if fmt in ("llama", "minimind") and dtype != "float32":
        reference = reference.to(DTYPES[dtype]).float()  # what the folder holds, compared in float32
    progress.step(f"loaded {weight}{' + ' + lora if lora else ''} ({reference.config.hidden_size}x"
                  f"{reference.config.num_hidden_layers}{', MoE' if reference.config.use_moe else ''}) -> {fmt}")
    tokenizer = load_tokenizer(tokenizer_path)
    started = time.time()
    with export_files.staged_folder(out_dir) as tmp:
        files = []
        if fmt == "llama":
            export_llama.write_llama_folder(reference, tmp, tokenizer_path, DTYPES[dtype])
        elif fmt == "minimind":
            write_custom_folder(load_model(weight, lora=lora, dtype=DTYPES[dtype]), tmp, tokenizer_path)
        elif fmt == "gguf":
            name = export_gguf.file_name(gguf_type)
            export_gguf.write_gguf(reference, os.path.join(tmp, name), tokenizer_path, gguf_type,
                                   name=os.path.basename(os.path.abspath(out_dir)))
            with open(os.path.join(tmp, "Modelfile"), "w", encoding="utf-8") as f:
                f.write(export_gguf.modelfile_text(name))
            export_files.copy_tokenizer(tokenizer_path, tmp)
            files = [name, "Modelfile"]
        else:  # peft: the base as a Llama folder in base/, the adapter beside it
            from model.export_peft import write_adapter
            base_dir = os.path.join(tmp, "base")
            os.makedirs(base_dir)
            export_llama.write_llama_folder(load_model(weight), base_dir, tokenizer_path)
            write_adapter(read_state_dict(lora), tmp, os.path.join(os.path.abspath(out_dir), "base"))
            export_files.copy_tokenizer(tokenizer_path, tmp)
        seconds = time.time() - started
        progress.step(f"wrote {fmt} in {seconds:.2f} s")
        result = {"ok": None, "detail": "not verified (--verify 0)"}
        if verify:
            checked = time.time()
            result = _verify(fmt, tmp, reference, tokenizer, gguf_type, files)
            result["seconds"] = round(time.time() - checked, 3)
            progress.step(f"verified: {result['detail']}")
        manifest = {
            "format": fmt, "asked_format": asked, "fallback_reason": fallback,
            "gguf_type": gguf_type if fmt == "gguf" else None,
            "weight": os.path.abspath(weight), "lora": os.path.abspath(lora) if lora else None,
            "tokenizer_path": os.path.abspath(tokenizer_path), "dtype": dtype, "export_s": round(seconds, 3),
            "hidden_size": reference.config.hidden_size, "num_hidden_layers": reference.config.num_hidden_layers,
            "use_moe": bool(reference.config.use_moe), "verification": result, "files": files,
            "created": time.time(),
        }
        manifest["size_bytes"] = export_files.folder_size(tmp)
        export_files.write_manifest(tmp, manifest)
    if fmt == "gguf":  # the `ollama create` command names the folder where it now is, known only here
        manifest["ollama_command"] = export_gguf.ollama_command(out_dir)
        export_files.write_manifest(out_dir, manifest)
    progress.step(f"done: {out_dir} ({manifest['size_bytes'] / 1e6:.1f} MB)")
    return manifest


def _verify(fmt, folder, reference, tokenizer, gguf_type, files):
    try:
        if fmt == "llama":
            return export_verify.verify_folder(folder, reference, tokenizer)
        if fmt == "minimind":
            return export_verify.verify_folder(folder, reference, tokenizer, trust_remote_code=True)
        if fmt == "gguf":
            return export_verify.verify_gguf(os.path.join(folder, files[0]), gguf_type, reference, tokenizer)
        return export_verify.verify_peft(folder, os.path.join(folder, "base"), reference, tokenizer)
    except Exception as exc:  # a check that crashed is a failed check, reported, not a failed export
        return {"ok": False, "detail": f"verification failed to run: {type(exc).__name__}: {str(exc)[:300]}"}


def build_parser():
    parser = argparse.ArgumentParser(prog="python -m model.export_hf",
                                     description="Export a MiniMind .pth weight file (Llama folder, custom-code "
                                                 "folder, GGUF + Ollama Modelfile, or PEFT adapter)")
    add_export_options(parser)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()  # the job's log shows our progress lines, not transformers' bars
    try:
        manifest = export(args.weight, args.out_dir, hidden_size=args.hidden_size,
                          num_hidden_layers=args.num_hidden_layers, use_moe=args.use_moe, lora=args.lora,
                          tokenizer_path=args.tokenizer_path, dtype=args.dtype, fmt=args.format,
                          gguf_type=args.gguf_type, verify=bool(args.verify), quiet=False)
    except (WeightFileError, FileExistsError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if manifest["fallback_reason"]:
        print(f"note: {manifest['fallback_reason']}")
    print(f"exported {args.weight}{' + ' + args.lora if args.lora else ''} -> {args.out_dir} "
          f"(format={manifest['format']}, hidden_size={manifest['hidden_size']}, "
          f"num_hidden_layers={manifest['num_hidden_layers']}, use_moe={int(manifest['use_moe'])})")
    verification = manifest["verification"]
    print(f"verification: {'passed' if verification['ok'] else 'not run' if verification['ok'] is None else 'FAILED'}"
          f" - {verification['detail']}")
    if manifest.get("ollama_command"):
        print(f"ollama: {manifest['ollama_command']}")
    return 0 if verification["ok"] is not False else 3


if __name__ == "__main__":
    sys.exit(main())
