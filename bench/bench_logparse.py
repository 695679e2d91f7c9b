"""Speed and memory of the log parser (mmcore.logs.log_parser) on a synthetic 200 MB training log.

The log mixes every progress-line format (pretrain, distillation, newer upstream, GRPO, SPO, PPO) with
as many noise lines: warnings, tqdm bars with `\\r` rewrites, ANSI colours, resume notices,
tracebacks, argparse errors. Prints:

- full parse (`parse_file`) in MB/s, and the peak RSS of a fresh process doing only that;
- an incremental refresh (`LogParser.update()`) after 1,000 appended lines, on the 200 MB file and
  on a small one: the time should not depend on the file's size;
- the same after restoring a saved state (position) instead of keeping the parser in memory.

Targets: >= 50 MB/s, refresh < 20 ms independent of size, peak RSS < 300 MB. Wall-clock and CPU
time are both printed: on a shared machine the wall clock includes time spent waiting for a core.

    python3 bench/bench_logparse.py [--mb 200] [--keep DIR]
"""
import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mmcore.logs.log_parser import LogParser, parse_file

ROOT = Path(__file__).resolve().parent.parent

PROGRESS_FORMATS = (
    "Epoch:[{e}/2]({s}/44160) loss:{a:.6f} lr:{lr:.12f} epoch_Time:{t:.1f}min:",
    "Epoch:[{e}/6]({s}/44160) loss:{a:.4f} ce:{b:.4f} distill:{c:.4f} lr:{lr:.6f} epoch_Time:{t:.1f}min:",
    "Epoch:[{e}/2]({s}/44160), loss: {a:.4f}, logits_loss: {b:.4f}, aux_loss: {c:.4f}, lr: {lr:.8f}, epoch_time: {t:.1f}min",
    "Epoch: {e}, Step: {s}/44160, Actor Loss: {a:.6f}, Reward: {b:.6f}, Avg Response Len: {t:.2f}, LR: {lr:.2e}, Reward Std: {c:.4f}, KL: {c:.4f}",
    "Epoch: {e}, Step: {s}/44160, Actor Loss: {a:.6f}, Reward: {b:.6f}, Baseline: {c:.4f}, KL: {c:.4f}, Rho: 0.9000, Avg Response Len: {t:.2f}, LR: {lr:.2e}",
    "Epoch: {e}, Step: {s}/44160, Actor Loss: {a:.6f}, Critic Loss: {b:.6f}, Reward: {b:.6f}, KL: {c:.4f}, KL_ref: {c:.4f}, Avg Response Len: {t:.2f}, Actor LR: {lr:.2e}, Critic LR: {lr:.2e}",
)

NOISE = (
    "/usr/lib/python3/dist-packages/torch/utils/data/dataloader.py:665: UserWarning: 'pin_memory' argument is set as true but no accelerator is found",
    " 37%|███▋      | 370/1000 [00:12<00:21, 29.41it/s]\r 38%|███▊      | 380/1000 [00:12<00:21, 29.50it/s]\r 39%|███▉      | 390/1000 [00:13<00:20, 29.61it/s]",
    "\x1b[33mWARNING\x1b[0m: tokenizer has no chat template, using the default one",
    "Epoch [1/1]: 跳过前1200个step，从 step 1201 开始",
    "LLM 总参数量: 25.830 百万",
    "Traceback (most recent call last):\n  File \"/work/trainer/train_pretrain.py\", line 88, in <module>\n    train_epoch(epoch, loader, iters)\nRuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB",
    "train_pretrain.py: error: argument --epochs: invalid int value: 'two'",
    "Saving model checkpoint to ../out/pretrain_512.pth ... done (0.8 s)",
)


