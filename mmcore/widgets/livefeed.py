"""A page section drawn once by the page and then kept current through its ticker, which carries its
live elements' messages (its feed).

A section that follows growing logs is a function `parts(live, *args)` that puts its fixed elements
(errors, notes, headings, widgets) through `live.fixed` / `live.widget` and its live ones (charts,
log tails, lines of text, the Jobs table) through `live.chart`, `live.tail`, `live.text` and
`live.table`. `section` runs it in the
page's run, where everything is drawn, and then a small fragment holding only the section's ticker
(`livepage.fragment_ticker`). When the followed files change, the ticker reruns that fragment alone,
which runs `parts` again in feeding mode: fixed elements only say what they show, and live ones give
the message that brings their element up to date (the chains of `livechart_wire`). If the fixed
elements would show something else (a new metric, a health finding, an error), the page is drawn
again; otherwise the ticker takes every message to the browser in its one element and hands each to
its element (`window.__minimindReceivers`, by key). An update then costs the browser one small
element's data and the live elements' own work (Plotly drawing its new points), not Streamlit
drawing the section again.

An element that cannot follow its message (it was remounted, or missed one) is reported by the
ticker ("lost"), and the next message draws it whole.

Where the server has no static folder, live charts are Streamlit's own (`livechart`), which no feed
can update: there the whole section is a fragment drawn again at each change.
"""
import contextlib
import itertools

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from mmcore.widgets import livechart, livepage, livetable

TEXTS_KEY = "livefeed.texts"  # session state: text key -> the HTML this tab shows
_text = st.components.v2.component(
    "minimind_live_text", js=livepage.script("livetext.js"), isolate_styles=False,  # the page's tests read it
    css=".minimind-livetext { font-size: 1rem; line-height: 1.6; color: var(--st-text-color); }")
_numbers = itertools.count(1)  # orders a text's messages (an element's data, then its feed's)


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

    def widget(self, draw, *args, key, **kwargs):
        """The widget `draw(*args, key=key, **kwargs)` -> its value (in the feed's run, from the session
        state: the widget is the page's)."""
        self.shape.append(("widget", key))
        return st.session_state.get(key) if self.feeding else draw(*args, key=key, **kwargs)

    def note(self, *values):
        """Something the section's look depends on (a box open or closed): the page is drawn again when
        it changes."""
        self.shape.append(values)

    def columns(self, count):
        """`st.columns(count)`; in the feed's run, as many places that draw nothing."""
        self.shape.append(("columns", count))
        return [contextlib.nullcontext()] * count if self.feeding else st.columns(count)

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
        """A line of text `key`: `html` (made by the server, its text escaped) in a fed section, the same
        line as `markdown` where the whole section is drawn again at each change."""
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


def _messages(key, parts, args):
    """{"id", "messages"}: what the section's live elements are sent in a run of its fragment alone;
    none in the page's run, which drew them."""
    if not _fragment_run():
        return {"id": next(_numbers), "messages": {}}
    state = st.session_state
    triggers = state.get(f"{key}.tick")
    for element in ((triggers.get("lost") or {}) if isinstance(triggers, dict) else {}).get("keys", ()):
        _forget(element)
    live = Section(feeding=True)
    parts(live, *args)
    if live.shape != state.get(f"{key}.shape"):
        st.rerun(scope="app")  # what the section shows has changed: the page is drawn again
    return {"id": next(_numbers), "messages": live.messages}


def _feed_fragment(key, parts, args, follows):
    livepage.fragment_ticker(f"{key}.tick", **follows, feed=lambda: _messages(key, parts, args))


def _whole_fragment(key, parts, args, follows):
    livepage.fragment_ticker(f"{key}.tick", **follows)
    parts(Section(feeding=False, fed=False), *args)


def section(key, parts, args, paths=(), follow_s=5.0, logs=False):
    """Draw the section `parts(live, *args)` (see above), kept current as `paths` change or, with `logs`,
    as the active jobs' logs grow, at most every `follow_s` seconds."""
    follows = {"logs": logs, "paths": paths, "progress_s": follow_s}
    if livechart.published_urls() is None:
        st.fragment(_whole_fragment)(key, parts, args, follows)
        return
    live = Section(feeding=False)
    parts(live, *args)
    st.session_state[f"{key}.shape"] = live.shape
    st.fragment(_feed_fragment)(key, parts, args, follows)
