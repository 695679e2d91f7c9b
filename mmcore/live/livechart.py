"""Live charts in the page: a small component (`components/livechart.js`) that draws a
`mmcore.logs.charts.Chart` with Plotly.js and, while the same chart is shown, gets only the points
that changed (`livechart_wire`), so a page that follows a growing log redraws no chart from scratch
and keeps the user's zoom, pan and legend choices.

Plotly.js is its "basic" bundle (`components/plotly-basic.min.js`: plotly.js-basic-dist-min 4.1.1,
MIT licence), put in the server's static folder once per server
(`plotly-basic.min-<digest>.js`, ignored by git) with the chart's code (`livechart-<digest>.js`) and
loaded by the page from there: nothing is fetched from elsewhere, and a page run sends a chart its data
only. A `Chart` holds line traces only (no trace type: Plotly's default, scatter), which the basic
bundle draws; it is a quarter of the full bundle's size, and a fresh tab runs it in about a fifth of
the time (about 0.2 s against 1.2 s here).

Where the server has no static folder (`server.enableStaticServing` off, a read-only checkout; also
Streamlit's AppTest) the chart is Streamlit's own `st.plotly_chart`, drawn whole at each run.

A chart zoomed or panned by the user reports its x range (`requested_view`), so the page can send
that range at full resolution.
"""
import dataclasses
import math

import streamlit as st

from mmcore.live import livechart_wire, livepage

PLOTLY_JS = livepage.COMPONENTS / "plotly-basic.min.js"
CHART_JS = livepage.COMPONENTS / "livechart.js"
CONFIG = {"displaylogo": False}
SENT_KEY = "livechart.sent"  # session state: chart key -> livechart_wire.Sent, what this tab holds
_component = st.components.v2.component("minimind_live_chart", js=livepage.LOADER_JS,
                                        css=".minimind-livechart { width: 100%; }",
                                        isolate_styles=False)  # Plotly styles the page's document


_FILES = {"plotly": (PLOTLY_JS, livepage.module_name(PLOTLY_JS)), "module": (CHART_JS, livepage.module_name(CHART_JS))}


def published_urls():
    """{"plotly", "module"}: the addresses of Plotly.js and the chart's code in the static folder
    (`livepage.published`), or None where this server serves no static files."""
    return livepage.published(_FILES)


def _state(key):
    value = st.session_state.get(key)
    return value if isinstance(value, dict) else {}


def requested_view(key, revision):
    """The x range (low, high) the user zoomed the chart `key` to, while it shows `revision`; None
    when it shows all of it."""
    view = _state(key).get("view")
    try:
        if view and view.get("rev") == revision:
            low, high = (float(v) for v in view["x"])
            if math.isfinite(low) and math.isfinite(high) and low < high:
                return low, high
    except (AttributeError, KeyError, TypeError, ValueError):
        pass
    return None


def _noop():
    pass  # the component's state and triggers are read, not acted on


def _message(chart, key, revision):
    """What the component of chart `key` is sent for `chart` at `revision`, and this tab's record of it."""
    chart = dataclasses.replace(chart, layout={**chart.layout, "uirevision": revision})
    sent = st.session_state.setdefault(SENT_KEY, {})
    data, sent[key] = livechart_wire.chart_message(chart, None if _state(key).get("lost") else sent.get(key))
    return chart, data


def feed_message(chart, key, revision):
    """The message that brings the drawn live chart `key` to `chart` (see `mmcore.live.livefeed`), or
    None when it holds that already."""
    _chart, data = _message(chart, key, revision)
    return None if data["op"] == "same" else data


def forget(key):
    """The browser lost chart `key`: its next message draws it whole."""
    st.session_state.get(SENT_KEY, {}).pop(key, None)


def show(chart, key, revision, on_select=None):
    """Draw `chart` (a `charts.Chart`) as the live chart `key`. `revision` names what the user's zoom
    belongs to: the same revision keeps it, a new one (another axis, another range) starts afresh.

    Returns, in the shape of Streamlit's chart selection event ({"selection": {"points": [...]}}), the
    point clicked in this run, or None. `on_select` is what Streamlit's own chart does on a click."""
    urls = published_urls()
    if urls is None:
        figure = dataclasses.replace(chart, layout={**chart.layout, "uirevision": revision}).figure()
        if on_select is None:
            st.plotly_chart(figure, key=key, config=CONFIG)
            return None
        return st.plotly_chart(figure, key=key, config=CONFIG, on_select=on_select, selection_mode="points")
    chart, data = _message(chart, key, revision)
    data.update(urls, key=key, height=chart.layout.get("height"))
    result = _component(key=key, data=data, default={"view": None}, on_view_change=_noop, on_lost_change=_noop,
                        on_clicked_change=_noop)
    return {"selection": {"points": [result.clicked]}} if result.clicked else None
