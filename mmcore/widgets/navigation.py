"""Keeps every page inside the app's own navigation (st.navigation in streamlit_app.py).

The one place this project touches a private Streamlit API. With a `pages/` folder beside the entry
script, a freshly started server serves its first request in the legacy pages-folder mode: a
bookmarked `/jobs?job=12` opened after a restart runs pages/jobs.py alone, without the entry's
navigation and sidebar. Streamlit (1.67) has no supported switch for this: its docs say the folder
is ignored once any session has called st.navigation, which the first request of a fresh server
has not done yet, and no config option turns the legacy mode off. So each page calls
`ensure_app_navigation()` first: a session the entry never ran in leaves the legacy mode
(`PagesManager.uses_pages_directory`, the class-wide flag Streamlit itself clears in st.navigation)
and reruns, and st.navigation then resolves the same URL. tests/test_navigation.py fails loudly if a
Streamlit upgrade renames or stops reading that flag; tests/test_browser_e2e.py opens a bookmarked
URL on a fresh server.
"""

from pathlib import Path

from mmcore.access import roles
from mmcore.base.i18n import t
from mmcore.base.paths import ROOT
from mmcore.base.safetext import md

ENTRY = (ROOT / "streamlit_app.py").resolve()  # the app's entry script
ENTRY_KEY = "app.entry_ran"  # session-state flag: streamlit_app.py has run in this session


def mark_entry(session_state):
    """Called by streamlit_app.py on each run: this session goes through the app's navigation."""
    session_state[ENTRY_KEY] = True


def roles_file_problem(error=None):
    """The message that closes the dashboard while the roles file cannot be used (`error`, or what
    reading it now raises): which file, what is wrong, what to do. None when the file is usable."""
    if error is None:
        try:
            roles.load()
        except roles.RolesFileError as exc:
            error = exc
        else:
            return None
    return t("app.roles_file_broken", path=md(roles.roles_path()), error=md(error))


def show_closed(message):
    """All a page shows while the dashboard is closed (a broken roles file): its title and why."""
    import streamlit as st

    st.title(t("app.title"))
    st.error(message)


def ensure_app_navigation():
    """Rerun through streamlit_app.py when Streamlit served this page on its own (legacy mode).

    A run is in legacy mode when the app's entry is the main script but has not run in this session:
    Streamlit ran the page straight from the pages/ folder. The class-wide flag alone cannot tell:
    when several open tabs reconnect at once to a restarted server, the first one clears it while the
    others' runs have already started in legacy mode. Only a session the entry never ran in is
    rerun, so no widget action of a running session is dropped; a page run on its own as the main
    script (AppTest) is left alone. Call it first thing in every page.
    """
    import streamlit as st
    from streamlit.runtime.pages_manager import PagesManager
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    # Failing closed: no role is known while the roles file is broken, so no page runs, even one
    # served on its own (the entry shows the same message instead of any page).
    if (problem := roles_file_problem()) is not None:
        show_closed(problem)
        st.stop()
    if st.session_state.get(ENTRY_KEY):
        return
    ctx = get_script_run_ctx()
    if ctx is None or Path(ctx.main_script_path).resolve() != ENTRY:
        return
    PagesManager.uses_pages_directory = False
    st.rerun()
