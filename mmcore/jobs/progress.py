"""Where a run stands: progress summaries of parsed logs, and a cache of them for many jobs.

`summarize(records)` gives a `Progress` (step, percent, latest loss and reward, ETA) from parsed
records. A finished job's summary is computed once (`final_progress`), stored in its row by its
runner, and read back from there. `ProgressCache` keeps one incremental `LogParser` per running
job (each refresh reads only the bytes appended since the last one), so refreshing a table of
thousands of jobs parses only what changed.
"""
import dataclasses
import threading
import time
from collections import deque
from datetime import datetime

import pandas as pd

from mmcore.logs.log_parser import LogParser
from mmcore.runs import resumes

LOSS_NAMES = ("loss", "Loss", "Actor Loss", "Policy Loss")
REWARD_NAMES = ("Reward", "reward", "Avg Reward")
RECENT_RECORDS = 200  # records kept per running job: the latest loss and reward are among them


@dataclasses.dataclass(frozen=True)
class Progress:
    """A run's progress. `step` and `total` are global steps (done, and in the whole run); `loss`
    and `reward` are the latest values under their printed names (None when not printed); `eta_s`
    is the seconds left (None without a start time, before the first step, or once it ended)."""
    percent: float = 0.0
    step: int = 0
    total: int | None = None
    epoch: int | None = None
    total_epochs: int | None = None
    loss: float | None = None
    loss_name: str | None = None
    reward: float | None = None
    reward_name: str | None = None
    eta_s: float | None = None

    def as_dict(self):
        """JSON-able, as a job's row stores it."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, stored):
        """A stored summary; keys this version does not know are ignored."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in stored.items() if k in names})

    def latest_metric_text(self, digits=4):
        """The latest reward or loss: "Reward 0.5123" (reward first: it is what RL runs watch), or ""."""
        if self.reward is not None:
            return f"{self.reward_name} {self.reward:.{digits}g}"
        if self.loss is not None:
            return f"{self.loss_name} {self.loss:.{digits}g}"
        return ""


def _seconds(value):
    """Unix seconds from a float, a datetime or an ISO-8601 string (None stays None)."""
    if value is None or isinstance(value, (int, float)):
        return value
    if isinstance(value, datetime):
        return value.timestamp()
    return datetime.fromisoformat(str(value).strip()).timestamp()


def _last_value(records, names):
    """(name, value) of the latest non-NaN value among `names` (first name found wins), or (None, None)."""
    if isinstance(records, pd.DataFrame):
        for name in names:
            if name in records.columns:
                col = records[name]
                index = col.last_valid_index()
                if index is not None:
                    return name, float(col[index])
        return None, None
    for name in names:
        for record in reversed(records):
            value = record.get(name)
            if value is not None and value == value:
                return name, float(value)
    return None, None


def summarize(records, started_at=None, now=None, total_epochs=None, start_step=0):
    """The Progress of a run from its records (a list of dicts or a parsed DataFrame).

    The ETA is the time left at the pace since `started_at`: elapsed * steps left / steps done since
    then, counting from `start_step` (where a resumed job began: its parent's steps took their own
    time). `total_epochs` overrides the
    log's (RL lines do not print it; without either, the latest epoch is taken as the last).
    `started_at`/`now` are unix seconds, datetimes or ISO strings.
    """
    if isinstance(records, pd.DataFrame):
        if records.empty:
            return Progress()
        get = records.iloc[-1].get
    else:
        if not records:
            return Progress()
        get = records[-1].get
    epoch, steps_per_epoch = int(get("epoch")), int(get("total_steps"))
    logged_epochs = get("total_epochs")
    if logged_epochs is None or pd.isna(logged_epochs):
        logged_epochs = None
    epochs = int(total_epochs or logged_epochs or epoch)
    done = int(get("global_step"))
    total = max(epochs * steps_per_epoch, done)
    fraction = done / total if total else 0.0
    loss_name, loss = _last_value(records, LOSS_NAMES)
    reward_name, reward = _last_value(records, REWARD_NAMES)
    eta_s = None
    start = _seconds(started_at)
    own = done - min(max(0, start_step), done)
    if start is not None and own > 0:
        elapsed = max(0.0, (_seconds(now) if now is not None else time.time()) - start)
        eta_s = max(0.0, elapsed * (total - done) / own)
    return Progress(percent=100.0 * fraction, step=done, total=total, epoch=epoch, total_epochs=epochs,
                    loss=loss, loss_name=loss_name, reward=reward, reward_name=reward_name, eta_s=eta_s)


