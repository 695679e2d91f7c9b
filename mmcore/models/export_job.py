"""Export a weight file (Llama folder, custom-code folder, GGUF + Ollama Modelfile, PEFT adapter), and
list what was exported, for the Models page and `python -m mmcore export`.

The export itself (`model/export_hf.py`) needs torch, so it runs in a child process and the dashboard
never imports torch: from the page as a job (`launch`: queued like an evaluation, its progress and log on
Jobs, so a large model never blocks the page), from the command line to completion (`run_export`).
Exit status 0: exported and verified (or verification could not run here); 2: refused (not a MiniMind
state dict, sizes that disagree, a format the model cannot take, an existing folder; the reason is on
stderr); 3: written but the verification failed.

Each export folder holds `minimind_export.json` (format, source weight, size, verification result);
`exports` lists them, each with the job that wrote it. `run_import` is the way back: an exported Llama
folder (or an upstream MiniMind .pth) becomes a weight file the Train page starts from.
"""
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from mmcore.base import regular_file
from mmcore.base.paths import ROOT
from mmcore.queue import jobqueue

JOB_TYPE = "export"
MANIFEST = "minimind_export.json"  # written by model/export_files.py
_OPTIONS = ("format", "gguf_type", "hidden_size", "num_hidden_layers", "use_moe", "lora", "tokenizer_path", "dtype",
            "verify")


def export_argv(weight, out_dir, **options):
    """The command that exports `weight` (plus `lora`) to `out_dir`; None options are the export's defaults."""
    unknown = set(options) - set(_OPTIONS)
    if unknown:
        raise TypeError(f"unknown export options: {sorted(unknown)}")
    argv = [sys.executable, "-m", "model.export_hf", str(weight), str(out_dir)]
    for name in _OPTIONS:
        value = options.get(name)
        if value is not None and value != "":
            argv += [f"--{name}", str(int(value) if name in ("use_moe", "verify") else value)]
    return argv


def run_export(weight, out_dir, timeout=600, capture=True, **options):
    """Run the export to completion; returns (exit status, its output text). With `capture` False the
    child's output (progress, or the reason for a refusal) goes straight to this process's terminal."""
    proc = subprocess.run(export_argv(weight, out_dir, **options), cwd=ROOT, capture_output=capture, text=True,
                          timeout=timeout)
    return proc.returncode, ((proc.stdout or "") + (proc.stderr or "")).strip()


def run_import(source, out_prefix, timeout=600):
    """Import `source` (a Llama-format folder or a MiniMind .pth) as `{out_prefix}_{hidden}[_moe].pth`
    (`model.import_weight`); returns (exit status, output). 0: imported; 2: refused (the reason)."""
    argv = [sys.executable, "-m", "model.import_weight", str(source), str(out_prefix)]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    return proc.returncode, ((proc.stdout or "") + (proc.stderr or "")).strip()


def launch(store, weight, out_dir, user=None, **options):
    """Queue the export as a job owned by `user`; returns its job id. ValueError when the queue refuses."""
    argv = export_argv(weight, out_dir, **options)
    fmt = options.get("format") or "llama"
    name = f"export {Path(options.get('lora') or weight).name} -> {Path(out_dir).name} ({fmt})"
    params = {"weight": str(weight), "out_dir": str(out_dir),
              **{k: str(v) for k, v in options.items() if v is not None and v != ""}}
    try:
        return jobqueue.enqueue(store, JOB_TYPE, name[:120], params, SimpleNamespace(argv=argv, cwd=str(ROOT), env={}),
                                user=user, small=True)
    except jobqueue.QueueRefused as exc:
        raise ValueError(str(exc)) from None


def read_manifest(folder):
    """The manifest of an export folder, or None (no export there, or unreadable)."""
    try:
        return json.loads(regular_file.read_text(Path(folder) / MANIFEST))
    except (OSError, ValueError):
        return None


