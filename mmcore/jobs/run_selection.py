"""The Logs page's runs, without Streamlit: which runs to chart and what each one reads as.

A run is a job with its resumes (one line however often it was resumed), a log file in the logs
folder that is no job's, a records folder of a command-line run, or an uploaded log:

- `Run`: one run to chart (its legend name, log file, job, records folder and, for a job, the logs
  of its lineage);
- `with_chosen_jobs`, `loose_logs`, `loose_folders`, `still_there`: what can be chosen;
- `chosen_runs`, `distinct_labels`, `followed_paths`: the runs of a choice, each with its own legend
  name, and the files a live page follows for them;
- `updated_parser`, `updated_stream`: log parsers and metrics readers kept across reads, each brought
  up to date (only appended bytes are read);
- `read_run` -> `Reading`: a run's table (with its samples, tokens and wall time where it has
  records), the note on its log, its last error, where it was resumed, and its progress;
- `summary_line`: the run's one-line summary (progress, latest loss and reward, ETA).

It lives in the jobs wing because a run is mostly a job: it needs the job labels and progress of
this wing and the records of `mmcore.runs` (the logs wing may import neither).
"""
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mmcore.base.i18n import t
from mmcore.base.safetext import md
from mmcore.jobs import jobtable, progress
from mmcore.logs import charts, log_parser, logfiles, logheader
from mmcore.runs import metric_stream, resumes, rollout_store

POSITIONS = ("samples", "tokens", "elapsed_s")  # what a records folder adds to a log's steps


@dataclass
class Run:
    """One run to chart: its legend name, log file (None for a records folder alone), job (None for
    files, folders and uploads) and records folder (None when it has none)."""
    label: str
    path: str
    job: object = None
    run_dir: object = None
    parts: list = None  # [(job id, log path)] of a job and its resumes, oldest first

    @property
    def train_type(self):
        if self.job is not None:
            return self.job.train_type
        if self.run_dir is not None and metric_stream.has_rollouts(self.run_dir):
            return rollout_store.meta(self.run_dir).get("train_type")
        return None


# -- what can be chosen ------------------------------------------------------------------------------

def with_chosen_jobs(store, jobs, chosen):
    """Adds to `jobs` ({id: job}, the newest ones) the `chosen` ids beyond them, read from `store`;
    returns the chosen ids that are no job (in their order)."""
    missing = []
    for job_id in chosen:
        if job_id not in jobs:
            if (job := store.get(job_id)) is not None:
                jobs[job_id] = job
            else:
                missing.append(job_id)
    return missing


#: At most this many running jobs are charted when none is chosen (a busy GPU box runs many at once).
DEFAULT_RUNNING = 4


def default_jobs(jobs):
    """The jobs Logs charts when nothing is chosen (opened from the sidebar): those running now, newest
    first, else the one that started last; [] when none has started."""
    running = sorted((i for i, job in jobs.items() if job.status == "running"), reverse=True)
    if running:
        return running[:DEFAULT_RUNNING]
    started = [(job.started_at, i) for i, job in jobs.items() if job.started_at]
    return [max(started)[1]] if started else []


def loose_logs(logs_dir, jobs):
    """The `*.log` files in `logs_dir` that are none of `jobs`' logs, newest first."""
    logs_dir = Path(logs_dir)
    if not logs_dir.is_dir():
        return []
    job_logs = {str(Path(job.log_path)) for job in jobs.values() if job.log_path}
    return sorted((p for p in logs_dir.glob("*.log") if str(p) not in job_logs),
                  key=lambda p: p.stat().st_mtime, reverse=True)


def loose_folders(home, jobs):
    """The records folders under `home` that are none of `jobs`' (those of command-line runs)."""
    return metric_stream.list_run_dirs(home, exclude=[metric_stream.job_run_dir(job, home) for job in jobs.values()])


def still_there(chosen, paths):
    """The `chosen` names that are still names of `paths` (a file or folder may have gone since)."""
    names = {p.name for p in paths}
    return [name for name in chosen if name in names]


# -- the runs of a choice ----------------------------------------------------------------------------

def chosen_runs(jobs, chosen_jobs=(), chosen_files=(), chosen_folders=(), *, home, logs_dir):
    """The runs of the chosen job ids, log file names and records folder names, in that order.

    A job and its resumes are one run, whichever of them was chosen: the newest of the lineage names
    it and the logs of all of them are its parts."""
    lines = resumes.lineages(jobs.values(), home)
    runs, charted = [], set()
    for i in chosen_jobs:
        lineage = lines[i]
        if tuple(lineage) in charted:
            continue
        charted.add(tuple(lineage))
        last = jobs[lineage[-1]]
        label = jobtable.job_label(last) + (t("logs.resumed_from", ids=", ".join(map(str, lineage[:-1])))
                                            if len(lineage) > 1 else "")
        runs.append(Run(label, last.log_path, last, metric_stream.job_run_dir(last, home),
                        parts=[(j, jobs[j].log_path) for j in lineage]))
    runs += [Run(name, str(Path(logs_dir) / name)) for name in chosen_files]
    runs += [Run(name, None, None, metric_stream.records_dir(home) / name) for name in chosen_folders]
    return runs


def distinct_labels(runs):
    """Numbers repeated legend names ("a", "a (2)"): two runs must not share one curve. Returns `runs`."""
    seen = {}
    for run in runs:
        seen[run.label] = seen.get(run.label, 0) + 1
        if seen[run.label] > 1:
            run.label = f"{run.label} ({seen[run.label]})"
    return runs


def followed_paths(runs):
    """The files that change while the runs are written: their logs and metrics streams."""
    return ([run.path for run in runs if run.path]
            + [str(Path(run.run_dir) / metric_stream.METRICS_FILE) for run in runs if run.run_dir is not None])


