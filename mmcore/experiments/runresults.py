"""A run's results in a few numbers: final and best loss, final reward, held-out metrics, tokens seen, wall time.

Read from the run's metrics stream (`metrics.jsonl`, see `mmcore.runs.metric_stream`) in one pass, and kept
per file (its size and modification time say when to read again), so a table of thousands of finished runs
reads each file once per process. A run without a stream falls back to the progress summary its row keeps.
"""
import json
import math
import os
import threading

from mmcore.runs.metric_stream import job_run_dir
from trainer.rules.records import METRICS_FILE

LOSS_KEY, REWARD_KEY = "loss", "reward"
EVAL_PREFIX = "eval/"
#: The result columns, in the order tables show them (held-out metrics follow, one column each).
RESULT_KEYS = ("final_loss", "best_loss", "final_reward", "tokens", "wall_time_s", "steps")

_cache = {}  # metrics file -> ((size, mtime_ns), summary)
_lock = threading.Lock()


def _finite(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def summarize_lines(lines):
    """The summary of metrics records (JSON lines as bytes or str): {"final_loss", "best_loss",
    "final_reward", "tokens", "steps", "elapsed_s", "eval": {name: last value}}; an unterminated or
    unreadable line is skipped."""
    final_loss = best_loss = final_reward = tokens = steps = elapsed = None
    evals = {}
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not isinstance(record, dict):
            continue
        loss = record.get(LOSS_KEY)
        if isinstance(loss, (int, float)) and not isinstance(loss, bool):
            final_loss = float(loss)
            if math.isfinite(loss) and (best_loss is None or loss < best_loss):
                best_loss = float(loss)
        if _finite(record.get(REWARD_KEY)):
            final_reward = float(record[REWARD_KEY])
        if _finite(record.get("tokens")):
            tokens = int(record["tokens"])
        if _finite(record.get("global_step")):
            steps = int(record["global_step"])
        if _finite(record.get("elapsed_s")):
            elapsed = float(record["elapsed_s"])
        for key, value in record.items():
            if key.startswith(EVAL_PREFIX) and _finite(value):
                evals[key] = float(value)
    return {"final_loss": final_loss, "best_loss": best_loss, "final_reward": final_reward, "tokens": tokens,
            "steps": steps, "elapsed_s": elapsed, "eval": evals}


def metrics_summary(path):
    """`summarize_lines` of the metrics file at `path` (only whole lines), or None when there is none;
    read again only when the file changed."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    key = (stat.st_size, stat.st_mtime_ns)
    with _lock:
        cached = _cache.get(path)
    if cached is not None and cached[0] == key:
        return cached[1]
    try:
        with open(path, "rb") as f:
            data = f.read(stat.st_size)
    except OSError:
        return None
    summary = summarize_lines(data[:data.rfind(b"\n") + 1].splitlines())
    with _lock:
        _cache[path] = (key, summary)
    return summary


def results(job, home):
    """The results of `job` as a flat dict: RESULT_KEYS plus `eval/<name>` for each held-out metric."""
    summary = metrics_summary(os.path.join(job_run_dir(job, home), METRICS_FILE))
    if summary is None:  # no stream: what the row's stored progress says
        progress = job.final_progress or {}
        loss = progress.get("loss")
        summary = {"final_loss": loss, "best_loss": None, "final_reward": progress.get("reward"), "tokens": None,
                   "steps": progress.get("step"), "elapsed_s": None, "eval": {}}
    wall = job.duration
    out = {"final_loss": summary["final_loss"], "best_loss": summary["best_loss"],
           "final_reward": summary["final_reward"], "tokens": summary["tokens"],
           "wall_time_s": round(wall, 1) if wall is not None else summary["elapsed_s"], "steps": summary["steps"]}
    out.update(sorted(summary["eval"].items()))
    return out