def exports(root, store=None):
    """Every export folder directly under `root`, newest first: its manifest plus `folder`, `name`, and
    `job_id` (the newest export job that wrote that folder, when the store knows one)."""
    root = Path(root)
    jobs = {}
    if store is not None:
        try:
            for job in reversed(store.list(train_type=JOB_TYPE, limit=1000)):
                jobs[str(Path((job.params or {}).get("out_dir", "")).resolve())] = job.id
        except Exception:  # an unreadable store: list the folders unattributed
            jobs = {}
    found = []
    for folder in sorted(root.iterdir()) if root.is_dir() else ():
        manifest = read_manifest(folder) if folder.is_dir() else None
        if manifest:
            found.append({**manifest, "folder": str(folder), "name": folder.name,
                          "job_id": jobs.get(str(folder.resolve()))})
    return sorted(found, key=lambda m: -(m.get("created") or 0))


def folder_in_use(folder, store=None):
    """Why exporting into `folder` would replace something, as (message key, fields), or None when it is
    free: an export job not yet finished writes there (`models.export.folder_queued`), or the folder already
    holds files (`models.export.folder_exists`, naming the export's source where its manifest says it)."""
    folder = Path(folder)
    if store is not None:
        try:
            pending = [j for j in store.list(train_type=JOB_TYPE, limit=1000) if not j.finished
                       and Path((j.params or {}).get("out_dir", "")).resolve() == folder.resolve()]
        except Exception:  # an unreadable store: only the folder itself can say
            pending = []
        if pending:
            return "models.export.folder_queued", {"job_id": pending[0].id, "folder": folder.name}
    if folder.is_dir() and any(folder.iterdir()):
        manifest = read_manifest(folder) or {}
        source = Path(manifest.get("lora") or manifest.get("weight") or "").name
        return "models.export.folder_exists", {"folder": folder.name, "source": source or "?"}
    return None


def verification_text(manifest):
    """"passed", "FAILED" or "not run", then what was measured."""
    v = manifest.get("verification") or {}
    state = "passed" if v.get("ok") else "not run" if v.get("ok") is None else "FAILED"
    return f"{state}: {v.get('detail', '')}"


def how_to_run(manifest):
    """(language, code) showing how to run the export in `manifest` (a dict from `exports`)."""
    folder, fmt = manifest["folder"], manifest.get("format")
    if fmt == "gguf":
        gguf = next((f for f in manifest.get("files", []) if f.endswith(".gguf")), "model.gguf")
        create = manifest.get("ollama_command") or f"ollama create minimind -f {folder}/Modelfile"
        return "bash", (f"# llama.cpp\nllama-cli -m {folder}/{gguf} -cnv\n"
                        f"# Python (pip install llama-cpp-python)\n"
                        f"python -c \"from llama_cpp import Llama; llm = Llama('{folder}/{gguf}'); "
                        f"print(llm.create_chat_completion([{{'role': 'user', 'content': 'Hi'}}]))\"\n"
                        f"# Ollama\n{create}\nollama run {create.split()[2]}")
    if fmt == "peft":
        return "python", ("from peft import PeftModel\nfrom transformers import AutoModelForCausalLM, AutoTokenizer\n"
                          f"base = AutoModelForCausalLM.from_pretrained({folder + '/base'!r})\n"
                          f"model = PeftModel.from_pretrained(base, {folder!r})  # .merge_and_unload() to merge\n"
                          f"tokenizer = AutoTokenizer.from_pretrained({folder!r})")
    trust = ", trust_remote_code=True" if fmt == "minimind" else ""
    code = ("from transformers import AutoModelForCausalLM, AutoTokenizer\n"
            f"model = AutoModelForCausalLM.from_pretrained({folder!r}{trust})\n"
            f"tokenizer = AutoTokenizer.from_pretrained({folder!r}{trust})\n"
            "ids = tokenizer.apply_chat_template([{'role': 'user', 'content': 'Hi'}], add_generation_prompt=True,\n"
            "                                    return_tensors='pt', return_dict=True)\n"
            "print(tokenizer.decode(model.generate(**ids, max_new_tokens=64)[0]))")
    if fmt == "llama":
        code += f"\n# or serve it: vllm serve {folder}"
    return "python", code
