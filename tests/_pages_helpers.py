"""Helpers for the AppTest page tests: open a page through the app entry, read what it shows."""
import re
import sys

from _runner_helpers import wait_for  # noqa: F401  (re-exported for the page tests)
from streamlit.testing.v1 import AppTest

from mmcore.base.paths import ROOT

TIMEOUT_S = 60  # per script run: the machine is small and shared


def open_page(page=None, query=None, state=None):
    """Run the app entry (navigation, sidebar) and, if given, switch to `page` (e.g. "pages/jobs.py");
    `query` and `state` are the URL's query parameters and session state to start with.

    Pages link to each other with st.page_link, which only resolves inside the app's navigation,
    so pages are tested through the entry, as a browser sees them.
    """
    at = AppTest.from_file(str(ROOT / "streamlit_app.py"), default_timeout=TIMEOUT_S)
    if query:
        at.query_params.update(query)
    for key, value in (state or {}).items():  # e.g. the session's language
        at.session_state[key] = value
    at.run()
    if page is not None:
        at.switch_page(page).run()
    return at


def texts(elements):
    """The values of a list of AppTest elements (markdown, error, warning, ...), with the backslash
    escapes and the invisible word joiners that keep user-written text literal and unlinked
    (mmcore.base.safetext) taken out, as a reader sees them."""
    return [re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", e.value).replace("\u2060", "") if isinstance(e.value, str)
            else e.value for e in elements]


def widget_keys(at, prefix):
    """Keys of every input widget on the page that start with `prefix`."""
    found = set()
    for kind in ("text_input", "number_input", "selectbox", "multiselect", "radio"):
        for w in getattr(at, kind):
            if w.key and w.key.startswith(prefix):
                found.add(w.key)
    return found


def sleeper_argv(seconds=120):
    """A job command that just sleeps (stands for a trainer where only the process matters)."""
    return [sys.executable, "-c", f"import time; print('sleeping', flush=True); time.sleep({seconds})"]