def job_epochs(job):
    """The job's epoch count from its params (RL log lines do not print it), or None."""
    try:
        return int(str(job.params.get("epochs", "")).strip())
    except ValueError:
        return None


class _Tracked:
    """A running job's parser and its latest records."""

    def __init__(self, path):
        self.parser = LogParser(path)
        self.recent = deque(maxlen=RECENT_RECORDS)
        self.first_step = None  # the global step of the log's first progress line

    def read(self):
        """Parse what was appended since the last read; return the latest records."""
        before = len(self.parser)
        self.parser.update()
        if self.parser.restarted:  # the file was truncated or replaced: update() read it from the start
            self.recent.clear()
            before = 0
        if (before == 0 or self.first_step is None) and len(self.parser):
            self.first_step = int(self.parser.frame(copy=False)["global_step"].iloc[0])
        # Only the records that can stay in `recent` become dicts: a long log's first read stays cheap.
        self.recent.extend(self.parser.records_from(max(before, len(self.parser) - RECENT_RECORDS)))
        return list(self.recent)


def final_progress(job, records=None):
    """The Progress of a job that has ended (no ETA), from `records` or else its whole log.

    The runner stores this in the job's row when the job ends; the Jobs table shows it.
    """
    if records is None:
        records = _Tracked(job.log_path).read() if job.log_path else []
    return summarize(records, total_epochs=job_epochs(job))


class ProgressCache:
    """Progress of many jobs, parsed incrementally from their logs.

    A running job's `LogParser` is kept and reads only the new bytes on each call; only its latest
    records are kept as dicts (progress needs just the last step and the latest loss and reward).
    A finished job shows the progress its runner stored in its row (`Job.final_progress`), without
    reading the log. For one without (it ended before that was stored, or its log could not be
    parsed then), the final progress is computed from the log once and remembered (keyed by log path
    and end time, so the log of a job that ran again is read again) and its parser dropped.
    Safe to share between sessions (one lock).
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._tracked = {}  # log path -> _Tracked, for active jobs
        self._final = {}  # (log path, ended_at) -> Progress of a finished job

    def __len__(self):
        return len(self._tracked) + len(self._final)

    def parser(self, log_path):
        """The parser kept for an active job's log, or None."""
        tracked = self._tracked.get(log_path)
        return tracked.parser if tracked else None

    def progress(self, job, now=None):
        """The Progress of one job, from its row or its log."""
        if not job.log_path:
            return Progress()
        if job.active:
            with self._lock:
                tracked = self._tracked.get(job.log_path)
                if tracked is None:
                    tracked = self._tracked[job.log_path] = _Tracked(job.log_path)
                records = tracked.read()
                begun = resumes.start_step(job, tracked.first_step)
            return summarize(records, started_at=job.started_at, now=now, total_epochs=job_epochs(job),
                             start_step=begun)
        if job.final_progress is not None:  # stored by the runner when the job ended: no log to read
            with self._lock:
                self._tracked.pop(job.log_path, None)
            return Progress.from_dict(job.final_progress)
        key = (job.log_path, job.ended_at)
        with self._lock:
            cached = self._final.get(key)
            if cached is not None:
                return cached
            tracked = self._tracked.pop(job.log_path, None) or _Tracked(job.log_path)
            records = tracked.read()
        result = final_progress(job, records)
        with self._lock:
            self._final[key] = result
        return result

    def forget(self, log_path):
        """Drop what is cached about one log (its job was deleted)."""
        with self._lock:
            self._tracked.pop(log_path, None)
            for key in [k for k in self._final if k[0] == log_path]:
                del self._final[key]
