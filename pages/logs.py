"""Logs: charts of every metric in one or more training logs (jobs, files in the logs folder, records
folders of command-line runs, or an uploaded log), smoothed and overlaid for comparison, with CSV
export and the end of each log. Runs with structured records also get RL charts, health checks and
the Rollouts view."""
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from mmcore import (charts, health, jobtable, livepage, logparse, metrics, navigation, progress, rlview, rollouts,
                    rollouts_panel, storeguard)
from mmcore.store import JobStore

navigation.ensure_app_navigation()

state = st.session_state
JOBS_KEY = "logs.jobs"
FILES_KEY = "logs.files"
FOLDERS_KEY = "logs.folders"
METRICS_KEY = "logs.metrics"
PARSERS_KEY = "logs.parsers"  # log path -> LogParser: each rerun reads only what was appended
QUERY_KEY = "logs.query_job"  # the ?job= value already applied to the job selection
JOB_LIMIT = 200
TAIL_CHOICES = (50, 200, 1000)
FOLLOW_S = 2.0  # charts and tails follow a growing log at most this often


@dataclass
class Run:
    """One run to chart: its legend name, log file (None for a records folder alone), job (None for
    files, folders and uploads) and records folder (None when it has none)."""
    label: str
    path: str
    job: object = None
    run_dir: object = None

    @property
    def train_type(self):
        if self.job is not None:
            return self.job.train_type
        if self.run_dir is not None and metrics.has_rollouts(self.run_dir):
            return rollouts.meta(self.run_dir).get("train_type")
        return None


def parser_for(path):
    """This session's parser of `path`, brought up to date (only new bytes are read)."""
    parsers = state.setdefault(PARSERS_KEY, {})
    parser = parsers.get(path)
    if parser is None:
        parser = parsers[path] = logparse.LogParser(path)
    parser.update()
    return parser


st.title("Logs")
try:
    store = JobStore()
    jobs = {job.id: job for job in store.list(limit=JOB_LIMIT)}
except (sqlite3.Error, RuntimeError, OSError) as exc:  # missing, damaged, locked or newer-schema database
    st.error(storeguard.explain(exc))
    st.stop()

# -- what to chart ----------------------------------------------------------------------------------

wanted_id, problem = jobtable.parse_job_id(st.query_params.get("job"))
if problem:
    st.error(problem)
elif wanted_id is not None and state.get(QUERY_KEY) != wanted_id:
    job = jobs.get(wanted_id) or store.get(wanted_id)
    if job is None:
        st.error(f"There is no job with id {wanted_id}. It may have been deleted; choose logs below.")
    else:
        jobs.setdefault(job.id, job)
        state[JOBS_KEY] = [job.id]  # a link from the Jobs page shows that job
        state[QUERY_KEY] = wanted_id
for job_id in state.get(JOBS_KEY, []):  # chosen earlier, now beyond the newest JOB_LIMIT
    if job_id not in jobs and (job := store.get(job_id)) is not None:
        jobs[job_id] = job
if JOBS_KEY in state:
    state[JOBS_KEY] = [i for i in state[JOBS_KEY] if i in jobs]

job_logs = {str(Path(job.log_path)) for job in jobs.values() if job.log_path}
log_files = sorted((p for p in store.logs_dir.glob("*.log") if str(p) not in job_logs),
                   key=lambda p: p.stat().st_mtime, reverse=True) if store.logs_dir.is_dir() else []
if FILES_KEY in state:
    state[FILES_KEY] = [name for name in state[FILES_KEY] if name in {p.name for p in log_files}]

job_dirs = [metrics.job_run_dir(job, store.home) for job in jobs.values()]
run_folders = metrics.list_run_dirs(store.home, exclude=job_dirs)
if FOLDERS_KEY in state:
    state[FOLDERS_KEY] = [name for name in state[FOLDERS_KEY] if name in {p.name for p in run_folders}]

sources = st.columns([3, 2, 2, 2])
chosen_jobs = sources[0].multiselect(
    "Jobs", list(jobs), key=JOBS_KEY, format_func=lambda i: jobtable.job_label(jobs[i]),
    placeholder="Choose one or more jobs", help="The newest jobs of the job store; choose several to compare them.")
chosen_files = sources[1].multiselect(
    "Log files", [p.name for p in log_files], key=FILES_KEY, placeholder="Other logs in the logs folder",
    help=f"`.log` files in {store.logs_dir} that belong to no listed job.")
