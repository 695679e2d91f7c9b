"""The Jobs page's logic as plain functions: table rows, formatting and cheap progress.

Progress comes from the jobs' logs. `ProgressCache` keeps one incremental `LogParser` per running
job (each refresh reads only the bytes appended since the last one); a finished job's progress is
the summary its runner stored in its row, or else is parsed from its log once and remembered, so
refreshing a table of thousands of jobs parses only what changed.
"""
import datetime
import getpass
import os
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass

from mmcore import backends, forms, logparse, registry, runner
from mmcore.store import ACTIVE_STATUSES

#: Column order of the jobs table.
COLUMNS = ("id", "type", "name", "status", "progress", "step", "metric", "eta", "started", "duration", "submitted_by")

REFRESH_S = 2.0  # how often the Jobs page refreshes while something is queued or running


# -- formatting ---------------------------------------------------------------------------------

def format_duration(seconds):
    """A duration for people: "45s", "12m 05s", "3h 07m", "2d 04h"; "" for None."""
    if seconds is None:
        return ""
    seconds = int(max(0, round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m {seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h {minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours:02d}h"


def format_time(ts):
    """A unix time as local "YYYY-MM-DD HH:MM:SS"; "" for None."""
    if ts is None:
        return ""
    return datetime.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def format_number(value):
    """A metric value, short: 4 significant digits."""
    return f"{value:.4g}"


def type_short(train_type):
    """The short name of a training type ("GRPO"), or the key itself for a type this version lacks."""
    t = registry.TYPES.get(train_type)
    return t.short if t else train_type


def submitted_by(job):
    """"user@host" of a job."""
    return f"{job.user}@{job.host}" if job.host else job.user


def whoami():
    """"user@host" of this dashboard process."""
    try:
        user = getpass.getuser()
    except (OSError, KeyError):
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


def job_label(job):
    """How a job reads in a selector: "12 — grpo-20260102-1530"."""
    return f"{job.id} — {job.name}" if job.name else str(job.id)


def gpu_line(g):
    """One GPU for the sidebar: "GPU 0 · NVIDIA H200 · 1.2 / 139.8 GiB · 35%"."""
    gib = 1024 ** 3
    util = "" if g.utilization is None else f" · {g.utilization}%"
    return f"GPU {g.index} · {g.name} · {g.memory_used / gib:.1f} / {g.memory_total / gib:.1f} GiB{util}"


def needs_refresh(counts):
    """True while any job is queued or running (`counts`: status -> number, as JobStore.counts gives)."""
    return any(counts.get(status, 0) for status in ACTIVE_STATUSES)


def parse_job_id(text):
    """A job id from a query parameter -> (id, None) or (None, message for the user)."""
    if text is None or str(text).strip() == "":
        return None, None
    text = str(text).strip()
    if not text.isdigit():
        return None, f"'{text}' is not a job id (a job id is a whole number)."
    return int(text), None


# -- progress -----------------------------------------------------------------------------------

def job_epochs(job):
    """The job's epoch count from its params (RL log lines do not print it), or None."""
    try:
        return int(str(job.params.get("epochs", "")).strip())
    except ValueError:
        return None


RECENT_RECORDS = 200  # records kept per running job: the latest loss and reward are among them


class _Tracked:
    """A running job's parser and its latest records."""

    def __init__(self, path):
        self.parser = logparse.LogParser(path)
        self.recent = deque(maxlen=RECENT_RECORDS)

    def read(self):
        """Parse what was appended since the last read; return the latest records."""
        before = len(self.parser)
        self.parser.update()
        if self.parser.restarted:  # the file was truncated or replaced: update() read it from the start
            self.recent.clear()
            before = 0
        # Only the records that can stay in `recent` become dicts: a long log's first read stays cheap.
        self.recent.extend(self.parser.records_from(max(before, len(self.parser) - RECENT_RECORDS)))
        return list(self.recent)


def final_progress(job, records=None):
    """`logparse.progress` of a job that has ended (no ETA), from `records` or else its whole log.

    The runner stores this in the job's row when the job ends; the Jobs table shows it.
    """
    if records is None:
        records = _Tracked(job.log_path).read() if job.log_path else []
    result = logparse.progress(records, total_epochs=job_epochs(job))
    result["eta_s"] = None  # it has ended
    return result


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
        self._final = {}  # (log path, ended_at) -> progress dict of a finished job

    def __len__(self):
        return len(self._tracked) + len(self._final)

    def parser(self, log_path):
        """The parser kept for an active job's log, or None."""
        tracked = self._tracked.get(log_path)
        return tracked.parser if tracked else None

    def progress(self, job, now=None):
        """`logparse.progress` of one job (see there for the keys), from its log."""
        if not job.log_path:
            return logparse.progress([])
        if job.active:
            with self._lock:
                tracked = self._tracked.get(job.log_path)
                if tracked is None:
                    tracked = self._tracked[job.log_path] = _Tracked(job.log_path)
                records = tracked.read()
            return logparse.progress(records, started_at=job.started_at, now=now, total_epochs=job_epochs(job))
        if job.final_progress is not None:  # stored by the runner when the job ended: no log to read
            with self._lock:
                self._tracked.pop(job.log_path, None)
            return job.final_progress
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


def metric_text(prog):
    """The latest loss or reward: "Reward 0.5123" (reward first: it is what RL runs watch), or ""."""
    if prog.get("reward") is not None:
        return f"{prog['reward_name']} {format_number(prog['reward'])}"
    if prog.get("loss") is not None:
        return f"{prog['loss_name']} {format_number(prog['loss'])}"
    return ""


def job_row(job, prog, now=None):
    """One row of the jobs table (a dict keyed by COLUMNS)."""
    now = time.time() if now is None else now
    duration = None
    if job.started_at is not None:
        duration = (job.ended_at if job.ended_at is not None else now) - job.started_at
    step = f"{prog['step']}/{prog['total']}" if prog.get("total") else ""
    return {
        "id": job.id,
        "type": type_short(job.train_type),
        "name": job.name,
        "status": job.status,
        # A job that succeeded is done even when its last log line came before the last step.
        "progress": 100.0 if job.status == "succeeded" else round(prog.get("percent") or 0.0, 1),
        "step": step,
        "metric": metric_text(prog),
        "eta": format_duration(prog.get("eta_s")) if job.status == "running" else "",
        "started": format_time(job.started_at),
        "duration": format_duration(duration),
        "submitted_by": submitted_by(job),
    }


def job_rows(jobs, cache, now=None):
    """The jobs table's rows, in the order given."""
    now = time.time() if now is None else now
    return [job_row(job, cache.progress(job, now), now) for job in jobs]


def params_rows(job):
    """A job's parameters as [{"parameter", "value"}] for a table, in the type's command-line order
    (then anything else the job stored)."""
    t = registry.TYPES.get(job.train_type)
    order = list(t.names) if t else []
    names = [n for n in order if n in job.params] + sorted(n for n in job.params if n not in order)
    rows = []
    for name in names:
        value = job.params[name]
        if isinstance(value, (list, tuple)):
            value = ",".join(str(v) for v in value)
        rows.append({"parameter": name, "value": "" if value is None else str(value)})
    return rows


# -- actions ------------------------------------------------------------------------------------
# Each returns an Outcome the page shows as it is (kind: success / info / warning / error).

@dataclass(frozen=True)
class Outcome:
    """The result of an action on a job, as a message for the user."""
    kind: str
    message: str
    job_id: int | None = None  # the job the page should select next (a resumed job's new id)


def stop_job(store, job_id):
    """Ask a job to stop (the page's Stop button)."""
    try:
        if backends.stop(store, job_id):
            return Outcome("info", f"Stopping job {job_id}: it gets SIGTERM (and saves its resume state), "
                                   f"then SIGKILL if it has not ended after the grace period.")
        return Outcome("warning", f"Job {job_id} had already finished.")
    except KeyError:
        return Outcome("error", f"There is no job with id {job_id}.")
    except (ValueError, OSError) as exc:
        return Outcome("error", f"Could not stop job {job_id}: {exc}")


def delete_refusal(store, job_id):
    """Why a job cannot be deleted now, or None when it can (asked before the confirmation step)."""
    job = store.get(job_id)
    if job is None:
        return f"There is no job with id {job_id}."
    if job.active:
        return f"Job {job_id} is {job.status}: stop it before deleting it."
    return None


def delete_job(store, job_id, cache=None):
    """Delete a finished job and its log (after the user confirmed); refused while it runs."""
    job = store.get(job_id)
    if job is None:
        return Outcome("error", f"There is no job with id {job_id}.")
    try:
        runner.delete(store, job_id)
    except runner.JobRunningError as exc:
        return Outcome("error", f"Not deleted: {exc}.")
    except (KeyError, OSError) as exc:
        return Outcome("error", f"Could not delete job {job_id}: {exc}")
    if cache is not None:
        cache.forget(job.log_path)
    return Outcome("success", f"Deleted job {job_id} and its log.")


def resume_job(store, job_id, gpu_count):
    """Start a new job with the same parameters and from_resume=1 (the page's Resume button)."""
    job = store.get(job_id)
    if job is None:
        return Outcome("error", f"There is no job with id {job_id}.")
    if job.active:
        return Outcome("error", f"Job {job_id} is {job.status}: it can be resumed once it has ended.")
    try:
        new_id = forms.resume(store, job, gpu_count)
    except forms.LaunchRefused as exc:
        return Outcome("error", "Resume refused:\n" + "\n".join(f"- {reason}" for reason in exc.reasons))
    except (KeyError, ValueError, OSError) as exc:
        return Outcome("error", f"Could not resume job {job_id}: {exc}")
    return Outcome("success", f"Started job {new_id}, resuming job {job_id} from its last checkpoint.", new_id)


def clone_request(job):
    """What the Train page needs to open prefilled with a job (stored under forms.CLONE_KEY)."""
    return {"train_type": job.train_type, "params": dict(job.params), "job_id": job.id, "name": job.name}
