"""The Logs page's panels, drawn with Streamlit: the source selectors, the charts with their controls,
the run records (RL charts and health checks), the Rollouts view and the log tails.

Which runs there are and what each reads as is `mmcore.jobs.run_selection`'s; the charts are
`mmcore.logs.charts`' and the RL panels `mmcore.runs.rlview`'s. Text from a log is shown as plain text.
"""
import urllib.parse

import streamlit as st

from mmcore.actions import view_acts
from mmcore.base import i18n
from mmcore.base.i18n import t
from mmcore.base.safetext import md, md_lines
from mmcore.jobs import jobtable, run_selection
from mmcore.logs import charts, logfiles, tailview, urlstate
from mmcore.runs import health, metric_stream, rlview
from mmcore.widgets import rollouts_panel

JOBS_KEY = "logs.jobs"
FILES_KEY = "logs.files"
FOLDERS_KEY = "logs.folders"
UPLOADS_KEY = "logs.kept_uploads"
METRICS_KEY = "logs.metrics"
PARSERS_KEY = "logs.parsers"  # log path -> LogParser: each rerun reads only what was appended
SMOOTH_KEY = "logs.smoothing"
X_KEY = "logs.x_axis"
LOG_KEY = "logs.log_metrics"
TAIL_KEY = "logs.tail_lines"
FROM_KEY = "logs.x_from"
TO_KEY = "logs.x_to"
SMOOTHING_CHOICES = urlstate.LOGS["smooth"].choices
TAIL_CHOICES = (50, 200, 1000)


def sources(store, jobs, log_files, run_folders, user=None):
    """The four ways to choose runs (jobs, log files, records folders, uploads) side by side ->
    (job ids, file names, folder names, uploaded files). Choices that have gone are dropped first. The
    uploader is a member's: a viewer sees it disabled, and why."""
    state = st.session_state
    if JOBS_KEY in state:
        state[JOBS_KEY] = [i for i in state[JOBS_KEY] if i in jobs]
    if FILES_KEY in state:
        state[FILES_KEY] = run_selection.still_there(state[FILES_KEY], log_files)
    if FOLDERS_KEY in state:
        state[FOLDERS_KEY] = run_selection.still_there(state[FOLDERS_KEY], run_folders)
    cols = st.columns([3, 2, 2, 2])
    chosen_jobs = cols[0].multiselect(
        t("logs.jobs"), list(jobs), key=JOBS_KEY, format_func=lambda i: jobtable.job_label(jobs[i]),
        placeholder=t("logs.jobs.placeholder"), help=t("logs.jobs.help"))
    chosen_files = cols[1].multiselect(
        t("logs.files"), [p.name for p in log_files], key=FILES_KEY, placeholder=t("logs.files.placeholder"),
        help=t("logs.files.help", folder=store.logs_dir))
    chosen_folders = cols[2].multiselect(
        t("logs.folders"), [p.name for p in run_folders], key=FOLDERS_KEY,
        placeholder=t("logs.folders.placeholder"), help=t("logs.folders.help", folder=metric_stream.records_dir(store.home)))
    why_not = view_acts.upload_refusal(user)
    uploads = cols[3].file_uploader(
        t("logs.upload"), type=["log", "txt"], accept_multiple_files=True, key="logs.upload",
        help=t("logs.upload_viewers", reason=why_not) if why_not else t("logs.upload.help"), disabled=bool(why_not))
    return chosen_jobs, chosen_files, chosen_folders, [] if why_not else uploads or []


def kept_uploads(store, uploads, user=None):
    """[(label, path)] of the uploaded logs, each kept on disk once per session (`view_acts.upload_log`:
    streamed, within its user's quota); a refusal is shown where the chart would be."""
    kept = st.session_state.setdefault(UPLOADS_KEY, {})  # the upload's id -> its file
    runs = []
    for upload in uploads:
        if upload.file_id not in kept:
            outcome = view_acts.upload_log(store.home, upload, upload.name, user)
            if outcome.refused:
                st.error(md_lines(outcome.message))
                continue
            kept[upload.file_id] = str(outcome.value)
        runs.append((t("logs.uploaded", name=upload.name), kept[upload.file_id]))
    for gone in set(kept) - {u.file_id for u in uploads}:  # removed from the uploader
        del kept[gone]
    return runs


# -- charts ------------------------------------------------------------------------------------------

def read_runs(runs):
    """Each run read (incrementally) with its problem, note, last error and summary line shown ->
    the readings that have a table."""
    parsers = st.session_state.setdefault(PARSERS_KEY, {})
    readings = []
    for run in runs:
        reading = run_selection.read_run(run, parsers)
        if reading.problem:
            st.error(reading.problem)
            continue
        if reading.note is not None:
            getattr(st, reading.note[0])(md_lines(reading.note[1]))
        if reading.last_error:
            with st.expander(t("logs.last_error", run=md(run.label)), expanded=reading.note is not None,
                             icon=":material/error:"):
                st.code(reading.last_error, language=None)
        if reading.progress is not None:
            st.markdown(run_selection.summary_line(run.label, reading.progress))
        if reading.table is not None:
            readings.append(reading)
    return readings


def show_charts(runs, url_defaults):
    """Summaries, the chart controls, one chart per metric, and the CSV download. Sets the default
    metrics in `url_defaults` (a default is left out of the URL)."""
    state = st.session_state
    readings = read_runs(runs)
    if not readings:
        return
    tables = {r.run.label: r.table for r in readings}
    types = {r.train_type for r in readings}
    resume_marks = [mark for r in readings for mark in r.marks]
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
    with controls[5], st.popover(t("logs.copy_link"), icon=":material/link:", help=t("logs.copy_link.help")):
        st.caption(t("logs.copy_link.caption"))
        st.code(view_link(url_defaults), language=None, wrap_lines=True)
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


def view_link(url_defaults):
    """The address of this view (the page and its query parameters) for a teammate."""
    params = {k: v for k, v in st.query_params.to_dict().items() if k not in urlstate.LOGS}
    params.update(urlstate.encode(st.session_state, defaults=url_defaults))
    base = st.context.url or ""
    return base + ("?" + urllib.parse.urlencode(params, safe=",") if params else "")


# -- run records -------------------------------------------------------------------------------------

def show_records(runs, home):
    """What each run's records lack, then RL charts and health checks from their metrics streams ->
    the health settings in force, or None when no run has a metrics stream."""
    state = st.session_state
    for run in runs:
        lacks = rlview.missing_records(run.run_dir, run.train_type)
        if lacks:  # an old or uploaded log: charted from its lines, and it says what it lacks
            st.caption(f"{md(run.label)}: " + "; ".join(lacks) + ".")
    recorded = run_selection.recorded(runs)
    if not recorded:
        return None
    settings = health.load_settings(home)
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
    return settings


def show_rollouts(runs):
    """The Rollouts view of the runs with a rollout store, if any."""
    stored = run_selection.with_rollouts(runs)
    if stored:
        # its own fragment: choosing a step or a filter redraws only the Rollouts view
        st.fragment(rollouts_panel.show)(stored)


# -- log tails ---------------------------------------------------------------------------------------

def show_tails(runs):
    """The end of each run's log (as many lines as chosen), opened when there is one run."""
    state = st.session_state
    st.subheader(t("logs.tail"))
    state.setdefault(TAIL_KEY, 200)
    st.selectbox(t("logs.tail_lines"), TAIL_CHOICES, key=TAIL_KEY, help=t("logs.tail_lines.help"))
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
