"""Logs: charts of every metric in one or more training logs (jobs, files in the logs folder, records
folders of command-line runs, or an uploaded log), smoothed and overlaid for comparison, with CSV
export and the end of each log. Runs with structured records also get RL charts, health checks and
the Rollouts view."""
import sqlite3

import streamlit as st

from mmcore.access import auth
from mmcore.actions import view_acts
from mmcore.base.i18n import t
from mmcore.base.safetext import md, md_lines
from mmcore.jobs import run_selection, storeguard
from mmcore.jobs.jobstore import JobStore
from mmcore.logs import savedviews, urlstate
from mmcore.widgets import logs_panels, navigation, queue_panel, views_panel
from mmcore.widgets.runviews import group_panel, heldout_panel

navigation.ensure_app_navigation()

state = st.session_state
JOB_LIMIT = 200
# Charts and tails follow a growing log at most this often, as the Jobs table does: each update costs an
# open tab's browser about 0.1 s of its main thread (Streamlit's own run of the page's fragment, which
# renders every element of the page again, then Plotly's drawing), and on the machine that trains,
# that time is the trainer's.
FOLLOW_S = 10.0
JOBS_KEY = logs_panels.JOBS_KEY
THRESHOLDS_OPEN_KEY = "logs.thresholds_open"  # session state: whether the health thresholds' expander is open


st.title(t("logs.title"))
try:
    store = JobStore()
    jobs = {job.id: job for job in store.list(limit=JOB_LIMIT)}
    views = savedviews.ViewStore(store.path)
except (sqlite3.Error, RuntimeError, OSError) as exc:  # missing, damaged, locked or newer-schema database
    st.error(md(storeguard.explain(exc)))
    st.stop()

# -- what to chart ----------------------------------------------------------------------------------

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
for job_id in run_selection.with_chosen_jobs(store, jobs, state.get(JOBS_KEY, [])):  # beyond the newest JOB_LIMIT
    st.error(t("logs.no_such_job", id=job_id))
log_files = run_selection.loose_logs(store.logs_dir, jobs)  # the logs folder's files that are no job's
run_folders = run_selection.loose_folders(store.home, jobs)  # the records folders of command-line runs
chosen_jobs, chosen_files, chosen_folders, uploads = logs_panels.sources(store, jobs, log_files, run_folders, user)

views_panel.section(views, user, st.context.url or "")

# A job and its resumes are one run: one line, whichever of them was chosen.
runs = run_selection.chosen_runs(jobs, chosen_jobs, chosen_files, chosen_folders,
                                 home=store.home, logs_dir=store.logs_dir)
runs += [run_selection.Run(label, path) for label, path in logs_panels.kept_uploads(store, uploads, user)]

run_selection.distinct_labels(runs)  # legend names must differ, or two runs would share one curve

if not runs:
    st.info(t("logs.choose") if jobs or log_files else t("logs.no_jobs"))
    urlstate.publish("logs", state, st.query_params, defaults=url_defaults)
    st.stop()


def health_settings_form(current):
    """The health checks' thresholds, shared by the team: an admin may change them."""
    with st.form("logs.health.form", border=False):
        cols = st.columns(3)
        values = {}
        for i, (name, default) in enumerate(vars(current).items()):
            values[name] = cols[i % 3].number_input(
                t(f"health.label.{name}"), value=default, min_value=1 if name == "window" else 0.0,
                step=1 if name == "window" else 0.05, help=t(f"health.setting.{name}"), key=f"logs.health.{name}")
        user = auth.session_user(state)
        may_not = view_acts.thresholds_refusal(user)  # shared thresholds: an admin's to change
        if may_not:
            st.caption(md(may_not))
        if st.form_submit_button(t("logs.thresholds.save"), disabled=bool(may_not)):
            outcome = view_acts.save_thresholds(store.home, values, user)
            getattr(st, outcome.kind)(md_lines(outcome.message))


# -- the page: charts, log tails, run records, rollouts ------------------------------------------------

logs_panels.rollouts_link(runs)  # the Rollouts view is under the charts: one click away
names, view = logs_panels.show_charts(runs, url_defaults)  # the chart controls
settings = logs_panels.health_settings(runs, store.home)  # None when no run has records
# What the runs' files show: drawn with the page, then kept current as they grow.
logs_panels.live_view(runs, names, view, settings, FOLLOW_S)
if settings is not None:
    # Its fields are built only while it is open: a fresh page has ten elements fewer to draw.
    thresholds = st.expander(t("logs.thresholds"), icon=":material/tune:", key=THRESHOLDS_OPEN_KEY, on_change="rerun")
    if thresholds.open:
        with thresholds:
            health_settings_form(settings)
group_panel.section(runs)  # runs that differ only in a seed (or a chosen parameter) as one line with a band
logs_panels.show_rollouts(runs)
heldout_panel.show(runs, user, store.home)  # training reward against held-out signals; the per-prompt table
urlstate.publish("logs", state, st.query_params, defaults=url_defaults)
