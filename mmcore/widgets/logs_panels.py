"""The Logs page's panels, drawn with Streamlit: the source selectors, the chart controls, the live
view (each run's summary, its charts, the log tails, the run records: RL charts and health checks)
and the Rollouts view.

Which runs there are and what each reads as is `mmcore.jobs.run_selection`'s; the charts are
`mmcore.logs.charts`' and the RL panels `mmcore.runs.rlview`'s. Runs are read and charts computed
once per change for every session (`shared`), and drawn as live charts (`mmcore.live.livechart`).
Text from a log is shown as plain text.
"""
import contextlib
import html
import urllib.parse

import streamlit as st

from mmcore.actions import view_acts
from mmcore.base import i18n
from mmcore.base.i18n import t
from mmcore.base.safetext import md, md_lines
from mmcore.experiments.annotations import Annotations, tagged
from mmcore.jobs import jobtable, run_selection
from mmcore.live import livechart, livechart_cache, livefeed, livepage
from mmcore.logs import charts, logfiles, urlstate
from mmcore.runs import gainers, health, metric_stream, rlview
from mmcore.train import lossnote
from mmcore.widgets import rollouts_panel, uploader_words

JOBS_KEY = "logs.jobs"
FILES_KEY = "logs.files"
FOLDERS_KEY = "logs.folders"
UPLOADS_KEY = "logs.kept_uploads"
REFUSED_UPLOADS_KEY = "logs.refused_uploads"
METRICS_KEY = "logs.metrics"
PARSERS_KEY = "logs.parsers"  # an upload's path -> its LogParser: each rerun reads only what was appended
SMOOTH_KEY = "logs.smoothing"
X_KEY = "logs.x_axis"
LOG_KEY = "logs.log_metrics"
TAIL_KEY = "logs.tail_lines"
TAILS_SHOWN_KEY = "logs.tails_shown"  # the log paths whose tails are shown
FROM_KEY = "logs.x_from"
TO_KEY = "logs.x_to"
SMOOTHING_CHOICES = urlstate.LOGS["smooth"].choices
TAIL_CHOICES = (50, 200, 1000)


def sources(store, jobs, log_files, run_folders, user=None):
    """The four ways to choose runs (jobs, log files, records folders, uploads) side by side ->
    (job ids, file names, folder names, uploaded files). Choices that have gone are dropped first. The
    uploader is a member's: a viewer sees it disabled, and why."""
    state = st.session_state
    if not any(key in state for key in (JOBS_KEY, FILES_KEY, FOLDERS_KEY)):  # nothing chosen, by hand or link
        state[JOBS_KEY] = run_selection.default_jobs(jobs)
    if JOBS_KEY in state:
        state[JOBS_KEY] = [i for i in state[JOBS_KEY] if i in jobs]
    if FILES_KEY in state:
        state[FILES_KEY] = run_selection.still_there(state[FILES_KEY], log_files)
    if FOLDERS_KEY in state:
        state[FOLDERS_KEY] = run_selection.still_there(state[FOLDERS_KEY], run_folders)
    cols = st.columns([3, 2, 2, 2])
    tags = Annotations.peek_tags(store.path)  # each job named with its tags ("12 — runs-a [baseline, lr]")
    chosen_jobs = cols[0].multiselect(
        t("logs.jobs"), list(jobs), key=JOBS_KEY,
        format_func=lambda i: tagged(jobtable.job_label(jobs[i]), tags.get(i)),
        placeholder=t("logs.jobs.placeholder"), help=t("logs.jobs.help"))
    chosen_files = cols[1].multiselect(
        t("logs.files"), [p.name for p in log_files], key=FILES_KEY, placeholder=t("logs.files.placeholder"),
        help=t("logs.files.help", folder=store.logs_dir))
    chosen_folders = cols[2].multiselect(
        t("logs.folders"), [p.name for p in run_folders], key=FOLDERS_KEY,
        placeholder=t("logs.folders.placeholder"), help=t("logs.folders.help", folder=metric_stream.records_dir(store.home)))
    why_not = view_acts.upload_refusal(user)
    with cols[3]:
        uploader_words.localize("logs.upload", ("log", "txt"))
    uploads = cols[3].file_uploader(
        t("logs.upload"), type=["log", "txt"], accept_multiple_files=True, key="logs.upload",
        help=t("logs.upload_viewers", reason=why_not) if why_not else t("logs.upload.help"), disabled=bool(why_not))
    return chosen_jobs, chosen_files, chosen_folders, [] if why_not else uploads or []


