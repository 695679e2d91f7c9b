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
every tick instead. `log_tail` is a log tail that, while shown, gets only its new lines.
"""
import hashlib
import os
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
from mmcore.logs import tailview
from mmcore.live import livechart_wire

# How often a visible tab looks at the marker (or, without one, asks the shared watch). Every look costs the
# tab and the server a little, and ten tabs open on the machine that trains cost the trainer: at 3 s the
# demo job kept 88% of its steps with 5 Logs and 5 Jobs tabs, at 2 s 80-82% on the same day (bench_viewers).
TICK_S = 3.0
SEEN_KEY = "live.seen"  # session state: live.Seen of what this tab last drew
PATHS_KEY = "live.paths"  # session state: the files this tab's page shows
SYNC_KEY = "live.sync"  # session state: the ticker is drawn before the page says what it follows
TAILS_KEY = "live.tails"  # session state: tail key -> livechart_wire.SentTail, what this tab shows
FED_KEY = "live.fed"  # session state: the fed sections (`livefeed`) the page's last full run drew
COMPONENTS = Path(__file__).with_name("components")
# A component whose code is a file of the static folder (`data.module`, see `published`), imported once
# per page: a page run then sends the component its data, not its code.
LOADER_JS = """
export default function (component) {
  const url = new URL(component.data.module, document.baseURI).href;
  const modules = (window.__minimindModules ??= {});
  if (modules[url]) return modules[url].default(component);
  let cleanup = null, gone = false;
  (modules[url + "#loading"] ??= import(url).then((m) => (modules[url] = m)))
    .then((m) => { if (!gone) cleanup = m.default(component); });
  return () => { gone = true; if (cleanup) cleanup(); };
}
"""


def script(*names):
    """A component's script (the files `names` of COMPONENTS, one after the other: see `bundle`) without
    its comment lines and indentation: every page run sends it."""
    text = "\n".join((COMPONENTS / name).read_text(encoding="utf-8") for name in names)
    return "\n".join(line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("//"))


_TICK_CSS = ".live-line { font-size: 0.875rem; color: var(--st-text-color); opacity: 0.6; }"
_tick_inline = st.components.v2.component("minimind_live_ticker", js=script("ticker.js"), css=_TICK_CSS)
_tick_loaded = st.components.v2.component("minimind_live_ticker_loaded", js=LOADER_JS, css=_TICK_CSS)
_tail = st.components.v2.component("minimind_live_tail", js=script("receiver.js", "livetail.js"), isolate_styles=False)


def _serving():
    """True inside a real Streamlit server (Streamlit's AppTest stands a mock in for the runtime)."""
    return Runtime.exists() and type(Runtime.instance()) is Runtime


def static_folder():
    """Where this server serves static files from (`server.enableStaticServing`), or None."""
    ctx = get_script_run_ctx()
    if ctx is None or not _serving() or not st.get_option("server.enableStaticServing"):
        return None
    folder = Path(file_util.get_app_static_dir(ctx.main_script_path))
    return folder if folder.is_dir() else None


def _publish(sources, folder, name):
    target = Path(folder) / name
    content = b"\n".join(Path(source).read_bytes() for source in sources)
    if not target.is_file() or target.stat().st_size != len(content):
        part = target.with_name(f".{name}.{os.getpid()}.tmp")
        part.write_bytes(content)
        os.replace(part, target)  # a tab never loads half a file


@st.cache_resource(show_spinner=False)
def _published(folder, files):
    try:
        for _key, source, name in files:
            _publish(source, folder, name)
    except OSError:
        return None
    return {key: f"app/static/{name}" for key, _source, name in files}


def published(files):
    """Copy `files` ({key: (source path, or the paths joined into one file: see `bundle`, file name)} into
    this server's static folder, once per server -> {key: its address relative to the page (so a `server.baseUrlPath` is kept)}, or None where this
    server serves no static files (or they cannot be written there). The names are ignored by git
    (static/.gitignore) and should change with their content (`module_name`)."""
    folder = static_folder()
    if folder is None:
        return None
    return _published(str(folder), tuple(sorted((key, _paths(source), name) for key, (source, name) in files.items())))


def _paths(source):
    return (str(source),) if isinstance(source, (str, Path)) else tuple(str(path) for path in source)


def module_name(*paths):
    """A script's name in the static folder (the files `paths` joined): the last one's stem and a digest of
    their content (a new version, a new name, which no browser has cached)."""
    digest = hashlib.sha256(b"\n".join(Path(path).read_bytes() for path in paths)).hexdigest()[:12]
    return f"{Path(paths[-1]).stem}-{digest}{Path(paths[-1]).suffix}"


def bundle(*names):
    """(the files `names` of COMPONENTS, the name of the one file they make in the static folder), for
    `published`: a component script that begins with a shared part (receiver.js)."""
    paths = tuple(COMPONENTS / name for name in names)
    return paths, module_name(*paths)


_TICKER_FILE = {"module": (COMPONENTS / "ticker.js", module_name(COMPONENTS / "ticker.js"))}


def _tick(data, key):
    """The ticker component, its code loaded from the static folder where there is one."""
    urls = published(_TICKER_FILE)
    if urls is None:
        return _tick_inline(data=data, key=key, on_tick_change=_ticked, on_lost_change=_ticked)
    return _tick_loaded(data={**data, "module": urls["module"]}, key=key, on_tick_change=_ticked,
                        on_lost_change=_ticked)


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
        return _watch(str((default_home() / DB_NAME).resolve()), static_folder())
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
    st.session_state[FED_KEY] = set()  # until the page draws its fed sections
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
            "files": change_watch.keyed_versions(w.file_versions(paths)),
            "snapshot": change_watch.marker_body(snap)}