def recorded(runs):
    """The runs with a metrics stream."""
    return [run for run in runs if metric_stream.has_metrics(run.run_dir)]


def with_rollouts(runs):
    """[(label, records folder)] of the runs with a metrics stream and a rollout store."""
    return [(run.label, run.run_dir) for run in recorded(runs) if metric_stream.has_rollouts(run.run_dir)]


# -- reading a run -----------------------------------------------------------------------------------

def updated_parser(parsers, path):
    """The parser of `path` in `parsers` ({path: LogParser}, one session's), made when missing, and
    brought up to date: only the bytes appended since its last update are read. Raises OSError."""
    parser = parsers.get(path)
    if parser is None:
        parser = parsers[path] = log_parser.LogParser(path)
    parser.update()
    return parser


def updated_stream(streams, run_dir):
    """The metrics reader of the records folder `run_dir` in `streams` ({folder: MetricsReader}, kept
    like `updated_parser`'s parsers), made when missing, and brought up to date: only the lines
    appended since its last update are read."""
    reader = streams.get(str(run_dir))
    if reader is None:
        reader = streams[str(run_dir)] = metric_stream.MetricsReader(run_dir)
    reader.update()
    return reader


def with_positions(df, positions=None):
    """A log's table with one name per metric and, where the run has records (`positions`: its metrics
    frame), the samples, tokens and wall time of each step (so it can be charted against them too)."""
    df = charts.unify(df)
    if positions is None or not len(positions):
        return df
    extra = [c for c in POSITIONS if c in positions.columns and c not in df.columns]
    if not extra:
        return df
    steps, known = df["global_step"].to_numpy(), positions["global_step"].to_numpy()
    if steps.dtype != np.int64 or known.dtype != np.int64:
        return df.merge(positions[["global_step", *extra]], on="global_step", how="left")
    # The metrics frame holds each step once, in order: a lookup by binary search is the left join.
    at = np.minimum(np.searchsorted(known, steps), len(known) - 1)
    found = known[at] == steps
    added = {}
    for column in extra:
        values = positions[column].to_numpy()[at]
        if not found.all():
            values = np.where(found, values, np.nan)
        added[column] = values
    return df.assign(**added)


@dataclass
class Reading:
    """What one run reads as. `table` is None when it has no rows yet; `problem` (markdown) says why
    its log could not be read; `note` is logfiles.explain's (kind, text) or None; `marks` are
    [(global step, text)] where it was resumed; `progress` is None for a records folder alone."""
    run: Run
    table: object = None
    train_type: str = None
    problem: str = None
    note: tuple = None
    last_error: str = None
    marks: list = field(default_factory=list)
    progress: object = None


def read_run(run, parsers, now=None, streams=None):
    """`run` read through `parsers` (see `updated_parser`) and `streams` (see `updated_stream`; None:
    its records are read whole): a records folder alone is charted from its metrics stream; a log (a
    job's joined with its resumes') from its progress lines, with the positions of its records."""
    reading = Reading(run)
    streams = {} if streams is None else streams
    if run.path is None:
        df = updated_stream(streams, run.run_dir).frame()
        if len(df):
            reading.table, reading.train_type = charts.unify(df), run.train_type
        return reading
    try:
        logs = [(job_id, updated_parser(parsers, path)) for job_id, path in (run.parts or [(None, run.path)])]
    except OSError as exc:
        reading.problem = f"{md(run.label)}: " + t("logs.cannot_read", path=md(run.path), error=md(exc))
        return reading
    parser = logs[-1][1]
    reading.note = logfiles.explain(parser, run.label)
    reading.last_error = parser.last_error
    # The parsers' own arrays (shared, never changed): a log read on is not copied whole at each change.
    parts = [(job_id, p.frame(copy=False)) for job_id, p in logs if len(p)]
    joined, marks = (parts[0][1], []) if len(parts) == 1 else resumes.join(parts)
    if len(joined):
        recorded = run.run_dir is not None and metric_stream.has_metrics(run.run_dir)
        reading.table = with_positions(joined, updated_stream(streams, run.run_dir).frame() if recorded else None)
        reading.marks = [(step, t("logs.resumed_as", id=job_id)) for step, job_id in marks]
        reading.train_type = (run.job.train_type if run.job else None) or parser.header.get("type")
        first = parser.first_step
        start = resumes.start_step(run.job, first) if run.job is not None else 0
        reading.progress = run_progress(run, joined, parser, start, now=now)
    return reading


def run_progress(run, df, parser, start_step=0, now=None):
    """The run's progress; for a running job with its ETA, counted from `start_step` (where a resumed
    job began)."""
    job = run.job
    return progress.summarize(
        df, start_step=start_step, started_at=job.started_at if job is not None and job.active else None, now=now,
        total_epochs=(progress.job_epochs(job) if job is not None else None)
        or logheader.epochs_from_command(parser.header.get("command")))


def summary_parts(prog):
    """The parts of a run's summary after its name, as plain text: step, latest loss and reward and,
    while it runs, the ETA."""
    parts = [t("logs.step_of", step=f"{prog.step:,}", total=f"{prog.total:,}", percent=f"{prog.percent:.0f}")]
    if prog.loss is not None:
        parts.append(f"{jobtable.metric_name(prog.loss_name)} {prog.loss:.4g}")
    if prog.reward is not None:
        parts.append(f"{jobtable.metric_name(prog.reward_name)} {prog.reward:.4g}")
    if prog.eta_s is not None:
        parts.append(t("logs.eta", eta=jobtable.format_duration(prog.eta_s)))
    return parts


def summary_line(label, prog):
    """One markdown line: the run's name, then its `summary_parts`."""
    return " · ".join([f"**{md(label)}**"] + summary_parts(prog))
