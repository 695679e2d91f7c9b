"""Jobs: every training job with its progress; stop, delete, clone, resume; the selected job's log."""
import sqlite3
import time

import streamlit as st

from mmcore.access import auth
from mmcore.base import i18n
from mmcore.base.i18n import t
from mmcore.base.safetext import md
from mmcore.experiments.annotations import Annotations
from mmcore.jobs import htmltable, jobnote, jobtable, progress, storeguard
from mmcore.jobs.jobrow import STATUSES
from mmcore.jobs.jobstore import JobStore
from mmcore.live import livefeed, livepage, livetable
from mmcore.logs import logfiles, tailview
from mmcore.runs import gainers, health, metric_stream, resumes
from mmcore.runs.trend_watch import RunWatch
from mmcore.train import lossnote, train_types
from mmcore.widgets import audit_panel, confirm, navigation, queue_panel
from mmcore.widgets.runviews import runs_panel

navigation.ensure_app_navigation()

state = st.session_state
user = auth.session_user(state)  # who acts: their role decides what the buttons may do
SELECT_KEY = "jobs.selected"  # the selected job's id (the selector's own key changes with its options)
PROGRESS_S = 10.0  # a running job's progress in the table follows its log at most this often
LIMITS = (50, 200, 1000, None)
TABLE_KEY = "jobs_table"  # the jobs table's container (its header row sticks to the top while it scrolls)
PARAMS_HEIGHT_PX = 360  # the selected job's parameters scroll within this height


@st.cache_resource
def run_watch():
    """One follower of the runs' metrics streams for every session: trends and health checks."""
    return RunWatch()


@st.cache_resource
def progress_cache():
    """One cache for every session: finished jobs' logs are parsed once per server process."""
    return progress.ProgressCache()


try:
    store = JobStore()
except (sqlite3.Error, RuntimeError, OSError) as exc:  # missing, damaged, locked or newer-schema database
    st.error(md(storeguard.explain(exc)))
    st.stop()
cache = progress_cache()
types = train_types.TYPES

st.title(t("jobs.title"))

i18n.relabel(state, "jobs.status_filter", "jobs.type_filter")
i18n.keep_choice(state, "jobs.limit", 200)
filters = st.columns([2, 2, 1])
status_filter = filters[0].multiselect(t("jobs.status"), STATUSES, key="jobs.status_filter", placeholder=t("jobs.all_statuses"),
                                       format_func=lambda s: t(f"status.{s}"))
type_filter = filters[1].multiselect(t("jobs.type"), list(types), format_func=lambda k: t(f"type.{k}"),
                                     key="jobs.type_filter", placeholder=t("jobs.all_types"))
limit = filters[2].selectbox(t("jobs.show"), LIMITS, format_func=lambda n: t("jobs.show_all") if n is None else t("jobs.show_latest", n=n),
                             key="jobs.limit")


def store_failed(exc):
    """What the page shows for a job database that fails while it is read (damaged pages inside the
    file surface only when they are read): what happened and how to recover, no traceback."""
    st.error(md(storeguard.explain(exc, store.path)))


wanted_id, problem = jobtable.parse_job_id(st.query_params.get("job"))
try:
    wanted = store.get(wanted_id) if wanted_id is not None and not problem else None
except sqlite3.Error as exc:
    store_failed(exc)
    st.stop()
if problem:
    st.error(problem)
elif wanted_id is not None and wanted is None:
    st.error(t("jobs.no_such_job", id=wanted_id))
    wanted_id = None
if wanted_id is not None:
    state[SELECT_KEY] = wanted_id  # the URL follows the selection (see select), so it wins here


def select(job_id):
    """Select a job (None: none) and put it in the URL, so the address can be shared or reloaded."""
    if job_id is None:
        state.pop(SELECT_KEY, None)
        st.query_params.pop("job", None)
    else:
        state[SELECT_KEY] = job_id
        st.query_params["job"] = str(job_id)


def on_pick(pick_key):
    select(state.get(pick_key))


