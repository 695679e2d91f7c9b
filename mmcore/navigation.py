"""Keeps every page inside the app's own navigation (st.navigation in streamlit_app.py)."""


def ensure_app_navigation():
    """Rerun through streamlit_app.py when Streamlit served a page on its own.

    With a `pages/` folder beside the entry script, a freshly started Streamlit server answers its
    first request in the legacy folder mode: a bookmarked `/jobs?job=12` opened after a restart runs
    pages/jobs.py alone, without the entry's navigation and sidebar. Leaving that mode and rerunning
    lets st.navigation resolve the same URL. Call it first thing in every page.
    """
    import streamlit as st
    from streamlit.runtime.pages_manager import PagesManager

    if PagesManager.uses_pages_directory:
        PagesManager.uses_pages_directory = False
        st.rerun()