def kept_uploads(store, uploads, user=None):
    """[(label, path)] of the uploaded logs, each kept on disk once per session (`view_acts.upload_log`:
    streamed, within its user's quota); a refusal is shown where the chart would be."""
    kept = st.session_state.setdefault(UPLOADS_KEY, {})  # the upload's id -> its file
    # the upload's id -> why it was refused: asked once, its refusal shown again at each rerun
    refused = st.session_state.setdefault(REFUSED_UPLOADS_KEY, {})
    runs = []
    for upload in uploads:
        if upload.file_id in refused:
            st.error(md_lines(refused[upload.file_id]))
            continue
        if upload.file_id not in kept:
            outcome = view_acts.upload_log(store.home, upload, upload.name, user)
            if outcome.refused:
                refused[upload.file_id] = outcome.message
                st.error(md_lines(outcome.message))
                continue
            kept[upload.file_id] = str(outcome.value)
        runs.append((t("logs.uploaded", name=upload.name), kept[upload.file_id]))
    for table in (kept, refused):
        for gone in set(table) - {u.file_id for u in uploads}:  # removed from the uploader
            del table[gone]
    return runs


# -- charts ------------------------------------------------------------------------------------------

@st.cache_resource(show_spinner=False)
def shared():
    """The server's one `livechart_cache.Shared`: runs read and charts computed once per change of their
    files, for every session."""
    return livechart_cache.Shared()


def _reader():
    """A function that reads runs -> [(reading, its version)], incrementally: shared by every session,
    except this session's uploads (nobody else sees them; their memory goes with the session). It
    holds what it needs of this session, so it also works outside a script run (a CSV at its click)."""
    uploads = set(st.session_state.get(UPLOADS_KEY, {}).values())
    parsers = st.session_state.setdefault(PARSERS_KEY, {})
    cache, language = shared(), i18n.current()

    def read(runs):
        return [(run_selection.read_run(run, parsers), livechart_cache.version_of(livechart_cache.run_files(run)))
                if run.path in uploads else cache.read(run, language) for run in runs]
    return read


def readings_of(runs):
    """[(reading, its version)] of each run (see `_reader`)."""
    return _reader()(runs)


def _last_error(label, error, expanded):
    with st.expander(t("logs.last_error", run=md(label)), expanded=expanded, icon=":material/error:"):
        st.code(error, language=None)


def summary_html(label, progress):
    """A run's summary line (`run_selection.summary_parts`) as HTML, its name in bold."""
    return f"<strong>{html.escape(label)}</strong> · " + html.escape(" · ".join(run_selection.summary_parts(progress)))


def show_readings(live, readings):
    """Each run's problem, note and last error, then the runs' summary lines (one element: a fresh tab
    renders each of Streamlit's elements, and 20 runs would make 20) -> the (reading, version) pairs that
    have a table."""
    charted, lines = [], []
    for reading, version in readings:
        run = reading.run
        if reading.problem:
            live.fixed(st.error, reading.problem)
            continue
        if reading.note is not None:
            live.fixed(getattr(st, reading.note[0]), md_lines(reading.note[1]))
        if reading.last_error:
            live.fixed(_last_error, run.label, reading.last_error, reading.note is not None)
        if reading.progress is not None:
            lines.append((run_selection.summary_line(run.label, reading.progress),
                          f"<div>{summary_html(run.label, reading.progress)}</div>"))
        if reading.table is not None:
            charted.append((reading, version))
    if lines:
        live.text("  \n".join(markdown for markdown, _ in lines), "".join(line for _, line in lines), "logs.summary")
    return charted


