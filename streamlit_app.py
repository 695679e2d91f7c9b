"""MiniMind Train Dashboard: `streamlit run streamlit_app.py`.

The entry point: page setup, navigation over pages/, and a sidebar with the language switch, the
live ticker (reruns a tab when what it shows changed), the GPUs, the number of active jobs and who
is using the dashboard. Nothing to set up first: the job store (SQLite) and its
folders are created on first use. The dashboard never imports torch; trainers run as child processes.
"""
import sqlite3

import streamlit as st
import streamlit.components.v1 as components

from mmcore.access import auth, roles
from mmcore.base import gpu, i18n
from mmcore.base.i18n import t
from mmcore.base.safetext import md
from mmcore.jobs import jobtable, scheduler_lock, storeguard
from mmcore.jobs.jobstore import JobStore
from mmcore.live import livepage
from mmcore.widgets import navigation, session_janitor

st.set_page_config(page_title="MiniMind Train Dashboard", page_icon="🧠", layout="wide")
navigation.mark_entry(st.session_state)
i18n.choose_language(st.session_state, **i18n.browser_preferences(st.context))


def roles_file_page():
    """All anyone gets while the roles file cannot be read: nobody's role is known, so no page runs
    (failing closed), and the message says which file, what is wrong with it and what to do."""
    navigation.show_closed(navigation.roles_file_problem(roles_error))


try:
    access = auth.gate(st)
except roles.RolesFileError as exc:
    roles_error = exc
    # The only page there is, whatever URL was asked for: no other page, nor the sidebar, runs.
    st.navigation([st.Page(roles_file_page, title=t("app.title"), default=True)], position="hidden").run()
    st.stop()


def sign_in_page():
    """All a visitor without an identity gets, whatever URL was asked for: why, and a sign-in button
    when sign-in is set up."""
    st.title(t("app.title"))
    st.info(access.reason)
    if access.can_sign_in:
        st.button(t("app.sign_in"), type="primary", on_click=st.login)


if access.user is None:
    # The only page there is: no other page (nor the sidebar below) runs for this visitor.
    st.navigation([st.Page(sign_in_page, title=t("app.sign_in"), default=True)], position="hidden").run()
    st.stop()

page = st.navigation([
    st.Page("pages/train.py", title=t("app.nav.train"), icon=":material/model_training:", default=True),
    st.Page("pages/jobs.py", title=t("app.nav.jobs"), icon=":material/list:"),
    st.Page("pages/logs.py", title=t("app.nav.logs"), icon=":material/monitoring:"),
    st.Page("pages/runs.py", title=t("app.nav.runs"), icon=":material/table_chart:"),
    st.Page("pages/models.py", title=t("app.nav.models"), icon=":material/smart_toy:"),
    st.Page("pages/data.py", title=t("app.nav.data"), icon=":material/dataset:"),
])


def reconcile_jobs():
    """Once per run, before the page: jobs whose supervisor died read as lost everywhere it draws."""
    try:
        JobStore().reconcile()
    except (sqlite3.Error, RuntimeError, OSError):
        pass  # an unusable job store: the page and the sidebar say so themselves


reconcile_jobs()  # before the live watch's snapshot below, so the run starts from reconciled rows


def on_language():
    """The switch's choice becomes the session's language, and the browser remembers it."""
    lang = st.session_state[LANGUAGE_WIDGET]
    st.session_state[i18n.STATE_KEY] = lang
    st.session_state[REMEMBER_KEY] = lang


LANGUAGE_WIDGET = "app.language_switch"
REMEMBER_KEY = "app.language_remember"  # a choice to store in the browser's cookie on this run
with st.sidebar:
    # Drawn before the page, so a page that stops early (st.stop) still shows them.
    st.markdown(f"### {t('app.title')}")
    st.session_state[LANGUAGE_WIDGET] = st.session_state[i18n.STATE_KEY]
    st.selectbox(t("app.language"), list(i18n.LANGUAGES), format_func=i18n.LANGUAGES.get,
                 key=LANGUAGE_WIDGET, on_change=on_language, help=t("app.language.help"))
    if REMEMBER_KEY in st.session_state:
        components.html(i18n.remember_script(st.session_state.pop(REMEMBER_KEY)), height=0)
    session_janitor.start()  # a closed tab's uploads and state are given back once its session expires
    livepage.start_run()
    livepage.ticker()  # reruns this tab when what it shows has changed
    # GPUs and job counts, drawn here first so that a page that stops early still shows them, and
    # drawn again after a page that runs to its end (so a job it just launched is counted).
    status_slot = st.empty()
    st.caption(t("app.running_as", user=f"{md(access.user)} ({t(f'role.{access.role}')})"))
    if auth.mode() == "oidc":
        st.button(t("app.sign_out"), on_click=st.logout, key="app.sign_out")


def status_panel(gpus):
    """GPUs and job counts (the ticker reruns the tab when a job starts or ends)."""
    st.markdown(f"**{t('app.gpus')}**")
    if gpus:
        for g in gpus:
            st.caption(jobtable.gpu_line(g))
            st.progress(min(1.0, g.memory_fraction))
    else:
        st.caption(t("app.cpu_only"))
    try:
        store = JobStore()
        counts = store.counts()
        # A queue left without its scheduler (a crash, a reboot) gets one back while anyone looks.
        scheduler_lock.ensure_running(store)
    except Exception as exc:  # a broken or locked database must not take the navigation down with it
        # What is wrong and how to recover, in the words the pages use (storeguard.explain).
        st.error(t("app.store_unavailable", error=md(storeguard.explain(exc))))
    else:
        st.markdown(t("app.job_counts", running=counts["running"], queued=counts["queued"]))


gpus = gpu.list_gpus()  # once a run: both drawings show the same GPUs
with status_slot.container():
    status_panel(gpus)
page.run()

with status_slot.container():
    status_panel(gpus)
