"""Incremental parser of MiniMind training logs.

A training log is whatever a trainer printed: progress lines in the upstream MiniMind formats,

    Epoch:[1/2](100/44160) loss:8.896761 lr:0.000549999999 epoch_Time:332.0min:
    Epoch:[1/1](100/1000), loss: 2.3456, logits_loss: 2.3, aux_loss: 0.0, lr: 0.00050000, epoch_time: 3.0min
    Epoch: 1, Step: 5/100, Actor Loss: 0.012345, Reward: 0.512300, Avg Response Len: 88.00, LR: 8.00e-08
    Step: 5/100, Loss: 0.1234, Reward: 0.5, Baseline: 0.5, KL: 0.0012, Rho: 0.9

mixed with everything else a process prints (warnings, tqdm bars, ANSI colours, `\\r` rewrites,
tracebacks, resume notices). Every `name: value` pair after the `Epoch/Step` head of a progress line
is a metric under its printed name (`loss`, `Actor Loss`, `KL_ref`, ...), so fields a trainer appends
later chart without changes here.

The parser works on bytes, a block at a time, and never loops over lines in Python: the first line
of each shape is parsed the general way and becomes a template (its text with the numbers turned into
capture groups); one regex then pulls the numbers of every progress line of a block out in one
`findall` (the regex of the block's one shape; of all templates where shapes mix), and pandas' C CSV
reader converts them. Noise lines cost a fast literal scan.
`LogParser` remembers its byte position and reads only what was appended since. Records are kept as
one compact array per column, never as a list of lines or dicts.

Public API: `parse_file`, `LogParser`, `tail`, `is_minimind_log`, `explain`, `save_upload`,
`epochs_from_command`; progress summaries are `mmcore.progress`.
"""
import hashlib
import io
import math
import os
import re
import tempfile
from array import array
from collections import deque
from pathlib import Path

import numpy as np
import pandas as pd

#: The columns every parsed table starts with, in this order; metric columns follow.
INDEX_COLUMNS = ("epoch", "total_epochs", "step", "total_steps", "global_step")

READ_BLOCK = 1 << 20  # bytes parsed at a time: small blocks keep the transient memory small
MAX_LINE = 1 << 20  # a "line" longer than this without a newline is skipped (binary junk, runaway bar)
SIGNATURE_BYTES = 64  # the file's first bytes, compared on every poll to notice a rewritten file
MAX_ERRORS = 10  # errors kept (the most recent ones)
MAX_TRACEBACK_LINES = 400
MAX_TEMPLATES = 32  # progress-line shapes remembered (a log has one or two)

_SP = rb"[ \t]*"
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

# Terminal escape sequences: colours and cursor moves (CSI), titles (OSC), charset switches.
_ANSI_RE = re.compile(rb"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b\n]*(?:\x07|\x1b\\)?|[()][0-9A-Za-z]|[=>78NOM])")

# Header lines. This dashboard's runner: `# job <id> · type <type> · <name>`, `# command: ...`,
# `# cwd: ...`, `# env: ...`, `# started: ...`, and at the end
# `# finished: <status> (exit code N[, signal NAME]) at <time>`.
# Upstream trainer_web: `开始训练 {type} 进程` and `命令: {command}`.
_OUR_HEADER_RE = re.compile(rb"# (job|command|cwd|env|started|finished)(?=[: ]):?" + _SP + rb"([^\r\n]*)")
_UPSTREAM_START = "开始训练".encode()
_UPSTREAM_COMMAND = "命令".encode()
_UPSTREAM_START_RE = re.compile(_UPSTREAM_START + _SP + rb"([^\r\n]*)")
_UPSTREAM_COMMAND_RE = re.compile(_UPSTREAM_COMMAND + rb"(?::|" + "：".encode() + rb")" + _SP + rb"([^\r\n]*)")
_UPSTREAM_TYPE_RE = re.compile(r"^(\S+?)\s*进程")
_JOB_RE = re.compile(r"^(\S+)\s*(?:·\s*type\s+(\S+))?\s*(?:·\s*(.*))?$")
_FINISHED_RE = re.compile(r"^(\S+?)(?:\s*\(exit code\s*(-?\d+|None)[^)]*\))?(?:\s+at\s+(.+))?$")