def job_heading(job):
    """The selected job's heading, note, and where it runs (its place in the queue while it waits)."""
    st.markdown(t("jobs.heading", id=job.id, type=md(jobtable.type_short(job.train_type)), name=md(job.name),
                  status=t(f"status.{job.status}")))
    if job.note:
        st.caption(md(jobnote.note_text(job.note)))
    runs_panel.tags_caption(store, job.id)  # the run's tags and note (set on the Runs page)
    queue_panel.queue_details(store, job, user)


def job_parameters(job):
    """The selected job's parameters, command, environment, owner and exit code."""
    left, right = st.columns(2)
    with left:
        st.markdown(f"**{t('jobs.parameters')}**")
        st.html(htmltable.table_html(jobtable.params_rows(job), ("parameter", "value"),
                                     {"parameter": t("jobs.col.parameter"), "value": t("jobs.col.value")},
                                     theme=st.context.theme.type, height=PARAMS_HEIGHT_PX))
    with right:
        st.markdown(f"**{t('jobs.command')}**")
        st.html(tailview.command_html(job.command))
        if job.env:
            st.html(tailview.command_html(" ".join(f"{k}={v}" for k, v in job.env.items())))
        # The time through `md` too: its escaped colons keep "17:53:11" from reading as an emoji
        # code, which would make a fresh page load Streamlit's emoji tables (260 kB of script).
        st.caption(t("jobs.submitted", owner=md(jobtable.submitted_by(job)),
                     created=md(jobtable.format_time(job.created_at)))
                   + (t("jobs.exit_code", code=job.exit_code) if job.exit_code is not None else ""))


def details(live, job, settings):
    """The selected job: actions, parameters, command and the end of its log. Its health findings (under
    the health `settings`) and its log's end follow the log; the rest changes with the job's record (the
    page is drawn again)."""
    with live.container(border=True):
        live.fixed(job_heading, job)
        findings = run_watch().summary(metric_stream.job_run_dir(job, store.home), job.train_type, settings).findings
        for finding in findings:
            live.fixed(st.warning, t("jobs.finding", title=finding.title, step=finding.since_step,
                                     message=finding.message, advice=finding.advice)
                       + gainers.finding_link(finding, {"job": str(job.id)}),
                       icon=":material/health_and_safety:")
        live.fixed(confirm.buttons, store, job, user, select, cache)
        live.fixed(job_parameters, job)
        live.fixed(audit_panel.job_history, store, job)
        live.fixed(st.markdown, t("jobs.log_heading"))
        try:
            lines = logfiles.tail(job.log_path, 200)
        except FileNotFoundError:
            live.fixed(st.info, t("jobs.no_log_yet") if job.active else t("jobs.log_missing", path=md(job.log_path)))
        except OSError as exc:
            live.fixed(st.error, t("jobs.log_unreadable", path=md(job.log_path), error=md(exc)))
        else:
            # Sent whole once, then only its new lines: a running job's log grows at every update.
            live.tail(lines, f"jobs.tail.{job.id}")


def jobs_parts(live):
    """The pipelines, the table and the selected job, as a fed section (`livefeed`): a running job's
    progress (its log grew) sends the table's changed cells and the log's new lines, at most every
    PROGRESS_S; a new or ended job, or anything else the section shows changing, draws the page again."""
    live.fixed(confirm.show_flash)
    try:
        jobs_and_selection(live)
    except sqlite3.Error as exc:
        live.fixed(store_failed, exc)


def listed():
    """The jobs the filters and the limit select, and how many match in all."""
    return (store.list(status=status_filter or None, train_type=type_filter or None, limit=limit),
            store.count(status=status_filter or None, train_type=type_filter or None))