def _chart_names(readings):
    """(metric names in chart order, the train type they were ordered for, x axes) of the charted runs."""
    tables = {r.run.label: r.table for r, _ in readings if r.table is not None}
    types = {r.train_type for r, _ in readings if r.table is not None}
    train_type = types.pop() if len(types) == 1 else None
    names = charts.order_metrics(charts.chartable([m for df in tables.values() for m in charts.metric_columns(df)]),
                                 train_type)
    return names, train_type, charts.x_choices(tables)


def metric_chart(live, metric, tables, versions, key, **options):
    """The live chart of `metric` over `tables` ({label: table}, whose files are at `versions`): computed
    once per change for every session, the zoomed range (if any) at full resolution."""
    # What the user's zoom belongs to: another axis, scale or range starts afresh; new points, another
    # smoothing or a resume mark keep it.
    revision = "|".join(str(options.get(name)) for name in ("x", "log_y", "x_range", "y_range"))
    view = livechart.requested_view(key, revision)
    live.chart(shared().metric_chart(metric, tables, versions, i18n.current(), view=view, **options), key, revision)


def show_charts(runs, url_defaults):
    """The chart controls (see `chart_controls`) -> ((metric names, x axes) they were drawn with, the
    chosen view or None when no run has a table yet), for `live_view`. Sets the default metrics in
    `url_defaults` (a default is left out of the URL)."""
    readings = readings_of(runs)
    tables = {r.run.label: r.table for r, _ in readings if r.table is not None}
    names, train_type, x_options = _chart_names(readings)
    view = chart_controls(tables, names, train_type, x_options, url_defaults) if tables else None
    if view is not None and "loss" in view["metrics"] and any(run.train_type == "distill_reason" for run in runs):
        st.caption(lossnote.loss_note("distill_reason"))  # why it reads ~30 where SFT reads ~2
    return (names, x_options), view


def chart_controls(tables, names, train_type, x_options, url_defaults):
    """The metrics to chart, smoothing, x axis, log scales, x range, each chart's y range and the view's
    link -> the view: {"metrics", "smoothing", "x", "log", "x_range", "y_ranges": {metric: (low, high)}}."""
    state = st.session_state
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

    i18n.relabel(state, X_KEY)
    if state.get(X_KEY) not in x_options:
        state[X_KEY] = "step"
    if state.get(SMOOTH_KEY) not in SMOOTHING_CHOICES:
        state[SMOOTH_KEY] = "auto"
    state[LOG_KEY] = [m for m in state.get(LOG_KEY, []) if m in chosen]
    controls = st.columns([2.0, 1.2, 1.6, 0.9, 0.9, 1.4, 1.4])
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
    with controls[5], st.popover(t("logs.y_range"), icon=":material/height:", width="stretch"):
        for metric in chosen:  # with the other controls: under each chart they would be sent at each update
            st.caption(charts.chart_title(metric))
            low, high = st.columns(2)
            low.number_input(t("logs.y_from"), value=None, key=f"logs.ylo.{metric}", format="%g", placeholder=t("logs.auto"))
            high.number_input(t("logs.y_to"), value=None, key=f"logs.yhi.{metric}", format="%g", placeholder=t("logs.auto"))
    with controls[6], st.popover(t("logs.copy_link"), icon=":material/link:", help=t("logs.copy_link.help"),
                                  width="stretch"):
        st.caption(t("logs.copy_link.caption"))
        st.code(view_link(url_defaults), language=None, wrap_lines=True)
    if not chosen:
        st.info(t("logs.no_metric"))
    return {"metrics": tuple(chosen), "smoothing": smoothing, "x": x, "log": tuple(log_metrics),
            "x_range": (x_from, x_to),
            "y_ranges": {m: (state.get(f"logs.ylo.{m}"), state.get(f"logs.yhi.{m}")) for m in chosen}}


