"""A run's results in a few numbers: final and best loss, final reward, held-out metrics, tokens seen, wall time.

Read from the run's metrics stream (`metrics.jsonl`, see `mmcore.runs.metric_stream`) in one pass, and kept
per file (its size and modification time say when to read again): in this process, and in the job store's
file (`run_summaries`, see `SummaryStore`), so a table of thousands of finished runs reads each stream once,
not once per server start: a job's supervisor keeps its run's summary when the job ends (`keep_summary`). A run
without a stream falls back to the progress summary its row keeps.
"""
import json
import math
import os
import threading

from mmcore.base import sqlite_tables
from mmcore.base.regular_file import open_regular
from mmcore.runs.metric_stream import job_run_dir
from trainer.rules.records import METRICS_FILE

LOSS_KEY, REWARD_KEY = "loss", "reward"
EVAL_PREFIX = "eval/"
#: The result columns, in the order tables show them (held-out metrics follow, one column each).
RESULT_KEYS = ("final_loss", "best_loss", "final_reward", "tokens", "wall_time_s", "steps")

_cache = {}  # metrics file -> ((size, mtime_ns), summary)
_lock = threading.Lock()
SCHEMA = """
CREATE TABLE IF NOT EXISTS run_summaries (
    path TEXT PRIMARY KEY, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, summary TEXT NOT NULL)
"""


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


class SummaryStore(sqlite_tables.Tables):
    """The summaries of metrics streams kept in the job store's file (at `path`), so a new process need not read
    them again."""
    SCHEMA = SCHEMA

    def load(self):
        """Put every kept summary into this process's cache (where the cache has none for that file)."""
        with self.connection() as conn:
            rows = conn.execute("SELECT path, size, mtime_ns, summary FROM run_summaries").fetchall()
        with _lock:
            for path, size, mtime_ns, summary in rows:
                _cache.setdefault(path, ((size, mtime_ns), json.loads(summary)))

    def keep(self, paths):
        """Write this process's summaries of `paths` (those it has) to the file, in one transaction."""
        with _lock:
            rows = [(p, *_cache[p][0], json.dumps(_cache[p][1])) for p in paths if p in _cache]
        if rows:
            with self.connection() as conn, conn:
                conn.executemany("INSERT OR REPLACE INTO run_summaries (path, size, mtime_ns, summary)"
                                 " VALUES (?, ?, ?, ?)", rows)


def metrics_summary(path, read=None):
    """`summarize_lines` of the metrics file at `path` (only whole lines), or None when there is none;
    read again only when the file changed. `read` (a set) gets `path` when the file was read here."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    key = (stat.st_size, stat.st_mtime_ns)
    with _lock:
        cached = _cache.get(path)
    if cached is not None and tuple(cached[0]) == key:
        return cached[1]
    try:
        with open_regular(path) as f:
            data = f.read(stat.st_size)
    except OSError:
        return None
    summary = summarize_lines(data[:data.rfind(b"\n") + 1].splitlines())
    with _lock:
        _cache[path] = (key, summary)
    if read is not None:
        read.add(path)
    return summary


def results(job, home, read=None):
    """The results of `job` as a flat dict: RESULT_KEYS plus `eval/<name>` for each held-out metric. `read`: see
    `metrics_summary`."""
    summary = metrics_summary(os.path.join(job_run_dir(job, home), METRICS_FILE), read)
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


def keep_summary(store, job):
    """Read the job's metrics stream once and keep its summary in the job store's file (its supervisor does this
    when the job ends, so no page reads a finished run's stream again)."""
    read = set()
    metrics_summary(os.path.join(job_run_dir(job, store.home), METRICS_FILE), read)
    SummaryStore(store.path).keep(read)
