"""The Jobs page's table as a live table: a small in-page component (`components/livetable.js`) that is
sent the table whole once and then, while the same rows show, only the cells that changed
(`htmltable.table_message`).

Why a component of our own rather than Streamlit's HTML element: an `st.html` element is drawn again
whole (sanitised, parsed, laid out) whenever its text changes, so a running job's progress and
sparkline redrew its block of rows every few seconds. The component keeps the table in the page and
replaces the few cells that changed (the running jobs' progress, step, metric, ETA, duration and
sparkline); the table's look, its header that stays in view, its order and its CSV download are those
of `htmltable.table_html`. Its HTML is set by the component, not sanitised by Streamlit, so sparklines
are inline SVG rather than images, and a fresh page draws the table without Streamlit's sanitiser.
A full cell is sent rather than the sparkline's new points: a trend is at most 40 points, a few hundred
bytes, and one drawing of it (`htmltable.sparkline_svg`) serves every way the table is shown. A page's
full run sends the table whole (`forget`); the runs of the fragment around it send its changes.

The component's code is a file of the server's static folder (`livepage.published`), so a page run
sends the table its data only. Where the server has no static folder (static serving off, a read-only
checkout; also Streamlit's AppTest) the table is drawn as Streamlit HTML blocks instead
(`htmltable.table_parts`: a block redraws only when its text changes).

In a fed section (`mmcore.live.livefeed`) the page's run draws the table and its feed's runs bring it
up to date (`feed_message`): the message goes through the section's ticker to the element registered
under the table's key.
"""

import streamlit as st

from mmcore.jobs import htmltable
from mmcore.live import livepage

SENT_KEY = "livetable.sent"  # session state: table key -> htmltable.SentTable, what this tab holds
_FILES = {"module": livepage.bundle("receiver.js", "livetable.js")}
_component = st.components.v2.component("minimind_live_table", js=livepage.LOADER_JS,
                                        isolate_styles=False)  # the page's tests and benches read its cells


def _noop():
    pass  # the "lost" trigger reruns what holds the table (the page, or a fragment); that run reads it


def forget(key):
    """Send the table `key` whole when it is next shown. For a page's full run: the page may have been
    opened again, its table a new element that holds nothing (it would ask for a draw, one run later)."""
    st.session_state.get(SENT_KEY, {}).pop(f"{key}.live", None)


def show(rows, columns, headers, helps=None, key="table", changing=()):
    """Draw `rows` (dicts) as the table `key`: `columns` in order, `headers` column -> header text,
    `helps` column -> a header's tooltip; `changing[i]` says whether row i changes while the page is
    open (used where the table is drawn as HTML blocks). The table is inside a container keyed `key`."""
    urls = livepage.published(_FILES)
    if urls is None:
        head, blocks = htmltable.table_parts(rows, columns, headers, helps, theme=st.context.theme.type,
                                             changing=changing, key=key)
        with st.container(height=htmltable.parts_height(len(rows)), gap=None, border=True, key=key):
            with st.container(key=f"{key}_head"):
                st.html(head)
            for block in blocks:
                st.html(block)
        return
    with st.container(key=key):
        _component(key=f"{key}.live", data={**_message(rows, columns, headers, helps, key), "key": key,
                                             "module": urls["module"]}, on_lost_change=_noop)


def _message(rows, columns, headers, helps, key):
    live_key = f"{key}.live"
    sent = st.session_state.setdefault(SENT_KEY, {})
    state = st.session_state.get(live_key)
    lost = isinstance(state, dict) and state.get("lost")
    data, sent[live_key] = htmltable.table_message(rows, columns, headers, helps, theme=st.context.theme.type,
                                                   sent=None if lost else sent.get(live_key))
    return data


def feed_message(rows, columns, headers, helps, key):
    """The message that brings the drawn table `key` to `rows` (see `show`), or None when it shows them."""
    data = _message(rows, columns, headers, helps, key)
    return None if data["op"] == "same" else data