def fragment_ticker(key, logs=False, paths=(), progress_s=5.0, feed=None):
    """Inside a page's `st.fragment`, before what it draws: rerun that fragment alone (not the page)
    when the active jobs' logs grow (`logs`) or one of `paths` changes, at most every `progress_s`.
    Without a published marker it reruns every `progress_s`. `feed`, if given, is called once what is
    followed has been noted, with the `live.Seen` drawn and the followed files' counters (by
    `change_watch.path_key`) -> more of the ticker's data: the messages for the page's live elements
    (see `mmcore.live.livefeed`), which the ticker hands out in the browser, and where to fetch the
    next ones; the elements it could not give theirs are in this component's trigger "lost"."""
    w, marker = _shared()
    if w is None:
        return
    snap = w.poll()
    w.paths_marker(paths)  # watched from now on
    drawn = change_watch.Seen(snap.store_version, snap.logs_version, time.time(), follow_logs=logs, progress_s=progress_s)
    data = _tick_data("fragment", marker, w, snap, drawn, paths)
    if feed is not None:
        data.update(feed(drawn, data["files"]))
    _tick(data, key)


def marker():
    """The server's published `change_watch.MarkerFile`, or None where there is none."""
    return _shared()[1]


def _tail_message(lines, key):
    sent = st.session_state.setdefault(TAILS_KEY, {})
    lost = isinstance(st.session_state.get(key), dict) and st.session_state[key].get("lost")
    data, sent[key] = livechart_wire.tail_message(lines, tailview.tail_html(lines), None if lost else sent.get(key))
    return data


def log_tail(lines, key):
    """The log tail `lines` (`tailview.tail_html`'s box) as a small component that, while shown, gets
    only the lines that changed: a page following a growing log sends a few lines per update, not the
    whole tail."""
    _tail(key=key, data={**_tail_message(lines, key), "key": key}, on_lost_change=_ticked)


def tail_feed_message(lines, key):
    """The message that brings the drawn log tail `key` to `lines` (see `mmcore.live.livefeed`), or
    None when it shows them already."""
    data = _tail_message(lines, key)
    return None if data["op"] == "same" else data


def forget_tail(key):
    """The browser lost log tail `key`: its next message draws it whole."""
    st.session_state.get(TAILS_KEY, {}).pop(key, None)


@st.fragment
def ticker():
    """The tab's clock and the "Updated N s ago" line (draw it once per run, in the sidebar)."""
    state = st.session_state
    sync = state.pop(SYNC_KEY, False)
    seen = state.get(SEEN_KEY)
    w, marker = _shared()
    if w is None:  # the store cannot be opened: the page and the sidebar say so; look again each tick
        _tick({"scope": "page", "url": None, "interval_s": TICK_S}, "live.tick")
        return
    snap = w.poll()
    own = state.get(PATHS_KEY, ())
    paths = w.paths_marker(own) if seen is not None and seen.paths else ()
    if change_watch.should_rerun(seen, snap, paths):
        st.rerun()
    drawn = seen or change_watch.Seen(snap.store_version, snap.logs_version, time.time())
    texts = {"updated": t("live.updated", ago="{ago}"), "help": t("live.updated.help", changed="{changed}"),
             "seconds": t("live.seconds", n="{n}"), "minutes": t("live.minutes", n="{n}")}
    _tick({**_tick_data("page", marker, w, snap, drawn, own), "sync": sync, "texts": texts}, "live.tick")
    if snap.error:
        st.caption(t("live.error", error=snap.error))
