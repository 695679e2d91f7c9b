"""MetricsReader's record templates against plain json: is the regex parse still worth its code?

    python -m bench.bench_metric_stream [--records 200000] [--appends 200] [--repeat 3]

Writes a metrics.jsonl of `--records` records shaped as the trainers write them (`trainer/rules/records.py`:
positions and about ten metrics, numbers only), then times the reader as it is (record templates for blocks
of `TEMPLATE_MIN_LINES` lines or more, json for fewer) and with every block read by `json` (the reader's
own fallback, `_by_json`):

- a first read of the whole file (a Logs page opening a long run; the shared readers of
  `mmcore.live.livechart_cache` do it once per run and server);
- `--appends` later reads of 5 new records each (a run that goes on: what a shared reader does per change).

Prints the seconds of each and the ratio json / templates. Both must give the same table.
"""
import argparse
import json
import math
import os
import random
import tempfile
import time
from unittest import mock

from mmcore.runs import metric_stream
from mmcore.runs.metric_stream import METRICS_FILE, MetricsReader


def record(step, rng):
    loss = 8.0 * math.exp(-step / 5000) + rng.random() * 0.1
    return {"global_step": step, "epoch": 0, "step": step, "samples": step * 32, "tokens": step * 32 * 512,
            "time": 1.7e9 + step * 0.4, "elapsed_s": step * 0.4, "loss": loss, "lr": 5e-4 * (1 - step / 1e6),
            "reward": rng.random() * 3, "reward_std": rng.random(), "kl": rng.random() * 0.01,
            "entropy": 2 + rng.random(), "time/generate_s": 0.2 + rng.random() * 0.05, "grad_norm": rng.random()}


def write(path, steps, rng):
    with open(path, "a", encoding="utf-8") as f:
        for step in steps:
            f.write(json.dumps(record(step, rng)) + "\n")


def timed_reads(run_dir, records, appends, plain_json):
    """(first read s, all appended reads s, the final frame) as the reader is, or with json alone."""
    path = os.path.join(run_dir, METRICS_FILE)
    rng = random.Random(0)
    os.remove(path) if os.path.exists(path) else None
    write(path, range(1, records + 1), rng)
    patch = mock.patch.object(MetricsReader, "_by_templates", lambda self, data, lines: None) if plain_json \
        else mock.patch.object(metric_stream, "MAX_TEMPLATES", metric_stream.MAX_TEMPLATES)
    with patch:
        reader = MetricsReader(run_dir)
        start = time.perf_counter()
        reader.update()
        reader.frame()
        first = time.perf_counter() - start
        step, later = records, 0.0
        for _ in range(appends):
            write(path, range(step + 1, step + 6), rng)
            step += 5
            start = time.perf_counter()
            reader.update()
            reader.frame()
            later += time.perf_counter() - start
        return first, later, reader.frame()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--appends", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3, help="best of this many runs of each")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-metric-stream-") as run_dir:
        best = {}
        for plain_json in (False, True):
            runs = [timed_reads(run_dir, args.records, args.appends, plain_json) for _ in range(args.repeat)]
            best[plain_json] = (min(r[0] for r in runs), min(r[1] for r in runs), runs[-1][2])
        (t_first, t_later, t_frame), (j_first, j_later, j_frame) = best[False], best[True]
        assert t_frame.equals(j_frame), "the reader and json alone gave different tables"
        size_mb = os.path.getsize(os.path.join(run_dir, METRICS_FILE)) / 2**20
    print(f"metrics.jsonl: {args.records:,} records + {args.appends} appends of 5 ({size_mb:.1f} MiB), "
          f"best of {args.repeat}")
    print(f"first read:   reader {t_first:.3f} s   json alone {j_first:.3f} s   ratio {j_first / t_first:.2f}x")
    print(f"{args.appends} appends: reader {t_later:.3f} s   json alone {j_later:.3f} s   "
          f"ratio {j_later / t_later:.2f}x")


if __name__ == "__main__":
    main()