def write_log(path, target_bytes, seed=0, run=20_000):
    """Write a synthetic log of about `target_bytes`: progress and noise lines alternate.

    The progress format changes every `run` progress lines, cycling through all of them (a real
    log has one format; `run=1` changes it on every line, the parser's worst case).
    """
    rng = random.Random(seed)
    written, step, epoch = 0, 0, 1
    with open(path, "w", encoding="utf-8") as f:
        f.write("# job 7 · type pretrain · bench\n# command: python ../trainer/train_pretrain.py --epochs 2\n")
        while written < target_bytes:
            lines = []
            for _ in range(min(5000, max(1, target_bytes // 250))):
                step += 1
                if step > 44160:
                    step, epoch = 1, epoch + 1
                fmt = PROGRESS_FORMATS[(step // run) % len(PROGRESS_FORMATS)]
                lines.append(fmt.format(e=epoch, s=step, a=rng.random() * 9, b=rng.random(), c=rng.random() / 10,
                                        lr=5e-4 * rng.random(), t=rng.random() * 300))
                lines.append(NOISE[step % len(NOISE)])
            chunk = "\n".join(lines) + "\n"
            f.write(chunk)
            written += len(chunk.encode())
    return os.path.getsize(path)


def append_lines(path, n, start_step):
    with open(path, "a", encoding="utf-8") as f:
        for i in range(n):
            f.write(f"Epoch:[9/9]({start_step + i}/44160) loss:{1.0 / (i + 1):.6f} lr:0.000500000000 epoch_Time:1.0min:\n")


def time_refresh(path, n_lines=1000):
    """(ms for update() after appending n_lines to a caught-up parser, ms from a restored state)."""
    parser = LogParser(path)
    parser.update()
    state = parser.state()
    append_lines(path, n_lines, 1)
    t0 = time.perf_counter()
    new = parser.update()
    live_ms = (time.perf_counter() - t0) * 1000
    assert new == n_lines, (new, n_lines)
    restored = LogParser(path, state=state)
    t0 = time.perf_counter()
    new = restored.update()
    restored_ms = (time.perf_counter() - t0) * 1000
    assert new == n_lines, (new, n_lines)
    return live_ms, restored_ms


def peak_rss_of_parse(path):
    """Peak RSS (MB) of a fresh Python process that imports the parser and runs parse_file."""
    # VmHWM (the peak RSS of this process image) rather than ru_maxrss, which a child inherits
    # from its parent across fork and exec.
    code = (
        "import sys;"
        "from mmcore.logs.log_parser import parse_file;"
        "hwm = lambda: int([l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]);"
        "base = hwm();"
        "df = parse_file(sys.argv[1]);"
        "print(len(df), base / 1024, hwm() / 1024)"
    )
    out = subprocess.run([sys.executable, "-c", code, str(path)], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout.split()
    return int(out[0]), float(out[1]), float(out[2])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=200, help="size of the big synthetic log in MB")
    ap.add_argument("--keep", help="write the logs into this folder and keep them")
    args = ap.parse_args()

    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-logparse-"))
    folder.mkdir(parents=True, exist_ok=True)
    big, small = folder / "big.log", folder / "small.log"
    try:
        t0 = time.perf_counter()
        size = write_log(big, int(args.mb * 1e6))
        write_log(small, 100_000, seed=1, run=1000)
        print(f"synthetic log: {size / 1e6:.1f} MB written in {time.perf_counter() - t0:.1f} s")

        t0, cpu0 = time.perf_counter(), time.process_time()
        df = parse_file(big)
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        print(f"full parse: {elapsed:.2f} s, {size / 1e6 / elapsed:.1f} MB/s "
              f"(CPU time {cpu:.2f} s, {size / 1e6 / cpu:.1f} MB/s), {len(df):,} records x {len(df.columns)} columns")
        del df

        worst = folder / "interleaved.log"
        worst_size = write_log(worst, int(min(args.mb, 40) * 1e6), run=1)
        t0, cpu0 = time.perf_counter(), time.process_time()
        parse_file(worst)
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        worst.unlink()
        print(f"worst case, the format changing on every line ({worst_size / 1e6:.0f} MB): "
              f"{worst_size / 1e6 / elapsed:.1f} MB/s (CPU time: {worst_size / 1e6 / cpu:.1f} MB/s)")

        rows, base_mb, peak_mb = peak_rss_of_parse(big)
        print(f"peak RSS of a process running parse_file: {peak_mb:.0f} MB "
              f"(after imports {base_mb:.0f} MB; {rows:,} records)")

        for label, path in (("200 MB file" if args.mb == 200 else f"{args.mb:g} MB file", big),
                            ("small file", small)):
            size_now = os.path.getsize(path)
            live_ms, restored_ms = time_refresh(path)
            print(f"refresh after 1,000 appended lines, {label} ({size_now / 1e6:.1f} MB): "
                  f"{live_ms:.1f} ms (live parser), {restored_ms:.1f} ms (restored state)")
    finally:
        if not args.keep:
            for path in (big, small):
                path.unlink(missing_ok=True)
            folder.rmdir()


if __name__ == "__main__":
    main()
