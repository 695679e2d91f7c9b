"""The Data page on a 1 GB sft jsonl: time to first rows, full-scan throughput, worker and caller memory.

    python -m bench.bench_data [--mb 1024] [--keep]     # from the repository root: this checkout's code

Writes a synthetic sft file of about `--mb` MiB into the temporary folder (conversations of 1-3 turns,
some Chinese, every row distinct), then:

- first rows: what the page's script does before it draws the row list (`sources.check`, the kind
  from the first lines, `scans.start` spawning the worker, `rows.read` of the first 20 rows);
- the full scan in the background worker (`mmcore.data.scans`): the health pass's throughput in MB/s
  (in parallel chunks, a process per core), then the token phase (a uniform sample of `scans.PAGE_SAMPLE` rows through the trainers' dataset);
- peak RSS of the worker and its chunk processes (sampled from /proc while it runs) and of this
  process, which stands for the server: it only polls the scan's state, as the page's fragment does.

The temporary folder is made a read root for the run (the page reads only inside the roots).
"""
import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TMP = Path(tempfile.gettempdir()).resolve()


def rss_mb(pid="self"):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def tree_rss_mb(pid):
    """RSS of a process and its children (the worker forks one process per chunk of the health pass)."""
    total = rss_mb(pid) or 0.0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if ppid == pid:
                total += rss_mb(entry) or 0.0
    return total


def generate(path, mb):
    """A ~`mb` MiB sft jsonl of distinct rows."""
    rng = random.Random(0)
    words = ["the", "model", "learns", "from", "data", "that", "is", "clean", "and", "long", "enough", "to", "hold",
             "answer", "in", "full", "数据", "训练", "模型", "回答", "问题", "上下文", "截断", "掩码"]
    target = mb * 2**20
    written = 0
    with open(path, "w", encoding="utf-8") as f:
        i = 0
        while written < target:
            turns = []
            for _ in range(rng.randint(1, 3)):
                q = " ".join(rng.choices(words, k=rng.randint(5, 40)))
                a = " ".join(rng.choices(words, k=rng.randint(20, 200)))
                turns += [{"role": "user", "content": f"{i}: {q}"}, {"role": "assistant", "content": a}]
            line = json.dumps({"conversations": turns}, ensure_ascii=False) + "\n"
            f.write(line)
            written += len(line.encode("utf-8"))
            i += 1
    return i


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=1024)
    parser.add_argument("--keep", action="store_true", help="keep the generated file")
    args = parser.parse_args()

    from trainer.rules import roots
    defaults = roots.default_roots()
    os.environ[roots.READ_ENV] = os.pathsep.join([*map(str, defaults.read), str(TMP)])
    home = Path(tempfile.mkdtemp(prefix="bench-data-home-"))
    os.environ["MINIMIND_DASHBOARD_HOME"] = str(home)

    path = TMP / f"bench_data_{args.mb}mb.jsonl"
    started = time.monotonic()
    n = generate(path, args.mb)
    size = path.stat().st_size
    print(f"generated {path}: {size / 2**20:.0f} MiB, {n:,} rows in {time.monotonic() - started:.1f} s")

    from mmcore.data import checkup, rows, scans, sources

    caller_before = rss_mb()
    t0 = time.monotonic()
    checked = sources.check(path, home)
    kind = checkup.detect_file_kind(checked)
    key = scans.start(checked, kind, home)
    first = rows.read(checked, 1, 20)
    first_rows_s = time.monotonic() - t0
    print(f"time to first rows: {first_rows_s:.3f} s ({len(first)} rows; kind {kind}; worker started)")

    peak_worker, peak_caller, worker_pid = 0.0, caller_before, None
    health_done = None
    while True:
        state = scans.state(home, key)
        if state.progress and state.progress.get("pid"):
            worker_pid = state.progress["pid"]
        if worker_pid:
            peak_worker = max(peak_worker, tree_rss_mb(worker_pid))
        peak_caller = max(peak_caller, rss_mb() or 0.0)
        if health_done is None and state.health is not None:
            health_done = time.monotonic() - t0
        if state.status in ("done", "failed"):
            break
        time.sleep(0.2)
    total_s = time.monotonic() - t0
    if state.status == "failed":
        print(f"scan failed: {state.error}")
        return 1
    report = state.report
    health_s = report["health"]["health_s"]
    print(f"health scan: {report['rows']:,} rows in {health_s:.1f} s = {size / 2**20 / health_s:.0f} MB/s "
          f"(shown on the page after {health_done:.1f} s)")
    print(f"token phase: {report['sampled_rows']:,} sampled rows; whole scan {report['elapsed_s']:.1f} s "
          f"(page sees it done after {total_s:.1f} s); overall {size / 2**20 / report['elapsed_s']:.0f} MB/s")
    print(f"worker peak RSS: {max(peak_worker, report['worker_peak_rss_mb']):.0f} MiB (sampled, with its "
          f"{report['health'].get('health_processes', 1)} health-pass processes: {peak_worker:.0f}; "
          f"the worker's own getrusage peak: {report['worker_peak_rss_mb']:.0f})")
    print(f"caller (server side) RSS: {caller_before:.0f} MiB before, peak {peak_caller:.0f} MiB "
          f"(+{peak_caller - caller_before:.0f} MiB)")
    if not args.keep:
        path.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
