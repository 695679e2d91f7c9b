"""Rows (dicts) drawn as plain HTML tables: whole (`table_html`), as a header and blocks of rows that redraw
apart (`table_parts`), and as the messages of a live table (`table_message`: drawn once, then only its
changed cells; `mmcore/live/livetable.py` shows it). Cells never wrap or cut, a progress column is a bar, a
trend column a sparkline; all text is escaped.

The jobs table uses it (its rows: `mmcore.jobs.jobtable`), and so does any page's table of rows.
"""
import base64
import functools
import html
import math
import re
import secrets
import unicodedata
import zlib
from dataclasses import dataclass

from mmcore.base import message_chain

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
