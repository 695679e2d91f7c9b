"""Helpers for tests that run the real training scripts as subprocesses on CPU.

A trainer writes `../out` and `<repo>/checkpoints` relative to its own location, so tests run it in a
throwaway copy of the repository layout:

    repo = make_repo_copy(tmp_path)                       # trainer/ copied, model/ + dataset/ linked
    data = head_jsonl(DEMO / "sft.jsonl", repo / "data" / "sft.jsonl", 16)
    save_random_weights(repo / "out", "full_sft")         # a tiny base model for from_weight
    proc = run_trainer(repo, "train_full_sft.py", tiny_args(data_path=data, from_weight="full_sft"))
    assert proc.returncode == 0, proc_output(proc)
    frame = progress_frame(proc.stdout)                   # parsed by mmcore.logs.log_parser

`start_trainer` + `wait_for_text` run a trainer in the background (e.g. to SIGTERM it). Every
trainer run is a separate Python process (about 5 s of imports on a small machine): keep their number
low and their data small.
"""
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEMO = REPO / "dataset" / "demo"

#: The tiny-model options every smoke run shares (CPU, float32, no worker processes).
TINY = {"device": "cpu", "dtype": "float32", "epochs": 1, "hidden_size": 64, "num_hidden_layers": 2, "max_seq_len": 64,
        "batch_size": 4, "num_workers": 0, "log_interval": 1, "save_interval": 1000,
        "save_dir": "../out", "weight_dir": "../out"}


def make_repo_copy(dest):
    """Build a repository layout in `dest` in which trainers can run and write.

    trainer/ is copied (the scripts find the repository root from their own path, so out/ and
    checkpoints/ land in `dest`); model/ and dataset/ are symlinked (read only). Returns `dest`.
    """
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copytree(REPO / "trainer", dest / "trainer", ignore=shutil.ignore_patterns("__pycache__"),
                    dirs_exist_ok=True)
    for name in ("model", "dataset"):
        link = dest / name
        if not link.exists():
            link.symlink_to(REPO / name, target_is_directory=True)
    (dest / "data").mkdir(exist_ok=True)
    return dest


def head_jsonl(src, dst, n, repeat=1):
    """Write the first `n` lines of jsonl `src` to `dst`, the block repeated `repeat` times; returns `dst`.

    A small file bounds a smoke run's steps (steps = ceil(lines / batch_size) per epoch) without any
    test-only option in the trainers.
    """
    with open(src, encoding="utf-8") as f:
        lines = [line for _, line in zip(range(n), f)]
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text("".join(lines) * repeat, encoding="utf-8")
    return dst


def tiny_args(**overrides):
    """argv options: TINY updated with `overrides` (None drops an option; True is a bare flag)."""
    values = {**TINY, **overrides}
    argv = []
    for name, value in values.items():
        if value is None or value is False:
            continue
        argv.append(f"--{name}")
        if value is not True:
            argv.append(str(value))
    return argv


def trainer_env(**extra):
    """The environment for a trainer subprocess: no inherited torchrun variables, one thread pool
    sized for a small shared machine, unbuffered output. The callers put the copy's root on PYTHONPATH,
    as the dashboard does, so `import trainer` is the copy and not the editable install's."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_WORLD_SIZE")}
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONUNBUFFERED"] = "1"
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_trainer(repo, script, argv, timeout=900, launcher=None):
    """Run `trainer/<script>` in `repo` (working directory trainer/, like the dashboard) to completion.

    `launcher` replaces `[python]`, e.g. `[python, -m, torch.distributed.run, --nproc_per_node, 2]`.
    Returns the CompletedProcess (text stdout/stderr).
    """
    cmd = list(launcher or [sys.executable]) + [script] + list(argv)
    return subprocess.run(cmd, cwd=Path(repo) / "trainer", env=trainer_env(PYTHONPATH=repo), capture_output=True,
                          text=True, timeout=timeout)


def start_trainer(repo, script, argv, log_path):
    """Start `trainer/<script>` in the background with stdout and stderr going to `log_path`."""
    log = open(log_path, "wb")
    try:
        return subprocess.Popen([sys.executable, script] + list(argv), cwd=Path(repo) / "trainer",
                                env=trainer_env(PYTHONPATH=repo), stdout=log, stderr=subprocess.STDOUT)
    finally:
        log.close()  # the child holds its own descriptor


def wait_for_text(log_path, text, proc, timeout=600):
    """Wait until `text` appears in `log_path`; fail if `proc` exits first or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        content = Path(log_path).read_text(errors="replace") if Path(log_path).exists() else ""
        if text in content:
            return content
        if proc.poll() is not None:
            raise AssertionError(f"trainer exited ({proc.returncode}) before printing {text!r}:\n{content}")
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    raise AssertionError(f"timed out waiting for {text!r} in {log_path}")


def proc_output(proc):
    """stdout and stderr of a finished process, for assertion messages."""
    return f"--- exit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"


def progress_frame(text, tmp_dir=None):
    """Progress records of a trainer's output, parsed by `mmcore.logs.log_parser.parse_file` (a DataFrame)."""
    import tempfile

    from mmcore.logs.log_parser import parse_file
    with tempfile.NamedTemporaryFile("w", suffix=".log", dir=tmp_dir, delete=False, encoding="utf-8") as f:
        f.write(text)
    try:
        return parse_file(f.name)
    finally:
        os.remove(f.name)


def save_random_weights(directory, name, hidden_size=64, num_hidden_layers=2, use_moe=False, seed=0):
    """Save a randomly initialised MiniMind as `{directory}/{name}_{hidden}[_moe].pth` (half precision,
    like the trainers) so a type that needs base weights can start; returns the path."""
    import torch

    from model.model_minimind import MiniMindConfig, MiniMindForCausalLM
    torch.manual_seed(seed)
    model = MiniMindForCausalLM(MiniMindConfig(hidden_size=hidden_size, num_hidden_layers=num_hidden_layers,
                                               use_moe=use_moe))
    path = Path(directory) / f"{name}_{hidden_size}{'_moe' if use_moe else ''}.pth"
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({k: v.half() for k, v in model.state_dict().items()}, path)
    return path


def free_port():
    """A TCP port that was free a moment ago (for torchrun's --master_port)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
