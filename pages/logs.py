"""Logs: charts of every metric in one or more training logs (jobs, files in the logs folder, records
folders of command-line runs, or an uploaded log), smoothed and overlaid for comparison, with CSV
export and the end of each log. Runs with structured records also get RL charts, health checks and
the Rollouts view."""
import sqlite3
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from mmcore import (charts, health, jobtable, livepage, logfiles, logheader, logparse, metrics, navigation, progress,
                    queueui, resumes, rlview, rollouts, storeguard, tailview, urlstate)
from mmcore.safetext import md, md_lines
from mmcore.store import JobStore

navigation.ensure_app_navigation()

state = st.session_state
JOBS_KEY = "logs.jobs"
FILES_KEY = "logs.files"
FOLDERS_KEY = "logs.folders"
STEP_KEY = "logs.rollouts.step"
METRICS_KEY = "logs.metrics"
PARSERS_KEY = "logs.parsers"  # log path -> LogParser: each rerun reads only what was appended
SMOOTH_KEY = "logs.smoothing"
X_KEY = "logs.x_axis"
LOG_KEY = "logs.log_metrics"
TAIL_KEY = "logs.tail_lines"
FROM_KEY = "logs.x_from"
TO_KEY = "logs.x_to"
SMOOTHING_CHOICES = urlstate.LOGS["smooth"].choices
X_LABELS = {"step": "Step", "samples": "Samples seen", "tokens": "Tokens seen", "time": "Wall time"}
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
    st.error(md(storeguard.explain(exc)))
    st.stop()

# -- what to chart ----------------------------------------------------------------------------------

resume_marks = []  # (global step, text) where a charted run was resumed
url_defaults = {}  # state key -> the default this run chose from the data (kept out of the URL)
# The URL holds the whole view (runs, metrics, smoothing, axes, ranges): a link shows what its sender saw.
for problem in urlstate.apply("logs", state, st.query_params):
    st.warning(md(problem))
stage_ids, problem = queueui.pipeline_jobs(store, st.query_params.get("pipeline"))
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
            st.error(f"There is no job with id {job_id}. It may have been deleted; choose logs below.")
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

# A job and its resumes are one run: one line, whichever of them was chosen.
lines = resumes.lineages(jobs.values(), store.home)
runs, charted = [], set()
for i in chosen_jobs:
    lineage = lines[i]
    if tuple(lineage) in charted:
        continue
    charted.add(tuple(lineage))
    last = jobs[lineage[-1]]
    label = jobtable.job_label(last) + (f" (resumed from {', '.join(map(str, lineage[:-1]))})" if len(lineage) > 1 else "")
    runs.append(Run(label, last.log_path, last, metrics.job_run_dir(last, store.home),
                    parts=[(j, jobs[j].log_path) for j in lineage]))
runs += [Run(name, str(store.logs_dir / name)) for name in chosen_files]
runs += [Run(name, None, None, metrics.records_dir(store.home) / name) for name in chosen_folders]
for upload in uploads or []:
    try:
        path = logfiles.save_upload(upload.getvalue(), upload.name, folder=store.home / "uploads")
    except logfiles.UploadTooLarge as exc:
        st.error(md(exc))
        continue
    runs.append(Run(f"{upload.name} (uploaded)", str(path)))

seen = {}
for run in runs:  # legend names must differ, or two runs would share one curve
    seen[run.label] = seen.get(run.label, 0) + 1
    if seen[run.label] > 1:
        run.label = f"{run.label} ({seen[run.label]})"

if not runs:
    st.info("Choose a job, a log file or upload a log to see its training curves."
            if jobs or log_files else "No jobs yet: launch one on the Train page, or upload a log.")
    urlstate.publish("logs", state, st.query_params, defaults=url_defaults)
    st.stop()

livepage.follow(paths=[run.path for run in runs if run.path]
                + [str(Path(run.run_dir) / metrics.METRICS_FILE) for run in runs if run.run_dir is not None],
                progress_s=FOLLOW_S)


# -- charts ------------------------------------------------------------------------------------------

