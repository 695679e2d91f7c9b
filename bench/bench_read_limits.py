"""`python -m mmcore data check` on hostile files: how long it takes to answer, and with what.

    python bench/bench_read_limits.py [--mb 50]

Writes into a fresh temporary read root: a row nested 200,000 deep (alone, and after a good row, checked
as pretrain data so the scan worker reads it), a one-line JSON file of `--mb` MB, and a FIFO named
`*.jsonl`; runs `data check` on each in a child process and prints its wall time, exit status, whether
a traceback was printed, the message's first line, and which temporary rows copies were left in
`data_scans/`; then removes the read root (its FIFO included). The target: each answers within 5 s without
a traceback (the scan of a file it has to read whole takes the tokenizer's start-up on top).
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=50, help="size of the one-line JSON file")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench-read-limits-"))
    try:
        run_cases(folder, args.mb)
    finally:
        shutil.rmtree(folder, ignore_errors=True)  # its FIFO and its large files go with it


def run_cases(folder, mb):
    deep = b"[" * 200_000 + b"]" * 200_000 + b"\n"
    (folder / "deep.jsonl").write_bytes(deep)
    (folder / "deep_after_good.jsonl").write_bytes(b'{"text": "good"}\n' + deep)
    with open(folder / "one_line.jsonl", "wb") as f:
        f.write(b'{"text": "' + b"a" * (mb * 2**20) + b'"}\n')
    os.mkfifo(folder / "pipe.jsonl")
    env = {**os.environ, "MINIMIND_READ_ROOTS": str(folder), "MINIMIND_DASHBOARD_HOME": str(folder / "home")}
    cases = [("deep.jsonl", []), ("deep_after_good.jsonl", ["--type", "pretrain"]), ("one_line.jsonl", []),
             ("one_line.jsonl", ["--type", "pretrain"]), ("pipe.jsonl", [])]
    print(f"{'file':<24} {'options':<16} {'seconds':>8} {'exit':>5} {'traceback':>10}  message")
    for name, options in cases:
        started = time.monotonic()
        run = subprocess.run([sys.executable, "-m", "mmcore", "data", "check", str(folder / name), *options],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
        took = time.monotonic() - started
        said = (run.stderr.strip() or run.stdout.strip()).splitlines()
        bad = [line for line in run.stdout.splitlines() if line.startswith("bad row")]
        first = (bad or said or [""])[0]
        print(f"{name:<24} {' '.join(options):<16} {took:>8.2f} {run.returncode:>5} "
              f"{'yes' if 'Traceback' in run.stderr + run.stdout else 'no':>10}  {first[:110]}")
    left = sorted(p.name for p in (folder / "home" / "data_scans").glob("*.rows.jsonl*")) \
        if (folder / "home" / "data_scans").is_dir() else []
    print(f"temporary rows copies left in data_scans/: {left or 'none'}")


if __name__ == "__main__":
    main()