_TRACEBACK = b"Traceback (most recent call last):"
# `Error: ...`, `ERROR: ...`, argparse's `prog.py: error: ...`; not `ValueError: ...` (that line ends a
# traceback, which is collected whole).
_ERROR_LINE_RE = re.compile(rb"(?:[^\s:][^:\r\n]*: )?(?:error|Error|ERROR)(?::|$)")
_EPOCHS_FLAG_RE = re.compile(r"--epochs[ =](\d+)")

_NAN8 = array("d", [math.nan]).tobytes()


def _visible(line):
    """What a terminal shows of one line: the text after its last `\\r` (a trailing one ignored)."""
    line = line.rstrip(b"\r")
    return line[line.rfind(b"\r") + 1:]


def _clean(line):
    """A line without ANSI escape codes, as a terminal shows it."""
    if b"\x1b" in line:
        line = _ANSI_RE.sub(b"", line)
    return _visible(line)


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


def _find_all(regex, marker, data):
    """Matches of `regex` at the starts of lines that begin with `marker`. bytes.find locates the
    rare marker much faster than a regex scan of the whole block."""
    pos = data.find(marker)
    while pos >= 0:
        if pos == 0 or data[pos - 1] in b"\r\n":
            m = regex.match(data, pos)
            if m is not None:
                yield m
        pos = data.find(marker, pos + 1)


def _decode(data):
    return data.decode("utf-8", "replace")


class _Columns:
    """Progress records as one array per column: about 8 bytes per value, no per-record objects.

    A metric absent from a record is NaN in its column; columns are padded lazily (on their next
    value, or when read), so adding a value costs O(1).
    """

    def __init__(self):
        self.epoch = array("q")
        self.total_epochs = array("q")  # 0: the line did not say (`Epoch: 1, Step: ...`)
        self.step = array("q")
        self.total_steps = array("q")
        self.metrics = {}  # printed name -> array("d")

    def __len__(self):
        return len(self.step)

    def padded(self, name):
        """The metric's column, NaN-padded to the current number of records."""
        col = self.metrics[name]
        gap = len(self.step) - len(col)
        if gap:
            col.frombytes(_NAN8 * gap)
        return col

    def rows(self, start=0, stop=None):
        """Records `start:stop` as dicts (metrics that are NaN are left out)."""
        stop = len(self) if stop is None else stop
        names = list(self.metrics)
        cols = [self.padded(name) for name in names]
        out = []
        for i in range(start, stop):
            epoch, total_epochs, step, total_steps = (
                self.epoch[i], self.total_epochs[i], self.step[i], self.total_steps[i])
            record = {"epoch": epoch, "total_epochs": total_epochs or None, "step": step,
                      "total_steps": total_steps, "global_step": (epoch - 1) * total_steps + step}
            for name, col in zip(names, cols):
                value = col[i]
                if value == value:  # not NaN
                    record[name] = value
            out.append(record)
        return out

    def frame(self, copy=True):
        """The records as a DataFrame. `copy=False` shares the arrays' memory: only for a table that
        will not grow again (a shared array cannot be resized)."""
        def view(arr, dtype):
            values = np.frombuffer(arr, dtype=dtype) if len(arr) else np.empty(0, dtype)
            return values.copy() if copy else values

        epoch = view(self.epoch, np.int64)
        total_steps = view(self.total_steps, np.int64)
        step = view(self.step, np.int64)
        total_epochs = view(self.total_epochs, np.int64)
        data = {
            "epoch": epoch,
            "total_epochs": pd.arrays.IntegerArray(total_epochs, total_epochs == 0),
            "step": step,
            "total_steps": total_steps,
            "global_step": (epoch - 1) * total_steps + step,
        }
        for name in self.metrics:
            data[name] = view(self.padded(name), np.float64)
        return pd.DataFrame(data, copy=False)


