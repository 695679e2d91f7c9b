"""Logs: charts of every metric in one or more training logs (jobs, files in the logs folder, records
folders of command-line runs, or an uploaded log), smoothed and overlaid for comparison, with CSV
export and the end of each log. Runs with structured records also get RL charts, health checks and
the Rollouts view."""
import sqlite3
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from mmcore.access import audit, auth
from mmcore.actions import guard
from mmcore.base import i18n
from mmcore.base.i18n import t
from mmcore.base.safetext import md, md_lines
from mmcore.jobs import jobtable, progress, storeguard
from mmcore.jobs.jobstore import JobStore
from mmcore.logs import (
    charts,
    log_parser,
    logfiles,
    logheader,
    savedviews,
    tailview,
    urlstate,
)
from mmcore.runs import health, metric_stream, resumes, rlview, rollout_store
from mmcore.widgets import (
    livepage,
    navigation,
    queue_panel,
    rollouts_panel,
    views_panel,
)

navigation.ensure_app_navigation()

state = st.session_state
JOBS_KEY = "logs.jobs"
FILES_KEY = "logs.files"
FOLDERS_KEY = "logs.folders"
METRICS_KEY = "logs.metrics"
PARSERS_KEY = "logs.parsers"  # log path -> LogParser: each rerun reads only what was appended
SMOOTH_KEY = "logs.smoothing"
X_KEY = "logs.x_axis"
LOG_KEY = "logs.log_metrics"
TAIL_KEY = "logs.tail_lines"
FROM_KEY = "logs.x_from"
TO_KEY = "logs.x_to"
SMOOTHING_CHOICES = urlstate.LOGS["smooth"].choices

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
    parts: list = None  # [(job id, log path)] of a job and its resumes, oldest first

    @property
    def train_type(self):
        if self.job is not None:
            return self.job.train_type
        if self.run_dir is not None and metric_stream.has_rollouts(self.run_dir):
            return rollout_store.meta(self.run_dir).get("train_type")
        return None


def parser_for(path):
    """This session's parser of `path`, brought up to date (only new bytes are read)."""
    parsers = state.setdefault(PARSERS_KEY, {})
    parser = parsers.get(path)
    if parser is None:
        parser = parsers[path] = log_parser.LogParser(path)
    parser.update()
    return parser


st.title(t("logs.title"))
try:
    store = JobStore()
    jobs = {job.id: job for job in store.list(limit=JOB_LIMIT)}
    views = savedviews.ViewStore(store.path)
except (sqlite3.Error, RuntimeError, OSError) as exc:  # missing, damaged, locked or newer-schema database
    st.error(md(storeguard.explain(exc)))
    st.stop()

# -- what to chart ----------------------------------------------------------------------------------

resume_marks = []  # (global step, text) where a charted run was resumed
url_defaults = {}  # state key -> the default this run chose from the data (kept out of the URL)
# The URL holds the whole view (runs, metrics, smoothing, axes, ranges): a link shows what its sender saw.
user = auth.session_user(state)
if problem := savedviews.open_requested(state, st.query_params, views, user):
    st.warning(md(problem))
for problem in urlstate.apply("logs", state, st.query_params):
    st.warning(md(problem))
stage_ids, problem = queue_panel.pipeline_jobs(store, st.query_params.get("pipeline"))
if problem:
    st.error(md(problem))
elif stage_ids and state.get("logs.query_pipeline") != st.query_params.get("pipeline"):
    state[JOBS_KEY] = stage_ids  # a pipeline's link from Jobs charts all its stages
    state["logs.query_pipeline"] = st.query_params.get("pipeline")
for job_id in state.get(JOBS_KEY, []):  # chosen earlier or in a link, beyond the newest JOB_LIMIT
    if job_id not in jobs:
        if (job := store.get(job_id)) is not None:
            jobs[job_id] = job
        else:
            st.error(t("logs.no_such_job", id=job_id))
