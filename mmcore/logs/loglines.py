"""Progress lines of MiniMind logs -> one compact array per column.

Every `name: value` pair after the `Epoch/Step` head of a progress line is a metric under its
printed name (`loss`, `Actor Loss`, `KL_ref`, ...), so fields a trainer appends later chart without
changes here. The first line of each shape is parsed the general way and becomes a template (its
text with the numbers turned into capture groups); one regex then pulls the numbers of every
progress line of a block out in one `findall` (the regex of the block's one shape; of all
templates where shapes mix), and pandas' C CSV reader converts them. Noise lines cost a fast
literal scan. Records are kept as one array per column, never as a list of lines or dicts.
"""
import io
import re

import numpy as np
import pandas as pd

from mmcore.logs.logtext import ANSI_RE, decode
from mmcore.logs.logtext import SPACES as _SP

#: The columns every parsed table starts with, in this order; metric columns follow.
INDEX_COLUMNS = ("epoch", "total_epochs", "step", "total_steps", "global_step")

MAX_TEMPLATES = 32  # progress-line shapes remembered (a log has one or two)

_INT = rb"(\d+)"
# Numbers as Python and C print them: 8.896761, 0.000549999999, 8.00e-08, -1.5, 3., .5, nan, inf.
_NUMBER = rb"[-+]?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|(?i:nan|inf(?:inity)?))"

# Progress lines are found by their literal start (`Epoch:`; `Step:` in one old SPO format), which
# the regex engine searches for at memchr speed, and end at the newline: `[^\r\n]*\r?\n` means a
# line rewritten by a later `\r` (a tqdm bar drawn over it) is not a record, because only the text
# after a line's last `\r` is what a terminal shows.
_EPOCH_LINE_RE = re.compile(rb"Epoch:([^\r\n]*)\r?\n")
_ANY_LINE_RE = re.compile(rb"(Epoch:|Step:)([^\r\n]*)\r?\n")  # for blocks that hold `Step:` lines
# The head after `Epoch:`: `[1/2](100/44160)` or `1, Step: 5/100` (the epoch total optional).
_EPOCH_HEAD_RE = re.compile(
    _SP + rb"(?:\[" + _SP + _INT + _SP + rb"/" + _SP + _INT + _SP + rb"\]" + _SP      # [1/2]
    + rb"\(" + _SP + _INT + _SP + rb"/" + _SP + _INT + _SP + rb"\)"                  # (100/44160)
    + rb"|" + _INT + rb"(?:" + _SP + rb"/" + _SP + _INT + rb")?" + _SP + rb"," + _SP  # 1[/2],
    + rb"Step:" + _SP + _INT + _SP + rb"/" + _SP + _INT + rb")")                     # Step: 5/100
_STEP_HEAD_RE = re.compile(_SP + _INT + _SP + rb"/" + _SP + _INT)  # after a bare `Step:`

# `name: value` pairs; a name is words separated by single spaces (`Avg Response Len`).
_METRIC_RE = re.compile(
    rb"(?<![\w.])([A-Za-z_][\w/]*(?: [A-Za-z_][\w/]*)*)" + _SP + rb"[:=]" + _SP + rb"(" + _NUMBER + rb")")
_LITERAL_NUMBER_RE = re.compile(rb"(?<![\w.])[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?(?![\w.])")


def _literal_pattern(text):
    """A regex for template text: exact, except that free-standing numbers (a `/4.56 GB` after a
    value) match any number, so such lines share one template."""
    parts, pos = [], 0
    for m in _LITERAL_NUMBER_RE.finditer(text):
        parts.append(re.escape(text[pos:m.start()]))
        parts.append(rb"(?:" + _LITERAL_NUMBER_RE.pattern + rb")")
        pos = m.end()
    parts.append(re.escape(text[pos:]))
    return b"".join(parts)