chosen_folders = sources[2].multiselect(
    "Run folders", [p.name for p in run_folders], key=FOLDERS_KEY, placeholder="Records of command-line runs",
    help=f"Structured records (metrics, rollouts) in {metrics.records_dir(store.home)} that belong to no listed job.")
uploads = sources[3].file_uploader(
    "Upload a log", type=["log", "txt"], accept_multiple_files=True, key="logs.upload",
    help="A log from elsewhere, e.g. an upstream MiniMind run's output.")

runs = [Run(jobtable.job_label(jobs[i]), jobs[i].log_path, jobs[i], metrics.job_run_dir(jobs[i], store.home))
        for i in chosen_jobs]
runs += [Run(name, str(store.logs_dir / name)) for name in chosen_files]
runs += [Run(name, None, None, metrics.records_dir(store.home) / name) for name in chosen_folders]
for upload in uploads or []:
    path = logparse.save_upload(upload.getvalue(), upload.name, folder=store.home / "uploads")
    runs.append(Run(f"{upload.name} (uploaded)", str(path)))

seen = {}
for run in runs:  # legend names must differ, or two runs would share one curve
    seen[run.label] = seen.get(run.label, 0) + 1
    if seen[run.label] > 1:
        run.label = f"{run.label} ({seen[run.label]})"

if not runs:
    st.info("Choose a job, a log file or upload a log to see its training curves."
            if jobs or log_files else "No jobs yet: launch one on the Train page, or upload a log.")
    st.stop()

controls = st.columns([3, 1.4, 1, 1])
smoothing = controls[0].slider("Smoothing", 0.0, 0.99, 0.6, 0.01, key="logs.smoothing",
                               help="Exponential moving average, as in TensorBoard; raw values are drawn faintly.")
log_y = controls[1].toggle("Log scale", key="logs.log_y", help="Logarithmic y axis (values <= 0 are not drawn).")
tail_lines = controls[2].selectbox("Tail lines", TAIL_CHOICES, index=1, key="logs.tail_lines")
with controls[3]:
    st.button("Refresh", key="logs.refresh", icon=":material/refresh:")
livepage.follow(paths=[run.path for run in runs if run.path]
                + [str(Path(run.run_dir) / metrics.METRICS_FILE) for run in runs if run.run_dir is not None],
                progress_s=FOLLOW_S)


# -- charts ------------------------------------------------------------------------------------------

def show_runs():
    """Read the logs (incrementally), then summaries, charts and the CSV download."""
    tables, types = {}, set()
    for run in runs:
        if run.path is None:  # a records folder alone: chart its metrics stream
            df = metrics.read(run.run_dir)
            if len(df):
                tables[run.label] = df.drop(columns=[c for c in ("samples", "tokens", "time", "elapsed_s")
                                                     if c in df.columns])
                types.add(run.train_type)
            continue
        try:
            parser = parser_for(run.path)
        except OSError as exc:
            st.error(f"{run.label}: cannot read {run.path}: {exc}")
            continue
        note = logparse.explain(parser, run.label)
        if note is not None:
            getattr(st, note[0])(note[1])
        if parser.last_error:
            with st.expander(f"{run.label}: last error", expanded=note is not None, icon=":material/error:"):
                st.code(parser.last_error, language=None)
        if len(parser):
            tables[run.label] = parser.frame()
            types.add((run.job.train_type if run.job else None) or parser.header.get("type"))
            summary(run, tables[run.label], parser)
    if not tables:
        return

    train_type = types.pop() if len(types) == 1 else None
    names = charts.order_metrics([m for df in tables.values() for m in charts.metric_columns(df)], train_type)
    if METRICS_KEY not in state:
        state[METRICS_KEY] = charts.default_metrics(names, train_type)
    else:
        state[METRICS_KEY] = [m for m in state[METRICS_KEY] if m in names]
    chosen = st.multiselect("Metrics", names, key=METRICS_KEY, placeholder="Choose metrics to chart",
                            help="Loss and reward first; every metric the logs printed can be charted.")
    if not chosen:
        st.info("No metric chosen: pick one or more above.")
    grid = st.columns(2)
    for i, metric in enumerate(chosen):
        with grid[i % 2]:
            st.plotly_chart(charts.metric_figure(metric, tables, smoothing=smoothing, log_y=log_y),
                            key=f"logs.chart.{metric}", config={"displaylogo": False})

    # The CSV is built only when clicked: for a long log it costs more than the whole page.
    st.download_button("Download CSV", lambda: charts.to_csv(tables), file_name="minimind-metrics.csv",
                       mime="text/csv", icon=":material/download:", key="logs.csv", on_click="ignore",
                       help="Every parsed record of the charted logs, one row per logged step, with a run column.")