if JOBS_KEY in state:
    state[JOBS_KEY] = [i for i in state[JOBS_KEY] if i in jobs]

job_logs = {str(Path(job.log_path)) for job in jobs.values() if job.log_path}
log_files = sorted((p for p in store.logs_dir.glob("*.log") if str(p) not in job_logs),
                   key=lambda p: p.stat().st_mtime, reverse=True) if store.logs_dir.is_dir() else []
if FILES_KEY in state:
    state[FILES_KEY] = [name for name in state[FILES_KEY] if name in {p.name for p in log_files}]

job_dirs = [metric_stream.job_run_dir(job, store.home) for job in jobs.values()]
run_folders = metric_stream.list_run_dirs(store.home, exclude=job_dirs)
if FOLDERS_KEY in state:
    state[FOLDERS_KEY] = [name for name in state[FOLDERS_KEY] if name in {p.name for p in run_folders}]

sources = st.columns([3, 2, 2, 2])
chosen_jobs = sources[0].multiselect(
    t("logs.jobs"), list(jobs), key=JOBS_KEY, format_func=lambda i: jobtable.job_label(jobs[i]),
    placeholder=t("logs.jobs.placeholder"), help=t("logs.jobs.help"))
chosen_files = sources[1].multiselect(
    t("logs.files"), [p.name for p in log_files], key=FILES_KEY, placeholder=t("logs.files.placeholder"),
    help=t("logs.files.help", folder=store.logs_dir))
chosen_folders = sources[2].multiselect(
    t("logs.folders"), [p.name for p in run_folders], key=FOLDERS_KEY, placeholder=t("logs.folders.placeholder"),
    help=t("logs.folders.help", folder=metric_stream.records_dir(store.home)))
uploads = sources[3].file_uploader(
    t("logs.upload"), type=["log", "txt"], accept_multiple_files=True, key="logs.upload",
    help=t("logs.upload.help"))

views_panel.section(views, user, auth.session_role(state) == "admin", st.context.url or "")

# A job and its resumes are one run: one line, whichever of them was chosen.
lines = resumes.lineages(jobs.values(), store.home)
runs, charted = [], set()
for i in chosen_jobs:
    lineage = lines[i]
    if tuple(lineage) in charted:
        continue
    charted.add(tuple(lineage))
    last = jobs[lineage[-1]]
    label = jobtable.job_label(last) + (t("logs.resumed_from", ids=", ".join(map(str, lineage[:-1]))) if len(lineage) > 1 else "")
    runs.append(Run(label, last.log_path, last, metric_stream.job_run_dir(last, store.home),
                    parts=[(j, jobs[j].log_path) for j in lineage]))
runs += [Run(name, str(store.logs_dir / name)) for name in chosen_files]
runs += [Run(name, None, None, metric_stream.records_dir(store.home) / name) for name in chosen_folders]
for upload in uploads or []:
    try:
        path = logfiles.save_upload(upload.getvalue(), upload.name, folder=store.home / "uploads")
    except logfiles.UploadTooLarge as exc:
        st.error(md(exc))
        continue
    runs.append(Run(t("logs.uploaded", name=upload.name), str(path)))

seen = {}
for run in runs:  # legend names must differ, or two runs would share one curve
    seen[run.label] = seen.get(run.label, 0) + 1
    if seen[run.label] > 1:
        run.label = f"{run.label} ({seen[run.label]})"

if not runs:
    st.info(t("logs.choose") if jobs or log_files else t("logs.no_jobs"))
    urlstate.publish("logs", state, st.query_params, defaults=url_defaults)
    st.stop()

livepage.follow(paths=[run.path for run in runs if run.path]
                + [str(Path(run.run_dir) / metric_stream.METRICS_FILE) for run in runs if run.run_dir is not None],
                progress_s=FOLLOW_S)


# -- charts ------------------------------------------------------------------------------------------