class Columns:
    """Progress records as one numpy array per column: 8 bytes per value, no per-record objects.

    Each array has room to grow: appending a block writes after the rows held, so a frame taken
    earlier without copying (`frame(copy=False)`) still shows what it showed. A metric absent from
    a record is NaN in its column; columns are padded lazily (on their next value, or when read), so
    adding a value costs O(1).
    """

    def __init__(self):
        self._rows = 0
        # epoch, total epochs (0: the line did not say, `Epoch: 1, Step: ...`), step, total steps and
        # the global step they make
        self._index = {name: np.empty(0, np.int64) for name in (*INDEX_COLUMNS[:4], "global_step")}
        self.metrics = {}  # printed name -> float64 array; its first `_filled[name]` values are set
        self._filled = {}

    def __len__(self):
        return self._rows

    def add_metric(self, name):
        """A column for metric `name`, if it has none yet."""
        if name not in self.metrics:
            self.metrics[name] = np.empty(0)
            self._filled[name] = 0

    @staticmethod
    def _room(column, used, size):
        """`column` (its first `used` values) in an array of at least `size` values."""
        if len(column) >= size:
            return column
        grown = np.empty(max(size, len(column) + len(column) // 2, 1024), column.dtype)
        grown[:used] = column[:used]
        return grown

    def _pad(self, name, rows):
        filled = self._filled[name]
        if filled < rows:
            column = self.metrics[name] = self._room(self.metrics[name], filled, rows)
            column[filled:rows] = np.nan
            self._filled[name] = rows

    def padded(self, name):
        """The metric's column (a view of its values, NaN-padded to the number of records)."""
        self._pad(name, self._rows)
        return self.metrics[name][:self._rows]

    def append(self, epoch, total_epochs, step, total_steps, metrics):
        """Add a block of records: int64 arrays of their heads and {name: float64 array} of metrics."""
        n, m = self._rows, len(step)
        values = {"epoch": epoch, "total_epochs": total_epochs, "step": step, "total_steps": total_steps,
                  "global_step": (epoch - 1) * total_steps + step}
        for name, block in values.items():
            column = self._index[name] = self._room(self._index[name], n, n + m)
            column[n:n + m] = block
        for name, block in metrics.items():
            self._pad(name, n)
            column = self.metrics[name] = self._room(self.metrics[name], n, n + m)
            column[n:n + m] = block
            self._filled[name] = n + m
        self._rows = n + m

    def fit(self):
        """Leaves each column room for a little more than 1/16 of its rows (after a long read)."""
        room = self._rows + self._rows // 16 + 1024
        for name in self.metrics:
            self._pad(name, self._rows)
        for columns in (self._index, self.metrics):
            for name, column in columns.items():
                if len(column) != room:
                    fitted = columns[name] = np.empty(room, column.dtype)
                    fitted[:self._rows] = column[:self._rows]

    def rows(self, start=0, stop=None):
        """Records `start:stop` as dicts (metrics that are NaN are left out)."""
        stop = len(self) if stop is None else min(stop, len(self))
        names = list(self.metrics)
        cols = [self.padded(name)[start:stop].tolist() for name in names]
        heads = zip(*(self._index[name][start:stop].tolist() for name in (*INDEX_COLUMNS[:4], "global_step")))
        out = []
        for i, (epoch, total_epochs, step, total_steps, global_step) in enumerate(heads):
            record = {"epoch": epoch, "total_epochs": total_epochs or None, "step": step,
                      "total_steps": total_steps, "global_step": global_step}
            for name, col in zip(names, cols):
                value = col[i]
                if value == value:  # not NaN
                    record[name] = value
            out.append(record)
        return out

    def first_step(self):
        """The global step of the first record (None when there is none)."""
        return int(self._index["global_step"][0]) if self._rows else None

    def frame(self, copy=True):
        """The records as a DataFrame. `copy=False` shares the arrays' memory (later records do not
        change it): read it, never change it."""
        n = self._rows

        def view(values):
            values = values[:n]
            return values.copy() if copy else values

        total_epochs = view(self._index["total_epochs"])
        data = {name: view(self._index[name]) for name in INDEX_COLUMNS}
        data["total_epochs"] = pd.arrays.IntegerArray(total_epochs, total_epochs == 0)
        for name in self.metrics:
            data[name] = view(self.padded(name))
        return pd.DataFrame(data, copy=False)


class ProgressLines:
    """The progress records of a log, from blocks of complete lines (`parse`), as `columns`."""

    def __init__(self):
        self.columns = Columns()
        self._names = {}  # printed name (bytes) -> column name (str)
        self._templates = []  # shapes of progress lines seen, see _learn
        self._matchers = {}  # regexes built from the templates, see _matcher

    def _column(self, name):
        """The column name for a printed metric name (bytes); the column is created on first use."""
        column = self._names.get(name)
        if column is None:
            column = decode(name)
            if column in INDEX_COLUMNS:  # a printed `step:` must not clash with the index columns
                column += " (printed)"
            self._names[name] = column
        self.columns.add_metric(column)
        return column

    def _learn(self, kind, rest):
        """Parse one line the general way; if it is a progress line, remember its shape. True if new.

        A template is the line's exact text with each number of the head and each metric value
        replaced by a capture group. All templates together make one regex that pulls the numbers of
        every progress line of a block out in one `findall` (see `parse`).
        """
        if kind == b"Epoch:":
            head = _EPOCH_HEAD_RE.match(rest)
            if head is None:
                return False
            slots = (1, 2, 3, 4) if head.group(1) else (5, 6, 7, 8) if head.group(6) else (5, 7, 8)
        else:
            head = _STEP_HEAD_RE.match(rest)
            if head is None:
                return False
            slots = (1, 2)
        spans = [(head.start(g), head.end(g), rb"(\d+)") for g in slots]
        columns = []
        for m in _METRIC_RE.finditer(rest, head.end()):
            columns.append(self._column(m.group(1)))
            spans.append((m.start(2), m.end(2), rb"(" + _NUMBER + rb")"))
        if kind == b"Step:" and not columns:
            return False  # a bare `Step: 5/10` without metrics is too weak a sign of progress
        parts, pos = [], 0
        for start, end, group in spans:
            literal = rest[pos:start]
            stripped = literal.rstrip(b" \t")
            parts.append(_literal_pattern(stripped))
            if len(stripped) < len(literal) or group != rb"(\d+)":
                parts.append(_SP)  # numbers may be padded to a width: any spaces before a value
            parts.append(group)
            pos = end
        parts.append(_literal_pattern(rest[pos:]))
        pattern = b"".join(parts)
        if re.fullmatch(pattern, rest) is None:  # cannot happen for a well-formed template
            return False
        if len(self._templates) >= MAX_TEMPLATES:
            self._templates.pop()  # the least used shape; a later line of it is learnt again
        self._templates.append((kind, pattern, len(slots), columns))
        self._matchers = {}
        return True

    def _matcher(self, scope):
        """(regex over a block, group layout, number of groups, templates) for known templates.

        `scope` is "epoch" (all `Epoch:` templates), "mixed" (also bare `Step:` lines) or an index
        into the `Epoch:` templates (that one alone, see `_shape`). The `Epoch:` regexes start with
        that literal, which the regex engine finds quickly; "mixed" needs two literals.
        """
        matcher = self._matchers.get(scope)
        if matcher is None:
            templates = [t for t in self._templates if scope == "mixed" or t[0] == b"Epoch:"]
            if isinstance(scope, int):
                templates = templates[scope:scope + 1]
            layout, width = [], 0
            for kind, pattern, n_head, columns in templates:
                layout.append((width, n_head, columns))
                width += n_head + len(columns)
            if not templates:
                block = None
            elif scope == "mixed":
                block = re.compile(b"(?:" + b"|".join(k + p for k, p, _, _ in templates) + rb")\r?\n")
            else:
                block = re.compile(b"Epoch:(?:" + b"|".join(p for _, p, _, _ in templates) + rb")\r?\n")
            matcher = self._matchers[scope] = (block, layout, width, templates)
        return matcher

    def _known(self, kind):
        """fullmatch of the text after `kind` against the templates of that kind (None if none)."""
        key = ("known", kind)
        known = self._matchers.get(key, False)
        if known is False:
            patterns = [p for k, p, _, _ in self._templates if k == kind]
            known = re.compile(b"(?:" + b"|".join(patterns) + b")").fullmatch if patterns else None
            self._matchers[key] = known
        return known

    def _shape(self, data, pos):
        """Index of the first `Epoch:` template that the progress line at `pos` (the position of its
        `Epoch:`) fits, or None (no such line, or a shape not learnt yet)."""
        line = _EPOCH_LINE_RE.match(data, pos) if pos >= 0 else None
        if line is None:
            return None
        fits = self._matchers.get("fits")
        if fits is None:
            fits = self._matchers["fits"] = [re.compile(p).fullmatch for k, p, _, _ in self._templates
                                             if k == b"Epoch:"]
        rest = line.group(1)
        return next((i for i, fit in enumerate(fits) if fit(rest) is not None), None)

    def _shape_change(self, data, lo, hi):
        """Where a block's progress lines change shape, when they change once: the start of the
        first line of the new shape, found by bisection between `lo` (the `Epoch:` of a line of one
        known shape) and `hi` (one of another). None when a third shape shows up."""
        old, new = self._shape(data, lo), self._shape(data, hi)
        while True:
            mid = data.find(b"Epoch:", (lo + hi) // 2, hi)
            if mid <= lo:
                mid = data.find(b"Epoch:", lo + 1, hi)
            if mid < 0:  # `lo` and `hi` are neighbours
                return data.rfind(b"\n", 0, hi) + 1
            shape = self._shape(data, mid)
            if shape == old:
                lo = mid
            elif shape == new:
                hi = mid
            else:
                return None

    def parse(self, data, split=True):
        """Add the progress records of `data` (complete lines)."""
        # Bare `Step:` lines (one old upstream SPO format) need the slower two-literal scan.
        mixed = b"\nStep:" in data or data.startswith(b"Step:")
        scope = "mixed" if mixed else "epoch"
        line_re = _ANY_LINE_RE if mixed else _EPOCH_LINE_RE
        if not mixed:
            # Each row consumes one `Epoch:`, so equal counts mean every progress line was matched.
            n_epoch = data.count(b"Epoch:")
            if not n_epoch:
                return
            # A log prints one shape of progress line at a time. When the block's first and last
            # progress lines have the same shape, that template's own regex most likely matches all
            # of them; it is much faster than the regex of all templates, whose rows carry an
            # empty field for every group of every other template.
            first, last = data.find(b"Epoch:"), data.rfind(b"Epoch:")
            shape, last_shape = self._shape(data, first), self._shape(data, last)
            if shape is not None and shape == last_shape:
                one = self._matcher(shape)
                rows = one[0].findall(data)
                if len(rows) == n_epoch:
                    self._append_rows(rows, one)
                    return
            elif split and shape is not None and last_shape is not None:
                # The block holds the switch from one shape to another: parse the two sides apart.
                cut = self._shape_change(data, first, last)
                if cut:
                    self.parse(data[:cut], split=False)
                    self.parse(data[cut:], split=False)
                    return
            every = self._matcher(scope)
            rows = every[0].findall(data) if every[0] is not None else []
            if len(rows) == n_epoch:
                self._append_rows(rows, every)
                return
        else:
            block_re = self._matcher(scope)[0]
            rows = block_re.findall(data) if block_re is not None else []
        lines = line_re.findall(data)
        if len(rows) != len(lines) and lines:
            # Lines of a shape not seen before (or `Epoch:` lines that are no progress lines): learn
            # the new shapes, then scan again. Usually the first line shows the one new shape.
            kind, rest = lines[0] if mixed else (b"Epoch:", lines[0])
            known = self._known(kind)
            if b"\x1b" not in rest and (known is None or known(rest) is None) and self._learn(kind, rest):
                rows = self._matcher(scope)[0].findall(data)
        if len(rows) != len(lines) and b"\x1b" in data:
            data = ANSI_RE.sub(b"", data)  # colour codes inside progress lines
            block_re = self._matcher(scope)[0]
            rows = block_re.findall(data) if block_re is not None else []
            lines = line_re.findall(data)
        if len(rows) != len(lines):
            learnt = False
            for line in lines:
                kind, rest = line if mixed else (b"Epoch:", line)
                known = self._known(kind)
                if known is None or known(rest) is None:
                    learnt |= self._learn(kind, rest)
            if learnt:
                rows = self._matcher(scope)[0].findall(data)
        if rows:
            self._append_rows(rows, self._matcher(scope))

    def _append_rows(self, rows, matcher):
        """Add the numbers of one block's progress lines (findall tuples, one group per number) that
        the `_matcher` tuple `matcher` found."""
        _, layout, width, used = matcher  # every template has 2 or more groups: rows are tuples
        # pandas' C CSV reader converts numbers far faster than float() one at a time; groups of
        # templates a line did not match are empty fields, read as NaN.
        csv = b"\n".join(map(b",".join, rows)) + b"\n"
        table = pd.read_csv(io.BytesIO(csv), header=None, names=range(width), dtype=np.float64,
                            engine="c").to_numpy()
        n = len(table)
        cols = self.columns
        block_epoch = np.ones(n, np.int64)
        block_total_epochs = np.zeros(n, np.int64)
        block_step = np.zeros(n, np.int64)
        block_total_steps = np.zeros(n, np.int64)
        block_metrics = {}
        single = len(layout) == 1
        hits = []
        for offset, n_head, columns in layout:
            matched = slice(None) if single else ~np.isnan(table[:, offset])
            hits.append(n if single else int(matched.sum()))
            head = table[matched, offset:offset + n_head].astype(np.int64)
            if n_head == 4:
                block_epoch[matched], block_total_epochs[matched] = head[:, 0], head[:, 1]
            elif n_head == 3:
                block_epoch[matched] = head[:, 0]
            block_step[matched], block_total_steps[matched] = head[:, -2], head[:, -1]
            for j, name in enumerate(columns):
                values = table[matched, offset + n_head + j]
                if single:
                    block_metrics[name] = values
                else:
                    if name not in block_metrics:
                        block_metrics[name] = np.full(n, np.nan)
                    block_metrics[name][matched] = values
        if hits != sorted(hits, reverse=True):
            # The regex tries templates in order: put the shapes this block used most first.
            rank = {id(t): -h for t, h in zip(used, hits)}
            self._templates.sort(key=lambda t: rank.get(id(t), 0))
            self._matchers = {}
        cols.append(block_epoch, block_total_epochs, block_step, block_total_steps, block_metrics)