class LogParser:
    """Reads one log file incrementally: each `update()`/`poll()` parses only the bytes appended since.

    A partial last line is left for the next read. A file that was truncated or replaced (smaller
    than the saved position, another inode, or different first bytes) is read again from the start;
    `restarted` tells the caller that happened on the last read.

    Attributes: `records` (list of dicts), `header` (dict: type, command, job_id, name, cwd, env,
    started, finished, exit_code, finished_at, source: "dashboard" or "upstream"), `errors` (list of str, oldest first; a traceback is one
    entry), `position` (bytes consumed), `kind` (see the property).

    `state()` returns a JSON-able dict; `LogParser(path, state=saved)` continues from it, reading
    only what came after (records parsed before are not part of the state).
    """

    def __init__(self, path, state=None):
        self.path = str(path)
        self.restarted = False
        self._reset()
        if state is not None:
            self._restore(state)

    # -- state ----------------------------------------------------------------------------

    def _reset(self):
        self.position = 0
        self._file_id = None  # (st_dev, st_ino) of the file read so far
        self._signature = b""
        self._skipping = False  # inside an over-long line: drop bytes up to its newline
        self._columns = _Columns()
        self._names = {}  # printed name (bytes) -> column name (str)
        self._templates = []  # shapes of progress lines seen, see _learn
        self._matchers = {}  # regexes built from the templates, see _matcher
        self.header = {}
        self._errors = deque(maxlen=MAX_ERRORS)
        self._traceback = None  # the traceback being collected: {"prefix": bytes, "lines": [bytes]}
        self.exists = None  # unknown until the first read
        self.size = 0

    def state(self):
        """Everything needed to continue reading later, as JSON-able values."""
        tb = self._traceback
        return {
            "path": self.path,
            "position": self.position,
            "file_id": list(self._file_id) if self._file_id else None,
            "signature": self._signature.hex(),
            "skipping": self._skipping,
            "header": dict(self.header),
            "errors": list(self._errors),
            "traceback": None if tb is None else {"prefix": tb["prefix"].hex(),
                                                  "lines": [line.hex() for line in tb["lines"]]},
        }

    def _restore(self, state):
        self.position = int(state.get("position", 0))
        file_id = state.get("file_id")
        self._file_id = tuple(file_id) if file_id else None
        self._signature = bytes.fromhex(state.get("signature", ""))
        self._skipping = bool(state.get("skipping", False))
        self.header = dict(state.get("header") or {})
        self._errors.extend(state.get("errors") or [])
        tb = state.get("traceback")
        if tb:
            self._traceback = {"prefix": bytes.fromhex(tb["prefix"]),
                               "lines": [bytes.fromhex(line) for line in tb["lines"]]}

    # -- results ----------------------------------------------------------------------------

    def __len__(self):
        return len(self._columns)

    @property
    def records(self):
        """Every record parsed so far, as dicts (built on each access: use `frame()` for big logs)."""
        return self._columns.rows()

    @property
    def metrics(self):
        """Metric names in the order they first appeared."""
        return list(self._columns.metrics)

    @property
    def errors(self):
        """The most recent errors, oldest first; a traceback still being written is the last one."""
        errors = list(self._errors)
        if self._traceback is not None:
            errors.append(self._traceback_text())
        return errors

    @property
    def last_error(self):
        """The most recent error, or None."""
        errors = self.errors
        return errors[-1] if errors else None

    @property
    def kind(self):
        """What the file is, for a page to explain itself:

        `missing` (no such file), `empty` (no bytes yet), `progress` (has progress records),
        `no_progress` (a MiniMind log, by its header, without progress lines yet), `unknown` (neither
        a header nor progress lines: not a MiniMind training log).
        """
        if not self.exists:
            return "missing"
        if len(self._columns):
            return "progress"
        if self.header:
            return "no_progress"
        if self.size == 0:
            return "empty"
        return "unknown"

    def frame(self, copy=True):
        """The records as a DataFrame: `INDEX_COLUMNS`, then one float column per metric."""
        return self._columns.frame(copy=copy)

    # -- reading ------------------------------------------------------------------------------

    def records_from(self, start):
        """The records from index `start` on, as dicts (a negative `start` counts from the end)."""
        return self._columns.rows(max(0, len(self._columns) + start) if start < 0 else start)

    def poll(self):
        """Read what was appended since the last call; return the new records as dicts."""
        before = len(self._columns)
        self.update()
        return self.records_from(0 if self.restarted else before)

    def update(self):
        """Read what was appended since the last call; return how many new records it held."""
        before = len(self._columns)
        self.restarted = False
        try:
            f = open(self.path, "rb")
        except FileNotFoundError:
            self.exists = False
            return 0
        with f:
            self.exists = True
            st = os.fstat(f.fileno())
            self.size = st.st_size
            file_id = (st.st_dev, st.st_ino)
            if self._file_id is not None and (
                    file_id != self._file_id or st.st_size < self.position
                    or f.read(len(self._signature)) != self._signature):
                self._reset()
                self.exists, self.size = True, st.st_size
                self.restarted = True
                before = 0
            self._file_id = file_id
            if len(self._signature) < SIGNATURE_BYTES and st.st_size > len(self._signature):
                f.seek(0)
                self._signature = f.read(SIGNATURE_BYTES)
            f.seek(self.position)
            self._read_from(f)
        return len(self._columns) - before

    def _read_from(self, f):
        carry = b""
        while True:
            block = f.read(READ_BLOCK)
            if not block:
                break
            buf = carry + block if carry else block
            if self._skipping:
                cut = buf.find(b"\n")
                if cut < 0:
                    self.position += len(buf)
                    carry = b""
                    continue
                self._skipping = False
                self.position += cut + 1
                buf = buf[cut + 1:]
            cut = buf.rfind(b"\n") + 1
            if cut:
                self.feed(buf[:cut])
                self.position += cut
            carry = buf[cut:]
            if len(carry) > MAX_LINE:
                carry = self._drop_partial(carry)
        if carry:
            self._drop_partial(carry)  # what is left is read again once its newline arrives

    def _drop_partial(self, partial):
        """Skip what of an unfinished line can never matter; return the rest of it.

        Text before its last `\\r` has been overwritten on the terminal (a live tqdm bar), so it is
        not read again next time; a line longer than MAX_LINE is junk, skipped up to its newline.
        """
        cr = partial.rfind(b"\r", 0, len(partial) - 1)  # a final \r may be the start of \r\n
        if cr >= 0:
            self.position += cr + 1
            partial = partial[cr + 1:]
        if len(partial) > MAX_LINE:
            self.position += len(partial)
            self._skipping = True
            return b""
        return partial

    def feed(self, data):
        """Parse complete lines (`data` ends with a newline). The file readers call this; it is
        public for parsing bytes that are not in a file."""
        self._parse_progress(data)
        self._parse_header(data)
        self._parse_errors(data)

    # -- progress lines -----------------------------------------------------------------------

    def _column(self, name):
        """The column name for a printed metric name (bytes); the column is created on first use."""
        column = self._names.get(name)
        if column is None:
            column = _decode(name)
            if column in INDEX_COLUMNS:  # a printed `step:` must not clash with the index columns
                column += " (printed)"
            self._names[name] = column
        if column not in self._columns.metrics:
            self._columns.metrics[column] = array("d")
        return column

    def _learn(self, kind, rest):
        """Parse one line the general way; if it is a progress line, remember its shape. True if new.

        A template is the line's exact text with each number of the head and each metric value
        replaced by a capture group. All templates together make one regex that pulls the numbers of
        every progress line of a block out in one `findall` (see `_parse_progress`).
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

    def _parse_progress(self, data, split=True):
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
                    self._parse_progress(data[:cut], split=False)
                    self._parse_progress(data[cut:], split=False)
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
            data = _ANSI_RE.sub(b"", data)  # colour codes inside progress lines
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
        cols = self._columns
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
        first_row = len(cols)
        for name, values in block_metrics.items():
            col = cols.metrics[name]
            gap = first_row - len(col)
            if gap:
                col.frombytes(_NAN8 * gap)
            col.frombytes(np.ascontiguousarray(values, np.float64).tobytes())
        if hits != sorted(hits, reverse=True):
            # The regex tries templates in order: put the shapes this block used most first.
            rank = {id(t): -h for t, h in zip(used, hits)}
            self._templates.sort(key=lambda t: rank.get(id(t), 0))
            self._matchers = {}
        cols.epoch.frombytes(block_epoch.tobytes())
        cols.total_epochs.frombytes(block_total_epochs.tobytes())
        cols.step.frombytes(block_step.tobytes())
        cols.total_steps.frombytes(block_total_steps.tobytes())

    # -- header --------------------------------------------------------------------------------

    def _parse_header(self, data):
        header = self.header
        # `#` alone is found at memchr speed; `# ` would be checked at every space.
        for m in _find_all(_OUR_HEADER_RE, b"#", data):
            key, value = m.group(1).decode(), _decode(_clean(m.group(2))).strip()
            if key == "job":
                found = _JOB_RE.match(value)
                if found and "job_id" not in header:
                    job_id = found.group(1)
                    header["job_id"] = int(job_id) if job_id.isdigit() else job_id
                    if found.group(2):
                        header.setdefault("type", found.group(2))
                    header.setdefault("name", (found.group(3) or "").strip())
                    header.setdefault("source", "dashboard")
            elif key == "finished":  # the last one counts (a resumed job appends to its log)
                found = _FINISHED_RE.match(value)
                if found:
                    header["finished"] = found.group(1)
                    code = found.group(2)
                    header["exit_code"] = int(code) if code and code != "None" else None
                    header["finished_at"] = found.group(3)
            else:  # command, cwd, env, started
                header.setdefault(key, value)
        for m in _find_all(_UPSTREAM_START_RE, _UPSTREAM_START, data):
            found = _UPSTREAM_TYPE_RE.match(_decode(_clean(m.group(1))).strip())
            if found and "type" not in header:
                header["type"] = found.group(1)
                header.setdefault("source", "upstream")
        for m in _find_all(_UPSTREAM_COMMAND_RE, _UPSTREAM_COMMAND, data):
            header.setdefault("command", _decode(_clean(m.group(1))).strip())

    # -- errors --------------------------------------------------------------------------------

    def _traceback_text(self):
        return "\n".join(_decode(line) for line in self._traceback["lines"])

    def _parse_errors(self, data):
        """Collect tracebacks and error lines. Only the last MAX_ERRORS are kept, so they are looked
        for from the end of the block: a log full of errors costs no more than one with ten."""
        found = []  # (start offset, end offset, text)
        pos = 0
        if self._traceback is not None:  # one that began in an earlier block
            pos = self._continue_traceback(data, 0, found)
        starts, i = [], len(data)
        while len(starts) < MAX_ERRORS:
            i = data.rfind(_TRACEBACK, pos, i)
            if i < 0:
                break
            starts.append(i)
        for i in reversed(starts):
            if i < pos:
                continue
            line_start = data.rfind(b"\n", 0, i) + 1
            prefix = _visible(data[line_start:i])  # e.g. "[rank0]: " from torchrun
            self._traceback = {"prefix": prefix, "lines": [_TRACEBACK], "offset": line_start}
            pos = self._continue_traceback(data, data.index(b"\n", i) + 1, found)
        spans = [(start, end) for start, end, _ in found]
        lines = {}
        for needle in (b"rror", b"ERROR"):
            end = len(data)
            while len(lines) < 2 * MAX_ERRORS:
                i = data.rfind(needle, 0, end)
                if i < 0:
                    break
                line_start = data.rfind(b"\n", 0, i) + 1
                end = line_start
                if line_start in lines or any(s <= line_start < e for s, e in spans):
                    continue  # seen already, or the exception line of a traceback
                line = _clean(data[line_start:data.index(b"\n", i)])
                if _ERROR_LINE_RE.match(line):
                    lines[line_start] = _decode(line).strip()
        found.extend((start, start, text) for start, text in lines.items())
        found.sort(key=lambda item: item[0])
        self._errors.extend(text for _, _, text in found[-MAX_ERRORS:])

    def _continue_traceback(self, data, pos, found):
        """Add lines to the open traceback until its exception line; return where it stopped."""
        tb = self._traceback
        prefix = tb["prefix"]
        end_of_data = len(data)
        while pos < end_of_data:
            end = data.index(b"\n", pos)
            line = _clean(data[pos:end])
            if _TRACEBACK in line:  # a new traceback starts: leave it to the caller
                self._close_traceback(found, pos)
                return pos
            pos = end + 1
            if prefix and not line.startswith(prefix):
                continue  # another process's output interleaved with this one's
            rest = line[len(prefix):]
            if not rest.strip():  # tracebacks have no blank lines: it ended without an exception line
                self._close_traceback(found, pos)
                return pos
            tb["lines"].append(rest)
            if rest[:1] not in (b" ", b"\t") or len(tb["lines"]) >= MAX_TRACEBACK_LINES:
                self._close_traceback(found, pos)  # the unindented line is the exception itself
                return pos
        return pos

    def _close_traceback(self, found, end):
        found.append((self._traceback.get("offset", -1), end, self._traceback_text()))
        self._traceback = None


# -- one-shot helpers -------------------------------------------------------------------------------

def parse_file(path):
    """Parse a whole log; return one row per progress record.

    Columns: `epoch`, `total_epochs` (nullable: RL lines do not print it), `step`, `total_steps`,
    `global_step` (= (epoch - 1) * total_steps + step), then one float column per metric under its
    printed name (`loss`, `lr`, `Actor Loss`, `Reward`, ...), NaN where a line did not print it.
    A missing file raises FileNotFoundError.
    """
    parser = LogParser(path)
    parser.update()
    if not parser.exists:
        raise FileNotFoundError(f"no such log file: {path}")
    return parser.frame(copy=False)


def is_minimind_log(source, max_bytes=4 << 20):
    """True when `source` is a MiniMind training log: it has a header (upstream or this dashboard's)
    or at least one progress line.

    `source` is a LogParser (judged on what it has read) or a path, of which only the first
    `max_bytes` are read. A missing file is not a MiniMind log.
    """
    if isinstance(source, LogParser):
        return bool(source.header) or len(source) > 0
    try:
        with open(source, "rb") as f:
            data = f.read(max_bytes)
    except (FileNotFoundError, IsADirectoryError):
        return False
    cut = data.rfind(b"\n") + 1
    parser = LogParser(source)
    parser.feed(data[:cut] if cut else data + b"\n")
    return bool(parser.header) or len(parser) > 0


def explain(parser, label=None):
    """Why a log has no chart, for a page to show: (level, message), level "info" or "warning";
    None when it has progress records. `parser` has been updated; `label` names the log."""
    name = label or parser.path
    kind = parser.kind
    if kind == "progress":
        return None
    if kind == "missing":
        return "warning", f"{name}: the log file {parser.path} does not exist."
    if kind == "empty":
        return "info", f"{name}: the log is empty so far (the job has not written anything yet)."
    if kind == "unknown":
        return "warning", (f"{name} is not a MiniMind training log: it has neither a MiniMind header "
                           "nor any progress line (`Epoch:[1/2](100/44160) loss:...`, `Epoch: 1, Step: 5/100, ...`).")
    finished = parser.header.get("finished")
    if finished:
        return "info", f"{name}: no progress lines; the run ended ({finished}) before logging a step."
    return "info", f"{name}: no progress lines yet. Charts appear with the first logged step."


def tail(path, n=200, block=64 << 10):
    """The last `n` lines of a file as a terminal shows them (ANSI codes removed, `\\r` rewrites
    resolved), reading only the end of the file. A missing file raises FileNotFoundError."""
    if n <= 0:
        return []
    with open(path, "rb") as f:
        end = f.seek(0, os.SEEK_END)
        data = b""
        start = end
        # One newline more than needed, so the first kept line is complete.
        while start > 0 and data.count(b"\n") <= n:
            size = min(block, start)
            start -= size
            f.seek(start)
            data = f.read(size) + data
    if b"\x1b" in data:
        data = _ANSI_RE.sub(b"", data)
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the file ends with a newline
    if start > 0:
        lines = lines[1:]  # cut mid-line
    return [_decode(_visible(line)) for line in lines[-n:]]


def save_upload(data, name, folder=None):
    """Write uploaded log bytes to a file (named by their hash, so the same upload is saved once) and
    return its path; the Logs page then reads it like any other log."""
    folder = Path(folder) if folder is not None else Path(tempfile.gettempdir()) / "minimind-dashboard-uploads"
    folder.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(data).hexdigest()[:16]
    safe = re.sub(r"[^\w.-]+", "_", Path(name).name)[:80] or "upload.log"
    path = folder / f"{digest}-{safe}"
    if not path.exists():
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    return path


def epochs_from_command(command):
    """The `--epochs N` of a logged command line, or None."""
    found = _EPOCHS_FLAG_RE.search(command or "")
    return int(found.group(1)) if found else None