def with_positions(df, run):
    """A log's table with one name per metric and, where the run has records, the samples, tokens
    and wall time of each step (so it can be charted against them too)."""
    df = charts.unify(df)
    if run.run_dir is not None and metric_stream.has_metrics(run.run_dir):
        positions = metric_stream.read(run.run_dir)
        extra = [c for c in ("samples", "tokens", "elapsed_s") if c in positions.columns and c not in df.columns]
        if extra and len(positions):
            df = df.merge(positions[["global_step", *extra]], on="global_step", how="left")
    return df


def read_runs():
    """Each run's table (incrementally read), with its notes, last error and summary line."""
    tables, types = {}, set()
    resume_marks.clear()
    for run in runs:
        if run.path is None:  # a records folder alone: chart its metrics stream
            df = metric_stream.read(run.run_dir)
            if len(df):
                tables[run.label] = charts.unify(df)
                types.add(run.train_type)
            continue
        try:
            parsers = [(job_id, parser_for(path)) for job_id, path in (run.parts or [(None, run.path)])]
        except OSError as exc:
            st.error(f"{md(run.label)}: " + t("logs.cannot_read", path=md(run.path), error=md(exc)))
            continue
        parser = parsers[-1][1]
        note = logfiles.explain(parser, run.label)
        if note is not None:
            getattr(st, note[0])(md_lines(note[1]))
        if parser.last_error:
            with st.expander(t("logs.last_error", run=md(run.label)), expanded=note is not None, icon=":material/error:"):
                st.code(parser.last_error, language=None)
        joined, marks = resumes.join([(job_id, p.frame()) for job_id, p in parsers if len(p)])
        if len(joined):
            tables[run.label] = with_positions(joined, run)
            resume_marks.extend((step, t("logs.resumed_as", id=job_id)) for step, job_id in marks)
            types.add((run.job.train_type if run.job else None) or parser.header.get("type"))
            first = int(parser.frame()["global_step"].iloc[0]) if len(parser) else None
            summary(run, joined, parser, resumes.start_step(run.job, first) if run.job is not None else 0)
    return tables, types