def summary(run, df, parser):
    """One line per run: progress, latest loss/reward and, for running jobs, the ETA."""
    job = run.job
    prog = progress.summarize(
        df, started_at=job.started_at if job is not None and job.active else None,
        total_epochs=(progress.job_epochs(job) if job is not None else None)
        or logparse.epochs_from_command(parser.header.get("command")))
    parts = [f"**{run.label}**", f"step {prog.step:,} / {prog.total:,} ({prog.percent:.0f}%)"]
    if prog.loss is not None:
        parts.append(f"{prog.loss_name} {prog.loss:.4g}")
    if prog.reward is not None:
        parts.append(f"{prog.reward_name} {prog.reward:.4g}")
    if prog.eta_s is not None:
        parts.append(f"ETA {jobtable.format_duration(prog.eta_s)}")
    st.markdown(" · ".join(parts))


def show_records():
    """RL charts and health checks from the runs' metrics streams, then the Rollouts view."""
    for run in runs:
        lacks = rlview.missing_records(run.run_dir, run.train_type)
        if lacks:  # an old or uploaded log: charted from its lines, and it says what it lacks
            st.caption(f"{run.label}: " + "; ".join(lacks) + ".")
    recorded = [run for run in runs if metrics.has_metrics(run.run_dir)]
    if not recorded:
        return
    settings = health.load_settings(store.home)
    frames = [(run.label, metrics.read(run.run_dir)) for run in recorded]
    for (label, df) in frames:
        for finding in health.evaluate(df, settings):
            st.warning(f"**{label} · {finding.title}** since step {finding.since_step}: {finding.message} "
                       f"Try: {finding.advice}", icon=":material/health_and_safety:")
    panels = {}
    for _, df in frames:
        for panel, _cols in rlview.panels_for(df):
            panels.setdefault(panel.key, panel)
    if panels:
        st.subheader("Run records")
        x = st.radio("X axis", list(metrics.X_AXES), format_func=metrics.X_AXES.get, horizontal=True,
                     key="logs.rl.x", help="Samples seen or wall time compare runs of different batch sizes.")
        grid = st.columns(2)
        for i, panel in enumerate(panels.values()):
            with grid[i % 2]:
                event = st.plotly_chart(rlview.panel_figure(panel, frames, x=x), key=f"logs.rl.{panel.key}",
                                        on_select="rerun", selection_mode="points", config={"displaylogo": False})
                step = rlview.clicked_step(event)
                if step is not None and state.get(f"logs.rl.clicked.{panel.key}") != step:
                    state[f"logs.rl.clicked.{panel.key}"] = step
                    state[rollouts_panel.WANTED_KEY] = step  # open that step in the Rollouts view
    with st.expander("Health check thresholds", icon=":material/tune:"):
        health_settings_form(settings)
    stored = [(run.label, run.run_dir) for run in recorded if metrics.has_rollouts(run.run_dir)]
    if stored:
        # its own fragment: choosing a step or a filter redraws only the Rollouts view
        st.fragment(rollouts_panel.show)(stored)


def health_settings_form(current):
    with st.form("logs.health.form", border=False):
        cols = st.columns(3)
        values = {}
        for i, (name, default) in enumerate(vars(current).items()):
            values[name] = cols[i % 3].number_input(
                name, value=default, min_value=1 if name == "window" else 0.0,
                step=1 if name == "window" else 0.05, help=health.HealthSettings.HELP[name], key=f"logs.health.{name}")
        if st.form_submit_button("Save thresholds"):
            try:
                health.save_settings(store.home, health.HealthSettings(**values))
            except ValueError as exc:
                st.error(f"Not saved: {exc}")
            else:
                st.success("Saved: the Jobs and Logs pages of every viewer use these thresholds.")


def show_tails():
    for run in runs:
        if run.path is None:
            continue
        with st.expander(f"Log tail: {run.label}", expanded=len(runs) == 1):
            try:
                lines = logparse.tail(run.path, tail_lines)
            except FileNotFoundError:
                st.caption(f"No log file at {run.path}.")
            except OSError as exc:
                st.error(f"Cannot read {run.path}: {exc}")
            else:
                st.code("\n".join(lines) or "(empty)", language=None, height=400)


show_runs()
show_records()
st.subheader("Log tail")
show_tails()
