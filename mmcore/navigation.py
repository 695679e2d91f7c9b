"""Keeps every page inside the app's own navigation (st.navigation in streamlit_app.py)."""

ENTRY_KEY = "app.entry_ran"  # session-state flag: streamlit_app.py has run in this session


def mark_entry(session_state):
    """Called by streamlit_app.py on each run: this session goes through the app's navigation."""
    session_state[ENTRY_KEY] = True


def ensure_app_navigation():
    """Rerun through streamlit_app.py when Streamlit served a page on its own.

    With a `pages/` folder beside the entry script, a freshly started Streamlit server answers its
    first request in the legacy folder mode: a bookmarked `/jobs?job=12` opened after a restart runs
    pages/jobs.py alone, without the entry's navigation and sidebar. Leaving that mode and rerunning
    lets st.navigation resolve the same URL. Only a session the entry never ran in is rerun, so no
    widget action of a running session is dropped. Call it first thing in every page.
    """
    import streamlit as st
    from streamlit.runtime.pages_manager import PagesManager

    if PagesManager.uses_pages_directory and not st.session_state.get(ENTRY_KEY):
        PagesManager.uses_pages_directory = False
        st.rerun()
