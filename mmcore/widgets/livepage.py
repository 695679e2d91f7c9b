"""The tab side of live pages (see `mmcore.jobs.change_watch`): one shared watch per server, one small ticker
per tab that reruns the page only when something it shows has changed.

The entry script calls `start_run()` before the page and `ticker()` in the sidebar; a page says what
it follows with `follow(...)`. In a real server the watch's snapshot is published as a static file
(`live.MarkerFile`, one thread for the whole server) and the ticker is a small component in the page
that fetches it while the tab is visible: an idle tab runs nothing on the server and draws nothing,
and a change reruns the ticker's fragment, which asks the watch and reruns the app when
`live.should_rerun` says so. The ticker also shows "Updated N s ago". A page's own fragment can hold
a `fragment_ticker`, which reruns just that fragment when the logs or files it follows grow. Where no
marker can be published (static serving off, a read-only folder), the ticker runs its fragment at
every tick instead.
"""
import sqlite3
import time
from pathlib import Path

import streamlit as st
from streamlit import file_util
from streamlit.runtime import Runtime
from streamlit.runtime.scriptrunner import get_script_run_ctx

from mmcore.base.i18n import t
from mmcore.base.paths import DB_NAME, default_home
from mmcore.jobs import change_watch
from mmcore.jobs.jobstore import JobStore

TICK_S = 2.0  # how often a visible tab looks at the marker (or, without one, asks the shared watch)
SEEN_KEY = "live.seen"  # session state: live.Seen of what this tab last drew
PATHS_KEY = "live.paths"  # session state: the files this tab's page shows
SYNC_KEY = "live.sync"  # session state: the ticker is drawn before the page says what it follows
_tick = st.components.v2.component("minimind_live_ticker",
                                   js=(Path(__file__).with_name("components") / "ticker.js").read_text(encoding="utf-8"),
                                   css=".live-line { font-size: 0.875rem; color: var(--st-text-color); opacity: 0.6; }")


def _serving():
    """True inside a real Streamlit server (Streamlit's AppTest stands a mock in for the runtime)."""
    return Runtime.exists() and type(Runtime.instance()) is Runtime


def _static_folder():
    """Where this server serves static files from (`server.enableStaticServing`), or None."""
    ctx = get_script_run_ctx()
    if ctx is None or not _serving() or not st.get_option("server.enableStaticServing"):
        return None
    folder = Path(file_util.get_app_static_dir(ctx.main_script_path))
    return folder if folder.is_dir() else None


@st.cache_resource(show_spinner=False)
def _watch(db_path, static_folder):
    watch = change_watch.ChangeWatch(JobStore(db_path))
    marker = None
    if static_folder is not None:
        try:
            marker = change_watch.MarkerFile(watch, static_folder).start()
        except OSError:
            marker = None  # a read-only checkout: the tabs tick the server instead
    return watch, marker


def _shared():
    try:
        # The store's path without opening it (this runs at every script run): `_watch` opens it once.
        return _watch(str((default_home() / DB_NAME).resolve()), _static_folder())
    except (sqlite3.Error, RuntimeError, OSError):
        return None, None


def watch():
    """The server's one `ChangeWatch` of the job store, or None while the store cannot be opened
    (the pages say why)."""
    return _shared()[0]


def start_run():
    """At the start of a full run: what this run draws is at least as new as the watch's snapshot."""
    st.session_state[PATHS_KEY] = ()  # until the page says what it shows
    st.session_state[SYNC_KEY] = True
    w = watch()
    if w is None:
        st.session_state.pop(SEEN_KEY, None)
        return None
    snap = w.poll()
    st.session_state[SEEN_KEY] = change_watch.Seen(snap.store_version, snap.logs_version, time.time())
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


def _ticked():
    pass  # the trigger itself reruns the fragment


def _marker_url(marker):
    """The published marker's address, relative to the page (so a `server.baseUrlPath` is kept)."""
    return f"app/static/{marker.name}" if marker is not None else None


def _tick_data(scope, marker, w, snap, drawn, paths):
    """What the ticker component needs: the marker's address, what the tab drew and follows (`drawn`,
    a `live.Seen`; `paths`, its files), and the snapshot it drew from, in the marker's form (the
    component draws the "updated" line from it until it fetches a newer one)."""
    return {"scope": scope, "url": _marker_url(marker), "interval_s": TICK_S,
            "store": drawn.store_version, "logs": drawn.logs_version, "drawn_at": drawn.drawn_at,
            "follow_logs": drawn.follow_logs, "progress_s": drawn.progress_s,
            "files": {change_watch.path_key(path): version for path, version in w.file_versions(paths).items()},
            "snapshot": change_watch.marker_body(snap)}


def fragment_ticker(key, logs=False, paths=(), progress_s=5.0):
    """Inside a page's `st.fragment`, before what it draws: rerun that fragment alone (not the page)
    when the active jobs' logs grow (`logs`) or one of `paths` changes, at most every `progress_s`.
    Without a published marker it reruns every `progress_s`."""
    w, marker = _shared()
    if w is None:
        return
    snap = w.poll()
    w.paths_marker(paths)  # watched from now on
    drawn = change_watch.Seen(snap.store_version, snap.logs_version, time.time(), follow_logs=logs, progress_s=progress_s)
    _tick(data=_tick_data("fragment", marker, w, snap, drawn, paths), key=key, on_tick_change=_ticked)


@st.fragment
def ticker():
    """The tab's clock and the "Updated N s ago" line (draw it once per run, in the sidebar)."""
    state = st.session_state
    sync = state.pop(SYNC_KEY, False)
    seen = state.get(SEEN_KEY)
    w, marker = _shared()
    if w is None:  # the store cannot be opened: the page and the sidebar say so; look again each tick
        _tick(data={"scope": "page", "url": None, "interval_s": TICK_S}, key="live.tick", on_tick_change=_ticked)
        return
    snap = w.poll()
    own = state.get(PATHS_KEY, ())
    paths = w.paths_marker(own) if seen is not None and seen.paths else ()
    if change_watch.should_rerun(seen, snap, paths):
        st.rerun()
    drawn = seen or change_watch.Seen(snap.store_version, snap.logs_version, time.time())
    texts = {"updated": t("live.updated", ago="{ago}"), "help": t("live.updated.help", changed="{changed}"),
             "seconds": t("live.seconds", n="{n}"), "minutes": t("live.minutes", n="{n}")}
    _tick(data={**_tick_data("page", marker, w, snap, drawn, own), "sync": sync, "texts": texts},
          key="live.tick", on_tick_change=_ticked)
    if snap.error:
        st.caption(t("live.error", error=snap.error))