def show_runs():
    """Summaries, the chart controls, one chart per metric, and the CSV download."""
    tables, types = read_runs()
    if not tables:
        return
    train_type = types.pop() if len(types) == 1 else None
    names = charts.order_metrics(charts.chartable([m for df in tables.values() for m in charts.metric_columns(df)]),
                                 train_type)
    url_defaults[METRICS_KEY] = charts.default_metrics(names, train_type)  # left out of the URL
    if METRICS_KEY not in state:
        state[METRICS_KEY] = url_defaults[METRICS_KEY]
    else:
        state[METRICS_KEY] = [m for m in state[METRICS_KEY] if m in names]
    chosen = st.multiselect(t("logs.metrics"), names, key=METRICS_KEY, placeholder=t("logs.metrics.placeholder"),
                            format_func=charts.chart_title,
                            help=t("logs.metrics.help"))
    every, lacking = charts.comparable(tables)
    if len(tables) > 1 and lacking:
        st.info(t("logs.comparable", metrics=md(", ".join(every)) if every else t("logs.comparable.none"))
                + " · ".join(t("logs.lacking", metric=md(m), runs=md(", ".join(lacking[m]))) for m in chosen if m in lacking),
                icon=":material/compare_arrows:")

    x_options = charts.x_choices(tables)
    i18n.relabel(state, X_KEY)
    if state.get(X_KEY) not in x_options:
        state[X_KEY] = "step"
    if state.get(SMOOTH_KEY) not in SMOOTHING_CHOICES:
        state[SMOOTH_KEY] = "auto"
    state[LOG_KEY] = [m for m in state.get(LOG_KEY, []) if m in chosen]
    controls = st.columns([2.4, 1.3, 2, 1, 1, 1])
    smoothing = controls[0].select_slider(
        t("logs.smoothing"), SMOOTHING_CHOICES, key=SMOOTH_KEY,
        format_func=lambda v: t("logs.auto") if v == "auto" else f"{v:.2f}", help=t("logs.smoothing.help"))
    x = controls[1].selectbox(t("logs.x_axis"), x_options, key=X_KEY, format_func=lambda k: t(f"logs.x.{k}"),
                              help=t("logs.x_axis.help"))
    log_metrics = controls[2].multiselect(t("logs.log_scale"), chosen, key=LOG_KEY, format_func=charts.chart_title,
                                          placeholder=t("logs.log_scale.placeholder"),
                                          help=t("logs.log_scale.help"))
    x_from = controls[3].number_input(t("logs.from"), min_value=0, value=None, key=FROM_KEY, placeholder=t("logs.from.placeholder"),
                                      help=t("logs.from.help"))
    x_to = controls[4].number_input(t("logs.to"), min_value=0, value=None, key=TO_KEY, placeholder=t("logs.to.placeholder"),
                                    help=t("logs.to.help"))
    with controls[5]:
        with st.popover(t("logs.copy_link"), icon=":material/link:", help=t("logs.copy_link.help")):
            st.caption(t("logs.copy_link.caption"))
            st.code(view_link(), language=None, wrap_lines=True)
    if not chosen:
        st.info(t("logs.no_metric"))
    grid = st.columns(2)
    for i, metric in enumerate(chosen):
        with grid[i % 2]:
            low, high = state.get(f"logs.ylo.{metric}"), state.get(f"logs.yhi.{metric}")
            st.plotly_chart(charts.metric_figure(metric, tables, smoothing=smoothing, log_y=metric in log_metrics,
                                                 x=charts.X_CHOICES[x], x_range=(x_from, x_to), y_range=(low, high),
                                                 marks=resume_marks if x == "step" else ()),
                            key=f"logs.chart.{metric}", config={"displaylogo": False})
            with st.popover(t("logs.y_range"), icon=":material/height:"):
                st.number_input(t("logs.y_from"), value=None, key=f"logs.ylo.{metric}", format="%g", placeholder=t("logs.auto"))
                st.number_input(t("logs.y_to"), value=None, key=f"logs.yhi.{metric}", format="%g", placeholder=t("logs.auto"))

    # The CSV is built only when clicked: for a long log it costs more than the whole page.
    st.download_button(t("logs.csv"), lambda: charts.to_csv(tables), file_name=charts.csv_file_name(tables),
                       mime="text/csv", icon=":material/download:", key="logs.csv", on_click="ignore",
                       help=t("logs.csv.help"))


def view_link():
    """The address of this view (the page and its query parameters) for a teammate."""
    params = {k: v for k, v in st.query_params.to_dict().items() if k not in urlstate.LOGS}
    params.update(urlstate.encode(state, defaults=url_defaults))
    base = st.context.url or ""
    return base + ("?" + urllib.parse.urlencode(params, safe=",") if params else "")


def summary(run, df, parser, start_step=0):
    """One line per run: progress, latest loss/reward and, for running jobs, the ETA (counted from
    `start_step`, where a resumed job began)."""
    job = run.job
    prog = progress.summarize(
        df, start_step=start_step, started_at=job.started_at if job is not None and job.active else None,
        total_epochs=(progress.job_epochs(job) if job is not None else None)
        or logheader.epochs_from_command(parser.header.get("command")))
    parts = [f"**{md(run.label)}**", t("logs.step_of", step=f"{prog.step:,}", total=f"{prog.total:,}", percent=f"{prog.percent:.0f}")]
    if prog.loss is not None:
        parts.append(f"{prog.loss_name} {prog.loss:.4g}")
    if prog.reward is not None:
        parts.append(f"{prog.reward_name} {prog.reward:.4g}")
    if prog.eta_s is not None:
        parts.append(t("logs.eta", eta=jobtable.format_duration(prog.eta_s)))
    st.markdown(" · ".join(parts))


