"""The tab side of live pages (see `mmcore.live`): one shared watch per server, one small ticker
per tab that reruns the page only when something it shows has changed.

The entry script calls `start_run()` before the page and `ticker()` in the sidebar; a page says what
it follows with `follow(...)`. The ticker is a fragment holding a tiny component that ticks only while
the tab is visible, so a hidden tab costs nothing; each tick asks the shared watch (no database or
log access per tab) and reruns the app only when `live.should_rerun` says so. The ticker also shows
"Updated N s ago".
"""
import sqlite3
import time
from pathlib import Path

import streamlit as st
import streamlit.components.v1 as components

from mmcore import live
from mmcore.i18n import t
from mmcore.store import JobStore

TICK_S = 2.0  # how often a visible tab asks the shared watch
SEEN_KEY = "live.seen"  # session state: live.Seen of what this tab last drew
PATHS_KEY = "live.paths"  # session state: the files this tab's page shows
_tick = components.declare_component("minimind_live_ticker", path=str(Path(__file__).with_name("components") / "ticker"))


@st.cache_resource(show_spinner=False)
def _watch(db_path):
    return live.ChangeWatch(JobStore(db_path))


def watch():
    """The server's one `ChangeWatch` of the job store, or None while the store cannot be opened
    (the pages say why)."""
    try:
        return _watch(JobStore().path)
    except (sqlite3.Error, RuntimeError, OSError):
        return None


def start_run():
    """At the start of a full run: what this run draws is at least as new as the watch's snapshot."""
    st.session_state[PATHS_KEY] = ()  # until the page says what it shows
    w = watch()
    if w is None:
        st.session_state.pop(SEEN_KEY, None)
        return None
    snap = w.poll()
    st.session_state[SEEN_KEY] = live.Seen(snap.store_version, snap.logs_version, time.time())
    return snap


def follow(logs=False, paths=(), progress_s=5.0):
    """Called by a page during its run: rerun it when the active jobs' logs grow (`logs`) or when one
    of `paths` changes, at most every `progress_s` seconds (store changes rerun every page at once)."""
    st.session_state[PATHS_KEY] = tuple(paths)
    seen = st.session_state.get(SEEN_KEY)
    if seen is None or (w := watch()) is None:
        return
    seen.follow_logs = logs
    seen.paths = w.paths_marker(paths)
    seen.progress_s = progress_s


def ago_text(seconds):
    """ "3 s" / "2 min" for the Updated line."""
    seconds = max(0, int(seconds))
    return t("live.seconds", n=seconds) if seconds < 120 else t("live.minutes", n=seconds // 60)


@st.fragment
def ticker():
    """The tab's clock and the "Updated N s ago" line (draw it once per run, in the sidebar)."""
    _tick(interval_s=TICK_S, key="live.tick", default=None)
    seen = st.session_state.get(SEEN_KEY)
    w = watch()
    if w is None:
        return  # the store cannot be opened: the page and the sidebar say so
    snap = w.poll()
    paths = w.paths_marker(st.session_state.get(PATHS_KEY, ())) if seen is not None and seen.paths else ()
    if live.should_rerun(seen, snap, paths):
        st.rerun()
    now = time.time()
    pending = seen is not None and live.should_rerun(seen, snap, paths, now=now, progress_s=0)
    updated = seen.drawn_at if pending or seen is None else max(seen.drawn_at, snap.checked_at)
    if snap.error:
        st.caption(t("live.error", error=snap.error))
    else:
        st.caption(t("live.updated", ago=ago_text(now - updated)),
                   help=t("live.updated.help", changed=ago_text(now - snap.changed_at)))
