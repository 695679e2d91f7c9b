"""A page section drawn once by the page and then kept current without a Streamlit run: its live
elements get messages (its feed) that the server pushes as they grow.

A section that follows growing logs is a function `parts(live, *args)` that puts its fixed elements
(errors, notes, headings, widgets) through `live.fixed` / `live.widget` and its live ones (charts,
log tails, lines of text, the Jobs table) through `live.chart`, `live.tail`, `live.text` and
`live.table`. `section` runs it in the page's run, where everything is drawn, and then a small
fragment holding only the section's ticker (`livepage.fragment_ticker`).

When the followed files grow, the server's marker thread runs `parts` again in feeding mode, in the
session's context (`Pusher`): fixed elements only say what they show, and live ones give the message
that brings their element up to date (the chains of `livechart_wire`). The messages go to a static
file of the session's own, which its ticker fetches when the published marker says the section grew,
and hands each to its element (`window.__minimindReceivers`, by key). An update then costs the browser
one small fetch and the live elements' own work (Plotly drawing its new points): no script run, and
no redraw of the page's elements by Streamlit. If the fixed elements would show something else (a
new metric, a health finding, an error), the feed says so and the ticker reruns its fragment, which
draws the page again.

An element that cannot follow its message (it was remounted, or missed one) is reported by the
ticker ("lost"): its fragment reruns, and its message there draws it whole. A feed that does not come
in time (the session was busy) also falls back on a run of the fragment.

Where the server has no static folder, live charts are Streamlit's own (`livechart`), which no feed
can update: there the whole section is a fragment drawn again at each change.
"""
import contextlib
import contextvars
import itertools
import logging
import math
import os
import secrets
import threading
from pathlib import Path

import streamlit as st
from streamlit.runtime import Runtime
from streamlit.runtime.scriptrunner import add_script_run_ctx, get_script_run_ctx
from streamlit.runtime.scriptrunner_utils.exceptions import ScriptControlException
from streamlit.runtime.scriptrunner_utils.script_run_context import SCRIPT_RUN_CONTEXT_ATTR_NAME

from mmcore.base import i18n
from mmcore.jobs import change_watch
from mmcore.live import livechart, livepage, livetable

TEXTS_KEY = "livefeed.texts"  # session state: text key -> the HTML this tab shows
LOCK_KEY = "livefeed.lock"  # session state: the lock of its fed sections' messages (`_session_lock`)
_text = st.components.v2.component(
    "minimind_live_text", js=livepage.script("livetext.js"), isolate_styles=False,  # the page's tests read it
    css=".minimind-livetext { font-size: 1rem; line-height: 1.6; color: var(--st-text-color); }")
_numbers = itertools.count(1)  # orders a text's messages (an element's data, then its feed's)
_LOGGER = logging.getLogger(__name__)


class Section:
    """Where a section's elements go: drawn (`feeding` False), or, in its feed's run, turned into
    messages (`messages`, by element key) and a record of what its fixed elements show (`shape`).
    `fed` is False where the section has no feed (it is drawn again at each change)."""

    def __init__(self, feeding, fed=True):
        self.feeding, self.fed = feeding, fed
        self.messages = {}
        self.shape = []

    def fixed(self, draw, *args, **kwargs):
        """`draw(*args, **kwargs)` (`st.warning`, a function that draws a box ...), drawn in the page's run;
        in the feed's run only noted: the page is drawn again when it would show something else."""
        self.shape.append((draw.__qualname__, args, sorted(kwargs.items())))
        return None if self.feeding else draw(*args, **kwargs)

    def widget(self, draw, *args, key, relabel=False, **kwargs):
        """The widget `draw(*args, key=key, **kwargs)` -> its value (in the feed's run, from the session
        state: the widget is the page's). `relabel`: its options are translated (`i18n.relabel`, done
        only where it is drawn: a feed may not touch a drawn widget's value)."""
        self.shape.append(("widget", key))
        if self.feeding:
            return st.session_state.get(key)
        if relabel:
            i18n.relabel(st.session_state, key)
        return draw(*args, key=key, **kwargs)

    def columns(self, spec):
        """`st.columns(spec)` (a count, or the columns' widths); in the feed's run, as many places that draw
        nothing."""
        self.shape.append(("columns", spec))
        if self.feeding:
            return [contextlib.nullcontext()] * (spec if isinstance(spec, int) else len(spec))
        return st.columns(spec)

    def container(self, **kwargs):
        """`st.container(**kwargs)`; in the feed's run, a place that draws nothing."""
        self.shape.append(("container", sorted(kwargs.items())))
        return contextlib.nullcontext() if self.feeding else st.container(**kwargs)

    def chart(self, chart, key, revision, on_select=None):
        """The live chart `key` (see `livechart.show`) -> the point clicked in this run, or None."""
        if not self.feeding:
            return livechart.show(chart, key, revision, on_select)
        self._add(key, livechart.feed_message(chart, key, revision))
        return None

    def tail(self, lines, key):
        """The live log tail `key` (see `livepage.log_tail`)."""
        if not self.feeding:
            return livepage.log_tail(lines, key)
        self._add(key, livepage.tail_feed_message(lines, key))

    def table(self, rows, columns, headers, helps, key, changing=()):
        """The live table `key` (see `livetable.show`)."""
        if not self.feeding:
            return livetable.show(rows, columns, headers, helps, key=key, changing=changing)
        self._add(key, livetable.feed_message(rows, columns, headers, helps, key))

    def text(self, markdown, html, key):
        """The text `key` (a line or a few): `html` (made by the server, its text escaped) in a fed section,
        the same as `markdown` where the whole section is drawn again at each change."""
        if not self.fed:
            st.markdown(markdown)
            return
        sent = st.session_state.setdefault(TEXTS_KEY, {})
        if self.feeding:
            if sent.get(key) != html:
                self._add(key, {"html": html, "n": next(_numbers)})
        else:
            _text(key=key, data={"key": key, "html": html, "n": next(_numbers)})
        sent[key] = html

    def _add(self, key, message):
        if message is not None:
            self.messages[key] = message