def table(jobs, settings):
    """The jobs table of `jobs`, health badges under `settings`: (rows, columns, headers, header
    tooltips, the jobs in the table's order)."""
    jobs, parents = resumes.table_order(jobs, store.home)  # a job's resumes sit under it: one run
    rows = jobtable.mark_resumes(jobtable.job_rows(jobs, cache), parents)
    follower = run_watch()
    for row, job in zip(rows, jobs):  # the trend and health of each job's metrics stream
        summary = follower.summary(metric_stream.job_run_dir(job, store.home), job.train_type, settings)
        row["trend"], row["health"] = summary.trend, health.badge(summary.findings)
        row["status"] = t(f"status.{row['status']}")
    tags = Annotations.peek_tags(store.path)  # read-only: drawing the table never writes to the store
    for row in rows:
        row["tags"] = ", ".join(tags.get(row["id"], ()))
    order = list(jobtable.COLUMNS)
    order[order.index("name") + 1:order.index("name") + 1] = ["tags"]
    order[order.index("metric") + 1:order.index("metric") + 1] = ["trend", "health"]
    headers = {column: t(f"jobs.col.{column}") for column in order if column != "id"} | {"id": "ID"}
    helps = {column: t(f"jobs.col.{column}.help") for column in ("trend", "health", "started")}
    helps["metric"] = lossnote.metric_column_help()  # why a Reasoning distill loss reads in the tens
    return rows, order, headers, helps, jobs


def csv_button():
    """The table's CSV, made when the button is clicked (a table of 2,000 rows is 200 kB, and the page
    may have been drawn many updates ago)."""
    language = i18n.current()

    def csv():
        with i18n.language(language):
            rows, order, headers, _helps, _jobs = table(listed()[0], health.load_settings(store.home))
            return jobtable.rows_csv(rows, order, headers)
    st.download_button(t("jobs.download"), csv, mime="text/csv", file_name=time.strftime("minimind-jobs-%Y%m%d-%H%M.csv"),
                       icon=":material/download:", on_click="ignore", key="jobs.download")


def jobs_and_selection(live):
    """The pipelines, the jobs table and the selected job."""
    live.fixed(queue_panel.pipelines_section, store, user, select=select)
    jobs, total = listed()
    if not jobs:
        live.fixed(st.info, t("jobs.none_yet") if total == 0 and not (status_filter or type_filter) else t("jobs.none_match"))
        live.fixed(st.page_link, "pages/train.py", label=t("jobs.go_train"), icon=":material/model_training:")
        return
    settings = health.load_settings(store.home)  # read once for the table and the selected job
    rows, order, headers, helps, jobs = table(jobs, settings)
    order = jobtable.shown_columns(rows, order)
    # Drawn once; then only the cells that changed (a running job's progress and sparkline).
    live.table(rows, order, headers, helps, key=TABLE_KEY, changing=[job.active for job in jobs])
    live.fixed(csv_button)
    if total > len(jobs):
        live.fixed(st.caption, t("jobs.showing", n=len(jobs), total=total))

    by_id = {job.id: job for job in jobs}
    selected = state.get(SELECT_KEY)
    if selected is not None and selected not in by_id:
        extra = store.get(selected)  # selected through ?job= or a resume, but outside the filters/limit
        if extra is not None:
            by_id = {extra.id: extra, **by_id}
        else:
            select(None)
    ids = list(by_id)
    job_id = state.get(SELECT_KEY)
    if job_id not in by_id:
        job_id = ids[0]
    # A key made of the options and the selection: when either changes (a job deleted, a resume
    # selected), the browser gets a new selector instead of keeping a stale choice it would send back.
    pick_key = jobtable.selector_key("jobs.pick", ids, job_id)
    live.widget(st.selectbox, t("jobs.job"), ids, index=ids.index(job_id), format_func=lambda i: jobtable.job_label(by_id[i]),
                key=pick_key, on_change=on_pick, args=(pick_key,))
    details(live, by_id[job_id], settings)


livepage.follow()  # the page reruns for new and ended jobs; its live section follows the logs itself
st.button(t("jobs.refresh"), key="jobs.refresh", icon=":material/refresh:")
try:
    queue_panel.settings_section(store, user)
except sqlite3.Error as exc:
    store_failed(exc)
    st.stop()
livetable.forget(TABLE_KEY)  # a full run: the table is sent whole; the feed's runs send its changes
livefeed.section("jobs.live", jobs_parts, (), paths=(), follow_s=PROGRESS_S, logs=True)

if auth.session_role(state) == "admin":
    audit_panel.admin_trail(store)
