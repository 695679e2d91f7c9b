"""The jobs table and how jobs read: rows, durations, times, labels, URL job ids, the columns shown, the
table as CSV. Its HTML (whole, in parts, or live) is `mmcore.jobs.htmltable`.

Plain functions the Jobs and Logs pages and the sidebar share. A row's progress comes from
`mmcore.jobs.progress.ProgressCache`, which reads only what changed since the last refresh.
"""
import csv
import datetime
import getpass
import io
import os
import re
import socket
import time
import zlib

from mmcore.base import i18n
from mmcore.jobs.jobrow import ACTIVE_STATUSES
from mmcore.train import train_types

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
    """The short name of a job's type in the viewer's language ("GRPO", "预训练", "导出" for an export
    job), or the key itself for a type this version lacks."""
    t = train_types.TYPES.get(train_type)
    if t:
        return t.short_label
    key = f"type.short.{train_type}"  # the jobs that are not training: export, evaluate
    return i18n.t(key) if key in i18n.table(i18n.DEFAULT) else train_type


def metric_text(prog, digits=4):
    """The latest reward (first: it is what RL runs watch) or loss, named in the viewer's language:
    "Reward 0.5123", "奖励 0.5123"; "" when the log has printed neither."""
    if prog.reward is not None:
        name, value = prog.reward_name, prog.reward
    elif prog.loss is not None:
        name, value = prog.loss_name, prog.loss
    else:
        return ""
    return f"{metric_name(name)} {value:.{digits}g}"


def metric_name(name):
    """A loss's or reward's printed name ("Actor Loss") in the viewer's language; unknown names as printed."""
    key = "metric.name." + re.sub(r"\W+", "_", str(name).strip().lower())  # "Actor Loss" -> actor_loss
    return i18n.t(key) if key in i18n.table(i18n.DEFAULT) else name


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
        "metric": metric_text(prog),
        "eta": format_duration(prog.eta_s) if job.status == "running" else "",
        "started": format_started(job.started_at, now),
        "duration": format_duration(duration),
        "submitted_by": submitted_by(job),
    }


def shown_columns(rows, columns):
    """The columns worth a place on the page: "submitted_by" only when the rows were submitted by more
    than one user@host (the selected job's details say who submitted it), "tags" only when a row has tags;
    the CSV keeps every column."""
    if "submitted_by" in columns and len({row.get("submitted_by") for row in rows}) <= 1:
        columns = [c for c in columns if c != "submitted_by"]
    if "tags" in columns and not any(row.get("tags") for row in rows):
        columns = [c for c in columns if c != "tags"]
    return list(columns)


def rows_csv(rows, columns, headers):
    """The table as CSV text (header row as shown; a trend as its values joined by spaces)."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow([headers.get(c, c) for c in columns])
    for row in rows:
        writer.writerow([" ".join(f"{v:.6g}" for v in row.get(c) or ()) if c == "trend" else row.get(c, "")
                         for c in columns])
    return out.getvalue()


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
    t = train_types.TYPES.get(job.train_type)
    order = list(t.names) if t else []
    names = [n for n in order if n in job.params] + sorted(n for n in job.params if n not in order)
    rows = []
    for name in names:
        value = job.params[name]
        if isinstance(value, (list, tuple)):
            value = ",".join(str(v) for v in value)
        rows.append({"parameter": name, "value": "" if value is None else str(value)})
    return rows