def _forget(key):
    livechart.forget(key)
    livepage.forget_tail(key)
    livetable.forget(key)
    st.session_state.get(TEXTS_KEY, {}).pop(key, None)


def _fragment_run():
    """True in a run of a fragment alone (not the page's)."""
    ctx = get_script_run_ctx()
    return bool(ctx is not None and ctx.fragment_ids_this_run)


def _feed_messages(key, parts, args):
    """(messages by element key, whether the fixed elements would show something else): `parts` run in
    feeding mode for this session (its script run, or a pushed feed in its context)."""
    live = Section(feeding=True)
    parts(live, *args)
    return live.messages, live.shape != st.session_state.get(f"{key}.shape")


def _fed(key, parts, args, follows, drawn, files):
    """The fed section's part of its ticker's data: in a run of its fragment alone the messages its live
    elements are sent (none in the page's run, which drew them), and where its pushed feeds will be."""
    fed = {"feed": {"id": next(_numbers), "messages": {}}}
    with _session_lock():
        if _fragment_run():
            triggers = st.session_state.get(f"{key}.tick")
            for element in ((triggers.get("lost") or {}) if isinstance(triggers, dict) else {}).get("keys", ()):
                _forget(element)
            messages, changed = _feed_messages(key, parts, args)
            if changed:
                st.rerun(scope="app")  # what the section shows has changed: the page is drawn again
            fed["feed"]["messages"] = messages
        pusher = _pusher()
        if pusher is not None:
            fed["push"] = pusher.follow(key, parts, args, follows, drawn, files)
    return fed


def _feed_fragment(key, parts, args, follows):
    livepage.fragment_ticker(f"{key}.tick", **follows,
                             feed=lambda drawn, files: _fed(key, parts, args, follows, drawn, files))


def _whole_fragment(key, parts, args, follows):
    livepage.fragment_ticker(f"{key}.tick", **follows)
    parts(Section(feeding=False, fed=False), *args)


def section(key, parts, args, paths=(), follow_s=5.0, logs=False):
    """Draw the section `parts(live, *args)` (see above), kept current as `paths` change or, with `logs`,
    as the active jobs' logs grow, at most once per window of `follow_s` seconds."""
    follows = {"logs": logs, "paths": paths, "progress_s": follow_s}
    if livechart.published_urls() is None:
        st.fragment(_whole_fragment)(key, parts, args, follows)
        return
    live = Section(feeding=False)
    with _session_lock():
        parts(live, *args)
        st.session_state[f"{key}.shape"] = live.shape
        st.session_state.setdefault(livepage.FED_KEY, set()).add(key)
    st.fragment(_feed_fragment)(key, parts, args, follows)


# -- pushed feeds ----------------------------------------------------------------------------------


class _Feed:
    """One session's fed section, as the marker's thread keeps it current: what it follows, what its
    tab was last given (`store`, `logs`, `files`, `at`) and the number of its last pushed feed."""

    def __init__(self, session_id, key, name):
        self.session_id, self.key, self.name = session_id, key, name
        self.seq = 0

    def drawn(self, store, logs, files, at):
        self.store, self.logs, self.files, self.at = store, logs, dict(files), at

    def due(self, snap, files):
        """Whether `snap` (and `files`, the followed files' counters) has grown what the tab was given,
        in a later window of `progress_s` seconds than the last it was given: as the ticker's own rule
        (`ticker.js`, `due`). The windows are the same for every session, so the sessions that follow
        the same files are pushed in the same check, and what they share (`livechart_cache`) is made
        once. A store change draws the page again instead."""
        if snap.store_version != self.store:
            return False
        grew = (self.follow_logs and snap.logs_version != self.logs) or files != self.files
        return grew and math.floor(snap.checked_at / self.progress_s) > math.floor(self.at / self.progress_s)


