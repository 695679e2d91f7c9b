"""The jobs table and how jobs read: rows, durations, times, labels, URL job ids.

Plain functions the Jobs and Logs pages and the sidebar share. A row's progress comes from
`mmcore.progress.ProgressCache`, which reads only what changed since the last refresh.
"""
import datetime
import getpass
import os
import socket
import time
import zlib

from mmcore import registry
from mmcore.jobrow import ACTIVE_STATUSES

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


def selector_key(prefix, ids, selected):
    """A widget key that changes with a selector's options and its selection (`prefix.<digest>`)."""
    digest = zlib.crc32(repr((list(ids), selected)).encode())
    return f"{prefix}.{digest:08x}"


def parse_job_id(text):
    """A job id from a query parameter -> (id, None) or (None, message for the user)."""
    if text is None or str(text).strip() == "":
        return None, None
    text = str(text).strip()
    if not text.isdigit():
        return None, f"'{text}' is not a job id (a job id is a whole number)."
    return int(text), None


def job_row(job, prog, now=None):
    """One row of the jobs table (a dict keyed by COLUMNS); `prog` is the job's progress.Progress."""
    now = time.time() if now is None else now
    duration = None
    if job.started_at is not None:
        duration = (job.ended_at if job.ended_at is not None else now) - job.started_at
    step = f"{prog.step}/{prog.total}" if prog.total else ""
    return {
        "id": job.id,
        "type": type_short(job.train_type),
        "name": job.name,
        "status": job.status,
        # A job that succeeded is done even when its last log line came before the last step.
        "progress": 100.0 if job.status == "succeeded" else round(prog.percent or 0.0, 1),
        "step": step,
        "metric": prog.latest_metric_text(),
        "eta": format_duration(prog.eta_s) if job.status == "running" else "",
        "started": format_started(job.started_at, now),
        "duration": format_duration(duration),
        "submitted_by": submitted_by(job),
    }


# Pixels per character and around the text of a cell, in Streamlit's table font (13-14 px sans).
CHAR_PX = 7.5
CELL_PAD_PX = 24
# Columns whose width follows their longest text, so that nothing is cut: (column, min px, max px).
FITTED_COLUMNS = (("name", 90, 360), ("metric", 90, 200), ("started", 90, 160), ("submitted_by", 80, 200),
                  ("step", 50, 120), ("type", 50, 110), ("status", 70, 110))


def fitted_widths(rows, headers):
    """Pixel widths of the table's text columns that fit their longest cell or header (within each
    column's bounds): column -> px. `headers`: column -> header text as shown."""
    widths = {}
    for column, low, high in FITTED_COLUMNS:
        longest = max([len(str(row.get(column) or "")) for row in rows] + [len(headers.get(column, column))])
        widths[column] = int(min(high, max(low, longest * CHAR_PX + CELL_PAD_PX)))
    return widths


def format_started(ts, now=None):
    """A start time, short: "17:39" today, "12-02 17:39" this year, "2025-12-02 17:39" before; "" for None."""
    if ts is None:
        return ""
    when = datetime.datetime.fromtimestamp(ts)
    today = datetime.datetime.fromtimestamp(time.time() if now is None else now)
    if when.date() == today.date():
        return when.strftime("%H:%M")
    return when.strftime("%m-%d %H:%M" if when.year == today.year else "%Y-%m-%d %H:%M")


def job_rows(jobs, cache, now=None):
    """The jobs table's rows, in the order given; `cache` is a progress.ProgressCache."""
    now = time.time() if now is None else now
    return [job_row(job, cache.progress(job, now), now) for job in jobs]


def mark_resumes(rows, parents):
    """Rows whose job resumed another ({job id: resumed job's id}) read "↳ name (resumes 12)"."""
    for row in rows:
        if row["id"] in parents:
            row["name"] = f"↳ {row['name']} (resumes {parents[row['id']]})"
    return rows


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
