"""Export a weight file to a transformers folder, from the dashboard or `python -m mmcore export`.

The export itself (`model/export_hf.py`) needs torch; it runs in a child process so the dashboard
never imports torch. Exit status 0: exported; 2: the file is not a MiniMind state dict, the sizes
given disagree with it, or the output folder exists and is not empty (the reason is on stderr).
"""
import subprocess
import sys

from mmcore.base.paths import ROOT


def export_argv(weight, out_dir, hidden_size=None, num_hidden_layers=None, use_moe=None, lora=None,
                tokenizer_path=None, dtype=None):
    """The command that exports `weight` (plus a merged `lora`) to `out_dir`; None options are read from the file."""
    argv = [sys.executable, "-m", "model.export_hf", str(weight), str(out_dir)]
    for name, value in (("hidden_size", hidden_size), ("num_hidden_layers", num_hidden_layers),
                        ("use_moe", use_moe), ("lora", lora), ("tokenizer_path", tokenizer_path), ("dtype", dtype)):
        if value is not None and value != "":
            argv += [f"--{name}", str(int(value) if name == "use_moe" else value)]
    return argv


def run_export(weight, out_dir, timeout=600, capture=True, **options):
    """Run the export to completion; returns (exit status, its output text). With `capture` False the
    child's output (progress, or the reason for a refusal) goes straight to this process's terminal."""
    proc = subprocess.run(export_argv(weight, out_dir, **options), cwd=ROOT, capture_output=capture, text=True,
                          timeout=timeout)
    return proc.returncode, ((proc.stdout or "") + (proc.stderr or "")).strip()