class Pusher:
    """The fed sections of every session, kept current by the marker's thread (`MarkerFile.before_publish`)
    without a script run: when what a section follows has grown, its `parts` run in feeding mode in its
    session's context, and the messages are written to a static file of its own (`live-<pid>-feed-<token>.json`,
    a name that cannot be guessed) that its ticker fetches once the published marker says so. The tab
    then gets its elements' new points and lines with no Streamlit run at all: no script run, no redraw
    of the page's elements in the browser.

    A section whose fixed elements would change gets a feed that says so (`redraw`): its ticker reruns
    its fragment, which draws the page again. A session that is gone loses its feed and its file.
    One lock per session keeps the feeds and the session's own runs from interleaving their messages.
    """

    def __init__(self, watch, folder):
        self.watch, self.folder = watch, Path(folder)
        self._feeds = {}  # (session id, section key) -> _Feed
        self._lock = threading.Lock()

    def follow(self, key, parts, args, follows, drawn, files):
        """In a run of this session: the section `key` is drawn (`drawn`, a `live.Seen`; `files`, its
        followed files' counters) -> {"url", "seq"}: where its tab fetches its feeds, the number of the
        last one it has."""
        ctx = get_script_run_ctx()
        with self._lock:
            feed = self._feeds.get((ctx.session_id, key))
            if feed is None:
                name = f"{change_watch.MARKER_PREFIX}{os.getpid()}-feed-{secrets.token_urlsafe(16)}.json"
                feed = self._feeds[(ctx.session_id, key)] = _Feed(ctx.session_id, key, name)
        feed.parts, feed.args, feed.ctx, feed.lock = parts, args, ctx, _session_lock()
        feed.follow_logs, feed.paths, feed.progress_s = follows["logs"], tuple(follows["paths"]), follows["progress_s"]
        feed.drawn(drawn.store_version, drawn.logs_version, files, drawn.drawn_at)
        return {"url": f"app/static/{feed.name}", "seq": feed.seq}

    def __call__(self, snap):
        """The marker's thread, before publishing `snap`: push every feed that is due."""
        with self._lock:
            feeds = list(self._feeds.values())
        runtime = Runtime.instance() if Runtime.exists() else None
        for feed in feeds:
            if runtime is None or not runtime.is_active_session(feed.session_id):
                self._drop(feed)
                continue
            self.watch.paths_marker(feed.paths)  # still asked about: watched on (a run used to ask)
            files = change_watch.keyed_versions(self.watch.file_versions(feed.paths))
            if feed.due(snap, files):
                self._push(feed, snap, files)

    def _push(self, feed, snap, files):
        if not feed.lock.acquire(blocking=False):
            return  # the session is drawing: the next check pushes, or its run has drawn it all
        try:
            try:
                shown, (messages, changed) = _in_session(feed.ctx, lambda: self._messages(feed))
            except (Exception, ScriptControlException):  # noqa: BLE001 - its fragment's run says what is wrong
                _LOGGER.exception("live feed %s failed", feed.key)
                shown, messages, changed = True, {}, True
            if not shown:
                self._drop(feed)  # the tab shows another page now
                return
            feed.seq += 1
            feed.drawn(snap.store_version, snap.logs_version, files, snap.checked_at)
            body = {"seq": feed.seq, "logs": snap.logs_version, "files": files, "at": snap.checked_at,
                    "redraw": changed, "feed": {"id": next(_numbers), "messages": {} if changed else messages}}
            change_watch.publish(self.folder, feed.name, body)
        finally:
            feed.lock.release()

    @staticmethod
    def _messages(feed):
        """(whether the session's page still shows the section, `_feed_messages` if it does)."""
        if feed.key not in st.session_state.get(livepage.FED_KEY, ()):
            return False, ({}, False)
        return True, _feed_messages(feed.key, feed.parts, feed.args)

    def _drop(self, feed):
        with self._lock:
            self._feeds.pop((feed.session_id, feed.key), None)
        with contextlib.suppress(FileNotFoundError):
            (self.folder / feed.name).unlink()


def _session_lock():
    """The lock of this session's fed sections' messages (its runs and its pushed feeds take turns)."""
    lock = st.session_state.get(LOCK_KEY)
    if lock is None:
        lock = st.session_state[LOCK_KEY] = threading.RLock()
    return lock


def _in_session(ctx, call):
    """`call()` in this thread as if in a run of `ctx`'s session (its session state, its language)."""
    def run():
        thread = threading.current_thread()
        add_script_run_ctx(thread, ctx)
        try:
            return call()
        finally:
            setattr(thread, SCRIPT_RUN_CONTEXT_ATTR_NAME, None)
    return contextvars.copy_context().run(run)


@st.cache_resource(show_spinner=False)
def _pusher_of(marker_name):
    marker = livepage.marker()
    pusher = Pusher(livepage.watch(), marker.folder)
    marker.before_publish.append(pusher)
    return pusher


def _pusher():
    """The server's `Pusher`, or None where no marker is published (the ticker reruns the fragment)."""
    marker = livepage.marker()
    return None if marker is None else _pusher_of(marker.name)
