"""Runs: every run as an experiment. The runs table (parameters that differ against results; search, filter,
sort, CSV), the diff of 2 to 8 runs (parameters, data files, code, results, curves), each run's tags and
note, and the sweeps (their runs, parallel coordinates of parameters -> a metric, the best run, Stop all)."""
import sqlite3

import streamlit as st

from mmcore.access import auth
from mmcore.base.i18n import t
from mmcore.base.safetext import md
from mmcore.experiments import runtable
from mmcore.jobs import storeguard
from mmcore.jobs.jobstore import JobStore
from mmcore.widgets import navigation
from mmcore.widgets.runviews import runs_panel, sweep_panel

navigation.ensure_app_navigation()

user = auth.session_user(st.session_state)
try:
    store = JobStore()
    pending = set()  # runs whose results a background worker is still reading
    runs = runtable.runs(store, pending=pending)
except (sqlite3.Error, RuntimeError, OSError) as exc:  # missing, damaged, locked or newer-schema database
    st.error(md(storeguard.explain(exc)))
    st.stop()

st.title(t("runs.title"))
st.caption(t("runs.intro"))
runs_panel.notifications(store, user)
if not runs:
    st.info(t("runs.none"))
    st.stop()
table_tab, diff_tab, notes_tab, sweep_tab = st.tabs([t("runs.tab.table"), t("runs.tab.diff"), t("runs.tab.notes"),
                                                     t("sweep.view")])
with table_tab:
    runs_panel.reading(store, pending)
    runs_panel.table(runs, pending)
with diff_tab:
    runs_panel.diff(store, runs)
with notes_tab:
    runs_panel.annotations(store, runs, user)
with sweep_tab:
    sweep_panel.view(store, user)