def show_records():
    """RL charts and health checks from the runs' metrics streams, then the Rollouts view."""
    for run in runs:
        lacks = rlview.missing_records(run.run_dir, run.train_type)
        if lacks:  # an old or uploaded log: charted from its lines, and it says what it lacks
            st.caption(f"{md(run.label)}: " + "; ".join(lacks) + ".")
    recorded = [run for run in runs if metric_stream.has_metrics(run.run_dir)]
    if not recorded:
        return
    settings = health.load_settings(store.home)
    frames = [(run.label, metric_stream.read(run.run_dir)) for run in recorded]
    for (label, df) in frames:
        for finding in health.evaluate(df, settings):
            st.warning(t("logs.finding", run=md(label), title=finding.title, step=finding.since_step, message=finding.message,
                         advice=finding.advice), icon=":material/health_and_safety:")
    panels = {}
    for _, df in frames:
        for panel, _cols in rlview.panels_for(df):
            panels.setdefault(panel.key, panel)
    if panels:
        st.subheader(t("logs.records"))
        i18n.relabel(state, "logs.rl.x")
        x = st.radio(t("logs.x_axis"), list(metric_stream.X_AXES), format_func=rlview.x_label, horizontal=True,
                     key="logs.rl.x", help=t("logs.records.x.help"))
        grid = st.columns(2)
        for i, panel in enumerate(panels.values()):
            with grid[i % 2]:
                event = st.plotly_chart(rlview.panel_figure(panel, frames, x=x), key=f"logs.rl.{panel.key}",
                                        on_select="rerun", selection_mode="points", config={"displaylogo": False})
                step = rlview.clicked_step(event)
                if step is not None and state.get(f"logs.rl.clicked.{panel.key}") != step:
                    state[f"logs.rl.clicked.{panel.key}"] = step
                    state[rollouts_panel.WANTED_KEY] = step  # open that step in the Rollouts view
    with st.expander(t("logs.thresholds"), icon=":material/tune:"):
        health_settings_form(settings)
    stored = [(run.label, run.run_dir) for run in recorded if metric_stream.has_rollouts(run.run_dir)]
    if stored:
        # its own fragment: choosing a step or a filter redraws only the Rollouts view
        st.fragment(rollouts_panel.show)(stored)


def health_settings_form(current):
    with st.form("logs.health.form", border=False):
        cols = st.columns(3)
        values = {}
        for i, (name, default) in enumerate(vars(current).items()):
            values[name] = cols[i % 3].number_input(
                t(f"health.label.{name}"), value=default, min_value=1 if name == "window" else 0.0,
                step=1 if name == "window" else 0.05, help=t(f"health.setting.{name}"), key=f"logs.health.{name}")
        user = auth.session_user(state)
        may_not = guard.refusal(user, "settings")  # shared thresholds: an admin's to change
        if may_not:
            st.caption(md(may_not))
        if st.form_submit_button(t("logs.thresholds.save"), disabled=bool(may_not)):
            try:
                health.save_settings(store.home, health.HealthSettings(**values))
            except (ValueError, OSError) as exc:  # a bad value is worded in this viewer's language
                st.error(t("logs.not_saved", error=md(exc)))
            else:
                audit.record(user, "settings", None, {"health": values}, home=store.home)
                st.success(t("logs.saved"))


def show_tails():
    for run in runs:
        if run.path is None:
            continue
        with st.expander(t("logs.tail_of", run=md(run.label)), expanded=len(runs) == 1):
            try:
                lines = logfiles.tail(run.path, state.get(TAIL_KEY, 200))
            except FileNotFoundError:
                st.caption(t("logs.no_log_file", path=md(run.path)))
            except OSError as exc:
                st.error(t("logs.cannot_read", path=md(run.path), error=md(exc)))
            else:
                st.html(tailview.tail_html(lines))


show_runs()
show_records()
st.subheader(t("logs.tail"))
state.setdefault(TAIL_KEY, 200)
st.selectbox(t("logs.tail_lines"), TAIL_CHOICES, key=TAIL_KEY, help=t("logs.tail_lines.help"))
show_tails()
urlstate.publish("logs", state, st.query_params, defaults=url_defaults)
