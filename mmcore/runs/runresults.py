"""A run's results in a few numbers: final and best loss, final reward, held-out metrics, tokens seen, wall time.

Read from the run's metrics stream (`metrics.jsonl`, see `mmcore.runs.metric_stream`) in one pass, and kept
per file (its size and modification time say when to read again): in this process, and in the job store's
file (`run_summaries`, see `SummaryStore`), so a table of thousands of finished runs reads each stream once,
not once per server start: a job's supervisor keeps its run's summary when the job ends (`keep_summary`). A run
without a stream falls back to the progress summary its row keeps.

The Runs page never waits for thousands of streams that were never summarised (runs older than kept summaries,
a restored home, a run whose supervisor died): past a small budget of bytes (`Later`) a finished run's stream
is left to a background worker (`mmcore.runs.summary_worker`), which keeps its summary for every later reader.
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

#: Bytes of never-summarised streams the Runs page's script reads itself (a few dozen runs' worth, about 0.1 s)
#: before it leaves the rest to the background worker.
INLINE_BYTES = 1 << 20
PENDING = "pending"  # what `metrics_summary` returns for a stream it left for later

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


_scan = json.JSONDecoder().scan_once  # what json.loads does after skipping whitespace: one value from an index
_SKIP = object()


def _record(line):
    """`json.loads(line)` (a str), or _SKIP where that raises: the scanner alone where the value fills the line."""
    try:
        value, end = _scan(line, 0)
    except (StopIteration, ValueError):
        end = -1
    if end == len(line):
        return value
    try:  # whitespace around the value, a second value, or not JSON: exactly what json.loads says
        return json.loads(line)
    except ValueError:
        return _SKIP


def _last(records, key):
    for record in reversed(records):
        value = record.get(key)
        if _finite(value):
            return value
    return None


def summarize_stream(data):
    """`summarize_lines(data.splitlines())` of a stream's bytes (whole lines), about twice as fast: the lines are
    decoded once and scanned without `json.loads`' per-line work, the last values are found from the end, and
    the records are searched for held-out metrics only when the text names one. A text that could decode
    differently line by line (not UTF-8, a NUL, a byte-order mark, a carriage return) is read by
    `summarize_lines` itself."""
    try:
        text = data.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return summarize_lines(data.splitlines())
    if "\r" in text or "\x00" in text or "\ufeff" in text:
        return summarize_lines(data.splitlines())
    records = [r for r in map(_record, text.split("\n")[:-1 if text.endswith("\n") else None])
               if type(r) is dict]
    try:
        losses = [v for r in records if type(v := r.get(LOSS_KEY)) is float or type(v) is int]
        finite = [v for v in losses if math.isfinite(v)]
    except OverflowError:  # an integer too large for a float: as summarize_lines treats it
        return summarize_lines(data.splitlines())
    reward, tokens, steps, elapsed = (_last(records, k) for k in (REWARD_KEY, "tokens", "global_step", "elapsed_s"))
    evals = {}
    if EVAL_PREFIX in text or "\\" in text:  # (a key may be spelled with escapes)
        for record in records:
            for key, value in record.items():
                if key.startswith(EVAL_PREFIX) and _finite(value):
                    evals[key] = float(value)
    return {"final_loss": float(losses[-1]) if losses else None, "best_loss": float(min(finite)) if finite else None,
            "final_reward": None if reward is None else float(reward), "tokens": None if tokens is None else int(tokens),
            "steps": None if steps is None else int(steps), "elapsed_s": None if elapsed is None else float(elapsed),
            "eval": evals}


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
                if path not in _cache:
                    _cache[path] = ((size, mtime_ns), json.loads(summary))

    def keys(self):
        """{metrics file: (size, mtime_ns)} of every kept summary."""
        with self.connection() as conn:
            return {path: (size, mtime_ns) for path, size, mtime_ns in
                    conn.execute("SELECT path, size, mtime_ns FROM run_summaries")}

    def keep(self, paths):
        """Write this process's summaries of `paths` (those it has) to the file, in one transaction."""
        with _lock:
            rows = [(p, *_cache[p][0], json.dumps(_cache[p][1])) for p in paths if p in _cache]
        if rows:
            with self.connection() as conn, conn:
                conn.executemany("INSERT OR REPLACE INTO run_summaries (path, size, mtime_ns, summary)"
                                 " VALUES (?, ?, ?, ?)", rows)


class Later:
    """What a reader that must not wait leaves for later: streams are read here while `budget` (bytes) lasts,
    except those in `inline`, read whatever their size; the others go into `paths` ({metrics file: (size,
    mtime_ns)}) and their jobs' ids into `jobs`."""

    def __init__(self, budget=None, inline=()):
        self.budget = INLINE_BYTES if budget is None else budget
        self.inline = set(inline)
        self.paths = {}
        self.jobs = set()


def metrics_summary(path, read=None, later=None):
    """`summarize_lines` of the metrics file at `path` (only whole lines), or None when there is none;
    read again only when the file changed. `read` (a set) gets `path` when the file was read here. With
    `later` (a `Later`), PENDING for a stream that was left for later instead of being read."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    key = (stat.st_size, stat.st_mtime_ns)
    with _lock:
        cached = _cache.get(path)
    if cached is not None and tuple(cached[0]) == key:
        return cached[1]
    if later is not None and path not in later.inline:
        if stat.st_size > later.budget:
            later.paths[path] = key
            return PENDING
        later.budget -= stat.st_size
    try:
        with open_regular(path) as f:
            data = f.read(stat.st_size)
    except OSError:
        return None
    summary = summarize_stream(data[:data.rfind(b"\n") + 1])
    with _lock:
        _cache[path] = (key, summary)
    if read is not None:
        read.add(path)
    return summary


def results(job, home, read=None, later=None):
    """The results of `job` as a flat dict: RESULT_KEYS plus `eval/<name>` for each held-out metric. `read`: see
    `metrics_summary`; `later` (a `Later`) applies to a finished job's stream only (a running job's stream
    changes, so no kept summary would ever match it): a job whose stream is left for later goes into
    `later.jobs`, its results blank but for the wall time its row knows."""
    summary = metrics_summary(os.path.join(job_run_dir(job, home), METRICS_FILE), read,
                              later if job.finished else None)
    if summary is PENDING:
        later.jobs.add(job.id)
        summary = {"final_loss": None, "best_loss": None, "final_reward": None, "tokens": None, "steps": None,
                   "elapsed_s": None, "eval": {}}
    elif summary is None:  # no stream: what the row's stored progress says
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
