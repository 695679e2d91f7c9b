"""Rows of a jsonl file by 1-based line number, and a bounded search, without a full scan.

The first rows show at once (a 1 GB file is read only as far as asked); a jump to a far line reads up
to it, within `budget` bytes (`TooFar` past them); a search stops after `limit` hits or `budget` bytes,
and says how far it looked.
"""
import json
from dataclasses import dataclass

from dataset.formats import lines_within, row_problem
from mmcore.base.regular_file import open_regular

SEARCH_BUDGET = 256 * 2**20
MAX_LINE_CHARS = 200_000  # longer rows are shown cut (the worker still gets the whole line)


class TooFar(ValueError):
    """The line asked for is past the bytes a jump may read (`budget`, the first line of `args`)."""


@dataclass
class Row:
    line: int
    text: str  # the line as text (undecodable bytes replaced)
    obj: object  # the parsed JSON, or None when the line is not JSON


def _row(line, raw, size=None):
    """A row; one too long or too deep to parse (`dataset.formats.row_problem`) is shown as its start, unparsed."""
    if row_problem(raw, size):
        return Row(line, raw[:MAX_LINE_CHARS].decode("utf-8", errors="replace").strip(), None)
    text = raw.decode("utf-8", errors="replace").strip()
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        obj = None
    return Row(line, text, obj)


def read(path, start=1, count=20, budget=None):
    """Up to `count` non-blank rows from line `start` on; TooFar when the lines before `start` are more than
    `budget` bytes (None: no limit)."""
    out, skipped = [], 0
    with open_regular(path) as f:
        for line, (raw, size) in enumerate(lines_within(f), 1):
            if line < start:
                skipped += size
                if budget is not None and skipped > budget:
                    raise TooFar(budget)
                continue
            if not raw.strip():
                continue
            out.append(_row(line, raw, size))
            if len(out) >= count:
                break
    return out


def line(path, number, budget=None):
    """The row at line `number`, or None past the end (or a blank line); TooFar when it starts past `budget`
    bytes (None: SEARCH_BUDGET)."""
    rows = read(path, number, 1, SEARCH_BUDGET if budget is None else budget)
    return rows[0] if rows and rows[0].line == number else None


def search(path, text, limit=50, budget=SEARCH_BUDGET):
    """(rows containing `text` (case-insensitive), bytes searched, whole file searched?)."""
    needle = text.lower().encode("utf-8")
    found, done = [], 0
    with open_regular(path) as f:
        for number, (raw, size) in enumerate(lines_within(f), 1):
            done += size
            if needle in raw.lower() or (size == len(raw) and needle in _unescaped(raw)):
                found.append(_row(number, raw, size))
                if len(found) >= limit:
                    return found, done, False
            if done >= budget:
                return found, done, f.read(1) == b""
    return found, done, True


def _unescaped(raw):
    """A line with JSON's \\uXXXX escapes decoded (upstream files escape every Chinese character)."""
    if b"\\u" not in raw:
        return b""
    if row_problem(raw):
        return b""
    try:
        return json.dumps(json.loads(raw), ensure_ascii=False).lower().encode("utf-8")
    except (ValueError, RecursionError):
        return b""