def live_view(runs, names, view, settings, follow_s):
    """What the runs' files show, drawn once and then kept current as they grow (`livefeed`: each chart,
    tail and summary line sent only what changed): each run's problem, note and summary line, its
    charts (`view`, from `chart_controls`; None when no run had a table), the CSV download, the log
    tails and the run records with health checks under `settings` (see `health_settings`). When the
    runs now have other metrics or axes than `names` ((metrics, x axes) the controls were drawn with),
    the page is drawn again."""
    livefeed.section("logs.live", _live_parts, (runs, names, view, settings), run_selection.followed_paths(runs),
                     follow_s)


def _live_parts(live, runs, names, view, settings):
    readings = show_readings(live, readings_of(runs))
    current = _chart_names(readings)
    if (current[0], current[2]) != tuple(names):
        st.rerun(scope="app")  # new controls first
    if view is not None and readings:
        show_metric_charts(live, runs, readings, view)
    show_tails(live, runs)
    show_records(live, runs, settings)


def show_metric_charts(live, runs, readings, view):
    """One live chart per chosen metric, two abreast, and the CSV download of every point."""
    tables = {r.run.label: r.table for r, _ in readings}
    marks = tuple(mark for r, _ in readings for mark in r.marks) if view["x"] == "step" else ()
    versions = tuple(version for _, version in readings)
    grid = live.columns(2)
    for i, metric in enumerate(view["metrics"]):
        with grid[i % 2]:
            metric_chart(live, metric, tables, versions, f"logs.chart.{metric}", smoothing=view["smoothing"],
                         log_y=metric in view["log"], x=charts.X_CHOICES[view["x"]], x_range=view["x_range"],
                         y_range=view["y_ranges"][metric], marks=marks)
    live.fixed(csv_button, runs, charts.csv_file_name(tables))


def csv_button(runs, file_name):
    """The CSV download of every point of `runs`' tables, read when clicked: for a long log it costs
    more than the whole page, and the page may have been drawn many updates ago."""
    read = _reader()

    def csv():
        return charts.to_csv({r.run.label: r.table for r, _ in read(runs) if r.table is not None})
    st.download_button(t("logs.csv"), csv, file_name=file_name, mime="text/csv", icon=":material/download:",
                       key="logs.csv", on_click="ignore", help=t("logs.csv.help"))


def view_link(url_defaults):
    """The address of this view (the page and its query parameters) for a teammate."""
    params = {k: v for k, v in st.query_params.to_dict().items() if k not in urlstate.LOGS}
    params.update(urlstate.encode(st.session_state, defaults=url_defaults))
    base = st.context.url or ""
    return base + ("?" + urllib.parse.urlencode(params, safe=",") if params else "")


# -- run records -------------------------------------------------------------------------------------

def _record_panels(runs, frames, versions):
    """{key: Panel} of the RL panels any of the runs' metrics frames has data for (each run's once per
    change of its records)."""
    panels = {}
    for run, (_, df), version in zip(runs, frames, versions):
        for panel, _cols in shared().readings.get(("panels", str(run.run_dir)), version,
                                                  lambda df=df: rlview.panels_for(df)):
            panels.setdefault(panel.key, panel)
    return panels


def health_settings(runs, home):
    """The health checks' thresholds in force, or None when no run has a metrics stream."""
    return health.load_settings(home) if run_selection.recorded(runs) else None


