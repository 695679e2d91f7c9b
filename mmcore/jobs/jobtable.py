"""The jobs table and how jobs read: rows, durations, times, labels, URL job ids; the table as HTML
(`table_html`, `table_parts`) and as the messages of a live table (`table_message`: drawn once, then
only its changed cells; `mmcore/live/livetable.py` shows it).

Plain functions the Jobs and Logs pages and the sidebar share. A row's progress comes from
`mmcore.jobs.progress.ProgressCache`, which reads only what changed since the last refresh.
"""
import base64
import csv
import datetime
import functools
import getpass
import html
import io
import math
import os
import re
import secrets
import socket
import time
import unicodedata
import zlib
from dataclasses import dataclass

from mmcore.base import i18n, message_chain
from mmcore.jobs.jobrow import ACTIVE_STATUSES
from mmcore.train import train_types

#: Column order of the jobs table.
COLUMNS = ("id", "type", "name", "status", "progress", "step", "metric", "eta", "started", "duration", "submitted_by")

REFRESH_S = 2.0  # how often the Jobs page refreshes while something is queued or running


# -- formatting ---------------------------------------------------------------------------------

def format_duration(seconds):
    """A duration for people: "45s", "12m 05s", "3h 07m", "2d 04h"; "" for None."""
    if seconds is None:
        return ""
    seconds = int(max(0, round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m {seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h {minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours:02d}h"


def format_time(ts):
    """A unix time as local "YYYY-MM-DD HH:MM:SS"; "" for None."""
    if ts is None:
        return ""
    return datetime.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def type_short(train_type):
    """The short name of a job's type in the viewer's language ("GRPO", "预训练", "导出" for an export
    job), or the key itself for a type this version lacks."""
    t = train_types.TYPES.get(train_type)
    if t:
        return t.short_label
    key = f"type.short.{train_type}"  # the jobs that are not training: export, evaluate
    return i18n.t(key) if key in i18n.table(i18n.DEFAULT) else train_type


def metric_text(prog, digits=4):
    """The latest reward (first: it is what RL runs watch) or loss, named in the viewer's language:
    "Reward 0.5123", "奖励 0.5123"; "" when the log has printed neither."""
    if prog.reward is not None:
        name, value = prog.reward_name, prog.reward
    elif prog.loss is not None:
        name, value = prog.loss_name, prog.loss
    else:
        return ""
    return f"{metric_name(name)} {value:.{digits}g}"


def metric_name(name):
    """A loss's or reward's printed name ("Actor Loss") in the viewer's language; unknown names as printed."""
    key = "metric.name." + re.sub(r"\W+", "_", str(name).strip().lower())  # "Actor Loss" -> actor_loss
    return i18n.t(key) if key in i18n.table(i18n.DEFAULT) else name


def submitted_by(job):
    """"user@host" of a job."""
    return f"{job.user}@{job.host}" if job.host else job.user


def whoami():
    """"user@host" of this dashboard process."""
    try:
        user = getpass.getuser()
    except (OSError, KeyError):
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


def job_label(job):
    """How a job reads in a selector: "12 — grpo-20260102-1530"."""
    return f"{job.id} — {job.name}" if job.name else str(job.id)


def gpu_line(g):
    """One GPU for the sidebar: "GPU 0 · NVIDIA H200 · 1.2 / 139.8 GiB · 35%"."""
    gib = 1024 ** 3
    util = "" if g.utilization is None else f" · {g.utilization}%"
    return f"GPU {g.index} · {g.name} · {g.memory_used / gib:.1f} / {g.memory_total / gib:.1f} GiB{util}"


def needs_refresh(counts):
    """True while any job is queued or running (`counts`: status -> number, as JobStore.counts gives)."""
    return any(counts.get(status, 0) for status in ACTIVE_STATUSES)


def selector_key(prefix, ids, selected):
    """A widget key that changes with a selector's options and its selection (`prefix.<digest>`)."""
    digest = zlib.crc32(repr((list(ids), selected)).encode())
    return f"{prefix}.{digest:08x}"


def parse_job_id(text):
    """A job id from a query parameter -> (id, None) or (None, message for the user)."""
    if text is None or str(text).strip() == "":
        return None, None
    text = str(text).strip()
    if not text.isdigit():
        return None, f"'{text}' is not a job id (a job id is a whole number)."
    return int(text), None


def job_row(job, prog, now=None):
    """One row of the jobs table (a dict keyed by COLUMNS); `prog` is the job's progress.Progress."""
    now = time.time() if now is None else now
    duration = None
    if job.started_at is not None:
        duration = (job.ended_at if job.ended_at is not None else now) - job.started_at
    step = f"{prog.step}/{prog.total}" if prog.total else ""
    return {
        "id": job.id,
        "type": type_short(job.train_type),
        "name": job.name,
        "status": job.status,
        # A job that succeeded is done even when its last log line came before the last step.
        "progress": 100.0 if job.status == "succeeded" else round(prog.percent or 0.0, 1),
        "step": step,
        "metric": metric_text(prog),
        "eta": format_duration(prog.eta_s) if job.status == "running" else "",
        "started": format_started(job.started_at, now),
        "duration": format_duration(duration),
        "submitted_by": submitted_by(job),
    }


TABLE_HEIGHT_PX = 440  # the jobs table scrolls inside this height, its header row staying in view
_TABLE_CSS = """<style>
.minimind-table{{overflow:auto;border:1px solid rgba(128,128,128,0.25);border-radius:0.5rem}}
.minimind-table table{{border-collapse:separate;border-spacing:0;width:100%;font-size:0.85rem;margin:0}}
.minimind-table th,.minimind-table td{{white-space:nowrap;padding:0.3rem 0.6rem;text-align:left;border:none;
border-bottom:1px solid rgba(128,128,128,0.15);vertical-align:middle}}
.minimind-table th{{position:sticky;top:0;z-index:1;background:{header};font-weight:600}}
.minimind-table td.num{{text-align:right;font-variant-numeric:tabular-nums}}
.minimind-table .bar{{display:inline-block;width:56px;height:6px;border-radius:3px;margin-right:0.4rem;
background:rgba(128,128,128,0.25);vertical-align:middle}}
.minimind-table .bar>span{{display:block;height:100%;border-radius:3px;background:#ff4b4b}}
.minimind-table img{{vertical-align:middle}}
.minimind-table .wrap{{display:inline-block;white-space:normal;max-width:22ch;overflow-wrap:anywhere;vertical-align:middle}}
.minimind-table-head,.minimind-table-rows{{border:none;border-radius:0;overflow:visible}}
.minimind-table table.fixed{{table-layout:fixed}}
.minimind-table table.fixed td,.minimind-table table.fixed th{{overflow:hidden}}
{sticky}</style>"""
# Sticky header cells need an opaque background: the page's own, by theme.
_HEADER_BACKGROUND = {"light": "#f7f7f9", "dark": "#1b1e26"}
SPARK_W, SPARK_H = 80, 20
SPARK_COLOR = "#3d8bd9"  # reads on light and dark themes alike


def _finite(values):
    return [float(v) for v in values or () if v is not None and math.isfinite(float(v))]


def sparkline_svg(values, width=SPARK_W, height=SPARK_H):
    """A series as a small SVG line (one value: a dot; a constant series: a flat line); "" when it
    has no finite value."""
    points = _finite(values)
    if not points:
        return ""
    low, high = min(points), max(points)
    span = high - low
    pad = 2.0

    def y(v):
        return height / 2 if span == 0 else pad + (height - 2 * pad) * (high - v) / span

    head = f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}">'
    if len(points) == 1:
        return f'{head}<circle cx="{width / 2:.1f}" cy="{y(points[0]):.1f}" r="2" fill="{SPARK_COLOR}"/></svg>'
    step = (width - 2 * pad) / (len(points) - 1)
    coords = " ".join(f"{pad + i * step:.1f},{y(v):.1f}" for i, v in enumerate(points))
    return f'{head}<polyline fill="none" stroke="{SPARK_COLOR}" stroke-width="1.3" points="{coords}"/></svg>'


def sparkline_img(values, width=SPARK_W, height=SPARK_H):
    """The sparkline as an <img> (a page's HTML is sanitised without SVG; an image's data is not
    HTML); its tooltip gives the first and last value. "" when there is nothing to draw."""
    svg = sparkline_svg(values, width, height)
    if not svg:
        return ""
    points = _finite(values)
    data = base64.b64encode(svg.encode()).decode()
    return (f'<img width="{width}" height="{height}" alt="" title="{points[0]:.4g} → {points[-1]:.4g}" '
            f'src="data:image/svg+xml;base64,{data}">')


def sparkline_inline(values, width=SPARK_W, height=SPARK_H):
    """The sparkline as inline SVG, for HTML that is not sanitised (the live table's): no image to
    decode, about half the bytes of `sparkline_img`; the same tooltip. "" when there is nothing to draw."""
    svg = sparkline_svg(values, width, height)
    if not svg:
        return ""
    points = _finite(values)
    return f'<span title="{points[0]:.4g} → {points[-1]:.4g}">{svg}</span>'


def _cell_body(column, value, inline_svg=False):
    """What a cell holds (its inner HTML)."""
    if column == "progress":
        percent = max(0.0, min(100.0, float(value or 0)))
        return f'<span class="bar"><span style="width:{percent:.1f}%"></span></span>{percent:.0f}%'
    if column == "trend":
        return _inline_sparkline(tuple(value or ())) if inline_svg else sparkline_img(value)
    if column in _WRAP_CH:  # a long name wraps instead of widening the table past the page
        return f'<span class="wrap">{html.escape("" if value is None else str(value))}</span>'
    return html.escape("" if value is None else str(value))


@functools.lru_cache(maxsize=4096)
def _inline_sparkline(values):
    # Every live table's every update asks for every row's sparkline; most rows' trends never change.
    return sparkline_inline(values)


def _td(column, body, named=True):
    # `named`: the cell says its column (`data-column`); the live table's cells do not (its header does):
    # 14 attributes fewer per row to send and hold.
    css = ' class="num"' if column == "id" else ""
    return f'<td data-column="{column}"{css}>{body}</td>' if named else f"<td{css}>{body}</td>"


def _cell(column, value):
    return _td(column, _cell_body(column, value))


def table_html(rows, columns, headers, helps=None, theme="light", height=TABLE_HEIGHT_PX):
    """Rows (dicts) as a plain HTML table: `columns` in order, `headers` column -> header text, `helps`
    column -> a header's tooltip. Cells never wrap or cut (the table scrolls sideways instead); the
    header row stays in view while it scrolls. A progress column is drawn as a bar, a trend column (a
    list of numbers) as a sparkline; all text is escaped.

    Plain HTML rather than `st.dataframe`: the data grid is a large script a fresh page loads and runs
    before it draws a row, most of a fresh Jobs page's load time."""
    helps = helps or {}
    head = _header_row(columns, headers, helps)
    body = "".join(_row(columns, row) for row in rows)
    return (f'{_css(theme)}<div class="minimind-table" style="max-height:{int(height)}px"><table>'
            f'<thead>{head}</thead><tbody>{body}</tbody></table></div>')


def _css(theme, key=None):
    # `key`: the Streamlit container (a scrolling one) the parts are drawn in, the header first, in its
    # own container. Streamlit wraps that container in a block of its own height: the wrapper (the
    # first child) is what sticks. Without padding, no row shows above the header.
    sticky = (f".st-key-{key}{{padding:0}}.st-key-{key}>div:first-child{{position:sticky;top:0;z-index:2}}"
              if key else "")
    return _TABLE_CSS.format(header=_HEADER_BACKGROUND.get(theme, _HEADER_BACKGROUND["light"]), sticky=sticky)


def _header_row(columns, headers, helps):
    return "<tr>" + "".join(
        f'<th data-column="{c}"' + (f' title="{html.escape(helps[c])}"' if helps.get(c) else "")
        + f">{html.escape(headers.get(c, c))}</th>" for c in columns) + "</tr>"


def _row(columns, row):
    return "<tr>" + "".join(_cell(c, row.get(c)) for c in columns) + "</tr>"


# Least widths of the columns drawn as pictures: a progress bar and its "100%", a sparkline.
_PICTURE_CH = {"progress": 13, "trend": 12}
# Most widths of the columns whose text wraps (the `.wrap` span's max-width).
_WRAP_CH = {"name": 22}


def text_width_ch(text):
    """How many `ch` (widths of "0") a text needs in the table's font, generously: wide (CJK)
    characters count two, others 1.15."""
    return sum(2.0 if unicodedata.east_asian_width(ch) in "WF" else 1.15 for ch in str(text))


def column_widths(rows, columns, headers):
    """Each column's width in ch: its longest cell or header (headers are bold: 10% more)."""
    widths = {}
    for c in columns:
        cells = [0.0] if c in _PICTURE_CH else [text_width_ch("" if row.get(c) is None else row[c]) for row in rows]
        widths[c] = math.ceil(max(cells + [_PICTURE_CH.get(c, 0), 1.1 * text_width_ch(headers.get(c, c))]))
        if c in _WRAP_CH:
            widths[c] = min(widths[c], _WRAP_CH[c])
    return widths


def shown_columns(rows, columns):
    """The columns worth a place on the page: "submitted_by" only when the rows were submitted by more
    than one user@host (the selected job's details say who submitted it); the CSV keeps every column."""
    if "submitted_by" in columns and len({row.get("submitted_by") for row in rows}) <= 1:
        return [c for c in columns if c != "submitted_by"]
    return list(columns)


ROW_PX, HEAD_PX = 33, 40  # a drawn row's and the header's height


def parts_height(n_rows, most=TABLE_HEIGHT_PX):
    """The height (px) of a container that shows `n_rows` rows and their header without scrolling,
    up to `most`."""
    return min(most, HEAD_PX + ROW_PX * max(1, n_rows) + 4)


def table_parts(rows, columns, headers, helps=None, theme="light", changing=(), key=None):
    """The rows as a header and blocks of rows, each its own HTML table with the same fixed column
    widths, to be drawn one under the other: (header html, [block html, ...]).

    A page redraws an HTML element only when its text changed; `changing[i]` says whether row i changes
    while the page is open (an active job's progress), and consecutive rows alike share a block, so a
    running job redraws its own block, not the whole table. `key`: the key of the scrolling Streamlit
    container the parts are drawn in; drawn first, in a container of its own inside it, the header
    stays in view while the rows scroll."""
    helps = helps or {}
    widths = column_widths(rows, columns, headers)
    total = sum(widths.values())
    pad = 1.2 * len(columns)  # rem: each cell's padding
    cols = "<colgroup>" + "".join(f'<col style="width:calc({w}ch + 1.2rem)">' for w in widths.values()) + "</colgroup>"
    table = f'<table class="fixed" style="min-width:calc({total}ch + {pad:.1f}rem)">{cols}'
    head = (f'{_css(theme, key)}<div class="minimind-table minimind-table-head">{table}<thead>'
            f'{_header_row(columns, headers, helps)}</thead></table></div>')
    changing = list(changing) + [False] * (len(rows) - len(changing))
    blocks, start = [], 0
    for i in range(1, len(rows) + 1):
        if i == len(rows) or changing[i] != changing[start]:
            body = "".join(_row(columns, row) for row in rows[start:i])
            blocks.append(f'<div class="minimind-table minimind-table-rows">{table}<tbody>{body}</tbody></table></div>')
            start = i
    return head, blocks


# -- the live table: drawn once, then only its changed cells -------------------------------------------

@dataclass(frozen=True)
class SentTable:
    """What one session last sent for one live table: the message chain (`epoch`, `seq`), a digest of
    its look (`layout`: a CRC-32 of columns, headers, theme, height), its rows' keys in order, and per row the
    CRC-32 of each of its cells (4 bytes each: a table of 2,000 rows costs a session about 200 kB)."""
    epoch: str
    seq: int
    layout: int
    keys: tuple
    cells: tuple


def _cells_digest(cells):
    return b"".join(zlib.crc32(cell.encode()).to_bytes(4, "little") for cell in cells)


def table_message(rows, columns, headers, helps=None, theme="light", sent=None, row_key="id",
                  height=TABLE_HEIGHT_PX):
    """(the live table component's data, the new `SentTable`) for showing `rows` where `sent` was sent
    last (None: nothing, or the browser lost it).

    The first message draws the table whole ("draw": `table_html`'s table, each row marked with its
    `row_key` value, sparklines as inline SVG). While the same rows are shown in the same order with the
    same look, later messages carry only the cells whose content changed ("patch": [row index, column
    index, inner HTML]), so a running job's progress, ETA and sparkline change in place and the rest of
    the table is not touched; "same" when nothing changed. A new, removed or reordered row, or another
    look, draws the table again. Every message carries its chain (`epoch`, new at each draw) and number
    (`seq`); a patch also the number it follows (`after`), so a browser that missed one asks for a draw.
    """
    columns = list(columns)
    helps = helps or {}
    cells = [[_cell_body(c, row.get(c), inline_svg=True) for c in columns] for row in rows]
    keys = tuple(row.get(row_key) for row in rows)
    layout = zlib.crc32(repr((columns, sorted(headers.items()), sorted(helps.items()), theme, height)).encode())
    digests = tuple(_cells_digest(row_cells) for row_cells in cells)
    if sent is None or sent.layout != layout or sent.keys != keys:
        epoch = secrets.token_hex(4)
        body = "".join(f'<tr data-row="{html.escape(str(k))}">'
                       + "".join(_td(c, b, named=False) for c, b in zip(columns, row_cells)) + "</tr>"
                       for k, row_cells in zip(keys, cells))
        table = (f'{_css(theme)}<div class="minimind-table" style="max-height:{int(height)}px"><table>'
                 f'<thead>{_header_row(columns, headers, helps)}</thead><tbody>{body}</tbody></table></div>')
        return {"op": "draw", "epoch": epoch, "seq": 1, "html": table}, SentTable(epoch, 1, layout, keys, digests)
    changes = []
    for i, (old, new) in enumerate(zip(sent.cells, digests)):
        if old != new:
            changes.extend([i, j, cells[i][j]] for j in range(len(columns))
                           if old[4 * j:4 * j + 4] != new[4 * j:4 * j + 4])
    if not changes:
        return {"op": "same", "epoch": sent.epoch, "seq": sent.seq}, sent
    seq = sent.seq + 1
    return ({"op": "patch", "epoch": sent.epoch, "seq": seq, "after": sent.seq, "cells": changes},
            SentTable(sent.epoch, seq, layout, keys, digests))


def apply_message(held, data):
    """What a browser holding `held` ({"epoch", "seq", "rows": [[cell inner HTML, ...], ...]}, or None)
    holds after `data`, or None when it cannot follow it (it must ask for a draw): the component's rules
    (`components/livetable.js`), for tests."""
    return message_chain.follow(held, data, _drawn_rows, _patched_rows)


def _drawn_rows(data):
    rows_html = re.findall(r"<tr data-row=[^>]*>(.*?)</tr>", data["html"])
    return {"rows": [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in rows_html]}


def _patched_rows(held, data):
    rows = [list(row) for row in held["rows"]]
    if not all(i < len(rows) and j < len(rows[i]) for i, j, _ in data["cells"]):
        return None
    for i, j, body in data["cells"]:
        rows[i][j] = body
    return {"rows": rows}


def rows_csv(rows, columns, headers):
    """The table as CSV text (header row as shown; a trend as its values joined by spaces)."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow([headers.get(c, c) for c in columns])
    for row in rows:
        writer.writerow([" ".join(f"{v:.6g}" for v in row.get(c) or ()) if c == "trend" else row.get(c, "")
                         for c in columns])
    return out.getvalue()


def format_started(ts, now=None):
    """A start time, short: "17:39" today, "12-02 17:39" this year, "2025-12-02 17:39" before; "" for None."""
    if ts is None:
        return ""
    when = datetime.datetime.fromtimestamp(ts)
    today = datetime.datetime.fromtimestamp(time.time() if now is None else now)
    if when.date() == today.date():
        return when.strftime("%H:%M")
    return when.strftime("%m-%d %H:%M" if when.year == today.year else "%Y-%m-%d %H:%M")


def job_rows(jobs, cache, now=None):
    """The jobs table's rows, in the order given; `cache` is a progress.ProgressCache."""
    now = time.time() if now is None else now
    return [job_row(job, cache.progress(job, now), now) for job in jobs]


def mark_resumes(rows, parents):
    """Rows whose job resumed another ({job id: resumed job's id}) read "↳ name (resumes 12)"."""
    for row in rows:
        if row["id"] in parents:
            row["name"] = f"↳ {row['name']} (resumes {parents[row['id']]})"
    return rows


def params_rows(job):
    """A job's parameters as [{"parameter", "value"}] for a table, in the type's command-line order
    (then anything else the job stored)."""
    t = train_types.TYPES.get(job.train_type)
    order = list(t.names) if t else []
    names = [n for n in order if n in job.params] + sorted(n for n in job.params if n not in order)
    rows = []
    for name in names:
        value = job.params[name]
        if isinstance(value, (list, tuple)):
            value = ",".join(str(v) for v in value)
        rows.append({"parameter": name, "value": "" if value is None else str(value)})
    return rows