def with_positions(df, run):
    """A log's table with one name per metric and, where the run has records, the samples, tokens
    and wall time of each step (so it can be charted against them too)."""
    df = charts.unify(df)
    if run.run_dir is not None and metrics.has_metrics(run.run_dir):
        positions = metrics.read(run.run_dir)
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
            df = metrics.read(run.run_dir)
            if len(df):
                tables[run.label] = charts.unify(df)
                types.add(run.train_type)
            continue
        try:
            parsers = [(job_id, parser_for(path)) for job_id, path in (run.parts or [(None, run.path)])]
        except OSError as exc:
            st.error(f"{md(run.label)}: cannot read {md(run.path)}: {md(exc)}")
            continue
        parser = parsers[-1][1]
        note = logfiles.explain(parser, run.label)
        if note is not None:
            getattr(st, note[0])(md_lines(note[1]))
        if parser.last_error:
            with st.expander(f"{md(run.label)}: last error", expanded=note is not None, icon=":material/error:"):
                st.code(parser.last_error, language=None)
        joined, marks = resumes.join([(job_id, p.frame()) for job_id, p in parsers if len(p)])
        if len(joined):
            tables[run.label] = with_positions(joined, run)
            resume_marks.extend((step, f"resumed as job {job_id}") for step, job_id in marks)
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
    chosen = st.multiselect("Metrics", names, key=METRICS_KEY, placeholder="Choose metrics to chart",
                            format_func=charts.chart_title,
                            help="Loss and reward first; every metric the logs printed can be charted. The same "
                                 "quantity has one name across training types (lr and LR, loss and Actor Loss).")
    every, lacking = charts.comparable(tables)
    if len(tables) > 1 and lacking:
        st.info("These runs can be compared on: " + (md(", ".join(every)) if every else "nothing they all log") + ". "
                + " · ".join(f"{md(m)} is not in {md(', '.join(lacking[m]))}" for m in chosen if m in lacking),
                icon=":material/compare_arrows:")

    x_options = charts.x_choices(tables)
    if state.get(X_KEY) not in x_options:
        state[X_KEY] = "step"
    if state.get(SMOOTH_KEY) not in SMOOTHING_CHOICES:
        state[SMOOTH_KEY] = "auto"
    state[LOG_KEY] = [m for m in state.get(LOG_KEY, []) if m in chosen]
    controls = st.columns([2.4, 1.3, 2, 1, 1, 1])
    smoothing = controls[0].select_slider(
        "Smoothing", SMOOTHING_CHOICES, key=SMOOTH_KEY, format_func=lambda v: "auto" if v == "auto" else f"{v:.2f}",
        help="Exponential moving average, as in TensorBoard; raw values are drawn faintly behind. Auto: each "
             "chart's weight is chosen from its noise (clean curves barely smoothed, noisy rewards a lot).")
    x = controls[1].selectbox("X axis", x_options, key=X_KEY, format_func=X_LABELS.get,
                              help="Samples or tokens seen compare runs of different batch sizes; they and wall "
                                   "time come from the runs' records (runs without them are left out).")
    log_metrics = controls[2].multiselect("Log scale", chosen, key=LOG_KEY, format_func=charts.chart_title,
                                          placeholder="Charts with a log y axis",
                                          help="A logarithmic y axis for the charts chosen (values <= 0 are not drawn).")
    x_from = controls[3].number_input("From", min_value=0, value=None, key=FROM_KEY, placeholder="start",
                                      help="Chart only from this point of the x axis on.")
    x_to = controls[4].number_input("To", min_value=0, value=None, key=TO_KEY, placeholder="end",
                                    help="Chart only up to this point of the x axis.")
    with controls[5]:
        with st.popover("Copy link", icon=":material/link:", help="A link to exactly this view, to share."):
            st.caption("This view's link (the copy button is at its right):")
            st.code(view_link(), language=None, wrap_lines=True)
    if not chosen:
        st.info("No metric chosen: pick one or more above.")
    grid = st.columns(2)
    for i, metric in enumerate(chosen):
        with grid[i % 2]:
            low, high = state.get(f"logs.ylo.{metric}"), state.get(f"logs.yhi.{metric}")
            st.plotly_chart(charts.metric_figure(metric, tables, smoothing=smoothing, log_y=metric in log_metrics,
                                                 x=charts.X_CHOICES[x], x_range=(x_from, x_to), y_range=(low, high),
                                                 marks=resume_marks if x == "step" else ()),
                            key=f"logs.chart.{metric}", config={"displaylogo": False})
            with st.popover("Y range", icon=":material/height:"):
                st.number_input("Y from", value=None, key=f"logs.ylo.{metric}", format="%g", placeholder="auto")
                st.number_input("Y to", value=None, key=f"logs.yhi.{metric}", format="%g", placeholder="auto")

    # The CSV is built only when clicked: for a long log it costs more than the whole page.
    st.download_button("Download CSV", lambda: charts.to_csv(tables), file_name=charts.csv_file_name(tables),
                       mime="text/csv", icon=":material/download:", key="logs.csv", on_click="ignore",
                       help="Every parsed record of the charted logs, one row per logged step, with a run column.")


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
    parts = [f"**{md(run.label)}**", f"step {prog.step:,} / {prog.total:,} ({prog.percent:.0f}%)"]
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
            st.caption(f"{md(run.label)}: " + "; ".join(lacks) + ".")
    recorded = [run for run in runs if metrics.has_metrics(run.run_dir)]
    if not recorded:
        return
    settings = health.load_settings(store.home)
    frames = [(run.label, metrics.read(run.run_dir)) for run in recorded]
    for (label, df) in frames:
        for finding in health.evaluate(df, settings):
            st.warning(f"**{md(label)} · {finding.title}** since step {finding.since_step}: {finding.message} "
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
                    state["logs.rollouts.wanted"] = step  # open that step in the Rollouts view
    with st.expander("Health check thresholds", icon=":material/tune:"):
        health_settings_form(settings)
    stored = [run for run in recorded if metrics.has_rollouts(run.run_dir)]
    if stored:
        show_rollouts(stored)


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
                st.error(f"Not saved: {md(exc)}")
            else:
                st.success("Saved: the Jobs and Logs pages of every viewer use these thresholds.")


def show_rollouts(stored):
    """Choose a run and a step; see each group's prompt, reference and responses with their parts."""
    st.subheader("Rollouts")
    by_label = {run.label: run for run in stored}
    top = st.columns([2, 5])
    label = top[0].selectbox("Run", list(by_label), key="logs.rollouts.run") if len(by_label) > 1 else stored[0].label
    run = by_label[label]
    steps = list(rollouts.steps(run.run_dir)["step"])
    if not steps:
        st.info(f"{md(label)}: no step stored yet.")
        return
    wanted = state.pop("logs.rollouts.wanted", None)
    if wanted is not None:
        state[STEP_KEY] = min(steps, key=lambda s: abs(s - wanted))  # the nearest stored step
    if state.get(STEP_KEY) not in steps:
        state[STEP_KEY] = steps[-1]
    with top[1]:
        step = steps[0] if len(steps) == 1 else st.select_slider(
            "Step", steps, key=STEP_KEY, help="Or click a point of a chart above to open its step.")
    meta = rollouts.meta(run.run_dir)
    if meta.get("full_at_step") is not None:
        st.caption(f"The store reached its size bound at step {meta['full_at_step']}: later responses were not kept.")
    parts = rollouts.part_names(run.run_dir)

    filters = st.columns([3, 2, 2, 3])
    frame = rollouts.read(run.run_dir, step)
    lo, hi = (float(frame["reward"].min()), float(frame["reward"].max())) if len(frame) else (0.0, 0.0)
    reward_range = None
    if hi > lo:
        reward_range = filters[0].slider("Reward range", lo, hi, (lo, hi), key=f"logs.rollouts.range.{step}")
    truncated = filters[1].selectbox("Truncated", ("all", "only", "none"), key="logs.rollouts.truncated",
                                     format_func={"all": "All responses", "only": "Only truncated",
                                                  "none": "Not truncated"}.get)
    format_failures = filters[2].checkbox("Format failures only", key="logs.rollouts.format",
                                          help="Responses without the full think/answer format.")
    text = filters[3].text_input("Search text", key="logs.rollouts.text", placeholder="in prompts, responses, references")
    groups = rlview.filtered_groups(run.run_dir, step, reward_range=reward_range, truncated=truncated,
                                    format_failures=format_failures, text=text)
    st.caption(f"Step {step}: {len(frame)} responses in {frame['group'].nunique() if len(frame) else 0} groups; "
               f"{sum(len(g.responses) for g in groups)} shown.")
    for g in groups[:GROUPS_SHOWN]:
        show_group(g, parts)
    if len(groups) > GROUPS_SHOWN:
        st.caption(f"{len(groups) - GROUPS_SHOWN} more groups match: narrow the filters to see them.")

    choices = rlview.prompt_choices(groups or rlview.groups_of(frame))
    if not choices:
        return
    st.markdown("**Follow a prompt across steps**")
    by_label = {f"{text} (#{pid})": pid for pid, text in choices}  # plain strings: the prompt's id keeps them apart
    pid = by_label[st.selectbox("Prompt", list(by_label), key="logs.rollouts.follow")]
    history = rlview.prompt_history(run.run_dir, pid)
    st.dataframe(history, hide_index=True, width="stretch")
    later = rollouts.query(run.run_dir, prompt_id=pid)
    for hstep, rows in list(later.groupby("step"))[-HISTORY_STEPS:]:
        with st.expander(f"Step {hstep}: best reward {rows['reward'].max():+.3f}", expanded=False):
            for _, r in rows.iterrows():
                st.text(f"reward {r['reward']:+.3f} · advantage {rlview.format_value(r['advantage'])}")
                st.code(r["response"], language=None, wrap_lines=True)
    others = [r for r in stored if r is not run]
    if others:
        other_label = st.selectbox("Compare with run", [r.label for r in others], key="logs.rollouts.compare")
        other = next(r for r in others if r.label == other_label)
        mine = rlview.groups_of(rollouts.query(run.run_dir, step, prompt_id=pid))
        if mine:
            ostep, theirs = rlview.same_prompt_in(other.run_dir, mine[0].prompt, mine[0].reference, step)
            left, right = st.columns(2)
            with left:
                st.markdown(f"**{md(label)}**, step {step}")
                for _, r in mine[0].responses.iterrows():
                    response_card(r, parts)
            with right:
                if ostep is None:
                    st.info(f"{md(other_label)} never sampled this prompt.")
                else:
                    st.markdown(f"**{md(other_label)}**, step {ostep}")
                    for _, r in theirs.iterrows():
                        response_card(r, rollouts.part_names(other.run_dir))


GROUPS_SHOWN = 12
HISTORY_STEPS = 10
COLUMNS_PER_ROW = 4


def show_group(g, parts):
    """A prompt, its reference and its responses side by side; every text shown as plain text."""
    with st.container(border=True):
        note = " · all rewards equal: no learning signal" if g.rewards_equal else ""
        st.markdown(f"**Group {g.group}** · {len(g.responses)} responses{note}")
        left, right = st.columns(2)
        left.caption("Prompt")
        left.code(g.prompt, language=None, wrap_lines=True, height=120 if len(g.prompt) > 300 else "content")
        right.caption("Reference answer")
        right.code(g.reference or "(none)", language=None, wrap_lines=True,
                   height=120 if len(g.reference) > 300 else "content")
        rows = list(g.responses.iterrows())
        for start in range(0, len(rows), COLUMNS_PER_ROW):
            cols = st.columns(COLUMNS_PER_ROW)
            for col, (_, r) in zip(cols, rows[start:start + COLUMNS_PER_ROW]):
                with col:
                    response_card(r, parts)


def response_card(r, parts):
    """One response: advantage badge (coloured by sign), reward parts, then its text."""
    adv = r["advantage"]
    colour = rlview.advantage_colour(adv)
    st.markdown(f":{colour}-background[advantage {rlview.format_value(adv)}] · reward {r['reward']:+.3f}")
    items = [(k, v) for k, v in rlview.response_card(r.to_dict(), parts) if k not in ("reward", "advantage")]
    st.text(" · ".join(f"{k} {rlview.format_value(v)}" for k, v in items))
    st.code(r["response"] or "(empty)", language=None, wrap_lines=True,
            height=240 if len(r["response"]) > 600 else "content")


def show_tails():
    for run in runs:
        if run.path is None:
            continue
        with st.expander(f"Log tail: {md(run.label)}", expanded=len(runs) == 1):
            try:
                lines = logfiles.tail(run.path, state.get(TAIL_KEY, 200))
            except FileNotFoundError:
                st.caption(f"No log file at {md(run.path)}.")
            except OSError as exc:
                st.error(f"Cannot read {md(run.path)}: {md(exc)}")
            else:
                st.html(tailview.tail_html(lines))


show_runs()
show_records()
st.subheader("Log tail")
state.setdefault(TAIL_KEY, 200)
st.selectbox("Tail lines", TAIL_CHOICES, key=TAIL_KEY, help="How many of each log's last lines to show.")
show_tails()
urlstate.publish("logs", state, st.query_params, defaults=url_defaults)