def show_records(live, runs, settings):
    """What each run's records lack, then health checks (under `settings`, None: no run has records)
    and RL charts from their metrics streams (read incrementally, shared by every session; each chart
    sent only its new points). A click on a point opens its step in the Rollouts view."""
    state = st.session_state
    for run in runs:
        lacks = rlview.missing_records(run.run_dir, run.train_type)
        if lacks:  # an old or uploaded log: charted from its lines, and it says what it lacks
            live.fixed(st.caption, f"{md(run.label)}: " + "; ".join(lacks) + ".")
    recorded = run_selection.recorded(runs)
    if not recorded or settings is None:
        return
    frames, versions = [], []
    for run in recorded:
        df, version = shared().metrics(run.run_dir)
        frames.append((run.label, df))
        versions.append(version)
        findings = shared().readings.get(("health", str(run.run_dir), settings), version,
                                         lambda df=df: health.evaluate(df, settings))
        for finding in findings:
            live.fixed(st.warning, t("logs.finding", run=md(run.label), title=finding.title, step=finding.since_step,
                                     message=finding.message, advice=finding.advice)
                       + gainers.finding_link(finding, st.query_params.to_dict(), run.label),
                       icon=":material/health_and_safety:")
    panels = _record_panels(recorded, frames, versions)
    if not panels:
        return
    live.fixed(st.subheader, t("logs.records"))
    x = live.widget(st.radio, t("logs.x_axis"), list(metric_stream.X_AXES), format_func=rlview.x_label,
                    horizontal=True, key="logs.rl.x", relabel=True, help=t("logs.records.x.help"))
    grid = live.columns(2)
    for i, panel in enumerate(panels.values()):
        with grid[i % 2]:
            chart = shared().panel_chart(panel, frames, tuple(versions), x, i18n.current())
            event = live.chart(chart, f"logs.rl.{panel.key}", f"{panel.key}|{x}", on_select="rerun")
            step = rlview.clicked_step(event)
            if step is not None and state.get(f"logs.rl.clicked.{panel.key}") != step:
                state[f"logs.rl.clicked.{panel.key}"] = step
                state[rollouts_panel.WANTED_KEY] = step
                st.rerun(scope="app")  # the Rollouts view opens that step


def rollouts_link(runs):
    """A link at the top of the page down to the Rollouts view (under the charts), when a run has one."""
    if run_selection.with_rollouts(runs):
        st.markdown(f":material/forum: [{t('logs.to_rollouts')}](#{rollouts_panel.ANCHOR})")


def show_rollouts(runs):
    """The Rollouts view of the runs with a rollout store, if any."""
    stored = run_selection.with_rollouts(runs)
    if stored:
        # its own fragment: choosing a step or a filter redraws only the Rollouts view
        st.fragment(rollouts_panel.show)(stored)


# -- log tails ---------------------------------------------------------------------------------------

def show_tails(live, runs):
    """The end of the chosen runs' logs (as many lines as chosen): one run's is shown, of many runs none
    until chosen (one choice of runs, not a box per run, which a fresh tab of 20 runs would render 20
    times). Each tail is read and sent only while chosen, then only its new lines."""
    state = st.session_state
    live.fixed(st.subheader, t("logs.tail"))
    state.setdefault(TAIL_KEY, 200)
    logs = {run.path: run.label for run in runs if run.path is not None}
    columns = live.columns([1, 3]) if len(logs) > 1 else [contextlib.nullcontext()] * 2
    with columns[0]:
        lines = live.widget(st.selectbox, t("logs.tail_lines"), TAIL_CHOICES, key=TAIL_KEY, help=t("logs.tail_lines.help"))
    shown = list(logs)
    if len(logs) > 1:
        if not live.feeding:  # runs gone from the page leave the choice (a feed may not touch a widget's value)
            state[TAILS_SHOWN_KEY] = [path for path in state.get(TAILS_SHOWN_KEY, []) if path in logs]
        with columns[1]:
            shown = live.widget(st.pills, t("logs.tail_runs"), list(logs), selection_mode="multi", format_func=logs.get,
                                key=TAILS_SHOWN_KEY, help=t("logs.tail_runs.help")) or []
    with live.container():  # one place: a tail shown or hidden moves no later element (no chart below is drawn anew)
        for path, label in logs.items():
            if path not in shown:
                livepage.forget_tail(f"logs.tail.{path}")  # chosen again: drawn afresh
                continue
            if len(logs) > 1:
                live.fixed(st.markdown, f"**{t('logs.tail_of', run=md(label))}**")
            try:  # read again only when the log changed
                tail = shared().readings.get(("tail", path, lines), livechart_cache.version_of([path]),
                                             lambda path=path: logfiles.tail(path, lines))
            except FileNotFoundError:
                live.fixed(st.caption, t("logs.no_log_file", path=md(path)))
            except OSError as exc:
                live.fixed(st.error, t("logs.cannot_read", path=md(path), error=md(exc)))
            else:
                live.tail(tail, f"logs.tail.{path}")
