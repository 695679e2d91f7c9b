"""Read a run's metrics stream (`metrics.jsonl` in its run folder, written by `trainer/rules/records.py`).

`read(run_dir)` gives one row per logged step: `global_step`, `epoch`, `step`, `samples`, `tokens`,
`time`, `elapsed_s` and one column per metric under its stable name (`loss`, `reward`,
`reward/<part>/mean`, `frac_reward_zero_std`, `kl`, `entropy`, `time/generate_s`, `eval/...`, and
`rescore/<name>/mean|std` once the run's responses were scored again: `mmcore.runs.rescore`).
`MetricsReader` reads the same file incrementally, for pages that refresh while a run goes on, and
holds one numpy array per column, never a Python object per record.
"""
import io
import json
import os
import re
from pathlib import Path

import numpy as np

from mmcore.base.regular_file import open_regular
from trainer.rules.records import METRICS_FILE, RECORDS_SUBDIR, ROLLOUTS_FILE  # (torch-free)

#: Columns that say where a record is, not what was measured.
POSITION_COLUMNS = ("global_step", "epoch", "step", "samples", "tokens", "time", "elapsed_s")
#: The x axes a chart of records can use, with their labels.
X_AXES = {"global_step": "Step", "samples": "Samples seen", "elapsed_s": "Wall time (s)"}
RUN_DIR_OPTION = "--run_dir"

READ_BLOCK = 1 << 22  # bytes parsed at a time: bounds the transient memory of a first read
MAX_TEMPLATES = 16  # record shapes remembered (a run writes one or two)
# The templates pay on a long read only: `python -m bench.bench_metric_stream` measured a first read of
# 50,000 records 1.9x faster with them than with json alone (2 cores, busy), while a read of 5 appended
# records was 2.4x slower (pandas' CSV reader costs more to start than json takes for a few lines). So a
# block of fewer lines than this is read with json.
TEMPLATE_MIN_LINES = 64
# A number as Python's json writes it, NaN and Infinity included (a NaN loss must reach the reader):
# a loose pattern, twice as fast as JSON's own grammar; the CSV reader rejects what is no number.
_NUMBER = rb"(-?[0-9][-0-9.eE+]*|NaN|-?Infinity)"
_SPACE = rb"[ \t]*"
_NUMERIC = ("int64", "float64")


def _key_pattern(key):
    """A regex for `key` as a JSON writer may have spelt it (escaped to ASCII or not)."""
    spellings = {json.dumps(key).encode(), json.dumps(key, ensure_ascii=False).encode("utf-8")}
    return b"(?:" + b"|".join(re.escape(s) for s in spellings) + b")"


def _template(line):
    """(keys, regex) for a record line whose values are all numbers: the line's own text with each
    value a capture group, so one `findall` over a block pulls out the numbers of every line of that
    shape. None for any other line (strings, booleans, nulls, nested values, repeated keys)."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict) or not record or any(type(v) not in (int, float) for v in record.values()):
        return None
    keys = tuple(record)
    loose = (rb"\{" + _SPACE + (_SPACE + b"," + _SPACE).join(
        _key_pattern(k) + _SPACE + b":" + _SPACE + _NUMBER for k in keys) + _SPACE + rb"\}")
    found = re.fullmatch(_SPACE + loose + rb"[ \t\r]*", line)
    if found is None:
        return None
    parts, pos = [], 0
    for group in range(1, len(keys) + 1):  # the line's exact spacing: literals scan at memchr speed
        parts += [re.escape(line[pos:found.start(group)]), _NUMBER]
        pos = found.end(group)
    parts.append(re.escape(line[pos:].rstrip(b"\r")))
    return keys, b"".join(parts)


def _numbers(rows, width):
    """The numbers of `findall` rows (tuples of `width` texts, or texts when `width` is 1) as one
    int64 or float64 array per group, or None when some are neither (an integer beyond int64)."""
    import pandas as pd  # (see MetricsReader.frame)

    csv = b"\n".join(rows if width == 1 else map(b",".join, rows)) + b"\n"
    table = pd.read_csv(io.BytesIO(csv), header=None, names=range(width), engine="c")
    if any(str(dtype) not in _NUMERIC for dtype in table.dtypes):
        return None
    return [table[i].to_numpy() for i in range(width)]


class MetricsReader:
    """Incremental reader of one run's metrics stream: each `update()` reads only appended whole lines.

    The records are kept as the table `frame()` gives (one row per global step, the last record of a
    step winning, ordered by step), one numpy array per column with room to grow: a record appended
    after the last step adds a row in place, and a frame handed out earlier still shows what it
    showed. Lines of a shape seen before are parsed by one regex per block and pandas' C CSV reader;
    other lines by `json`. A stream whose values are not all numbers is kept as the tables of its
    blocks and put together the way `pandas.DataFrame.from_records` would."""

    def __init__(self, run_dir):
        self.path = Path(run_dir) / METRICS_FILE
        self.offset = 0
        self.inode = None
        self._templates = []  # (keys, regex) of record shapes seen, latest first
        self._matchers = {}
        self._expected = 0  # rows a long read is expected to end with (see _room)
        self._clear()

    def _clear(self):
        self._columns = {}  # name -> array (first `_rows` values are the column)
        self._rows = 0
        self._count = 0  # records read (a repeated step counts each time)
        self._blocks = None  # tables as read, once a value was not a number
        self._frame = None

    def update(self):
        """Read what was appended; a file replaced by a resumed run (truncated records) is read anew.
        Returns the number of new records."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return 0
        if st.st_ino != self.inode or st.st_size < self.offset:
            self._clear()
            self.offset, self.inode = 0, st.st_ino
        if st.st_size == self.offset:
            return 0
        before, rows_before, start = self._count, self._rows, self.offset
        with open_regular(self.path) as f:
            f.seek(self.offset)
            left, carry = st.st_size - self.offset, b""
            while left > 0:
                block = f.read(min(READ_BLOCK, left))
                if not block:
                    break
                left -= len(block)
                data = carry + block if carry else block
                end = data.rfind(b"\n") + 1  # an unterminated last line is still being written (or was cut)
                if end:
                    self._add(data[:end])
                    self.offset += end
                carry = data[end:]
                # Room for the rows still to come in this read, by the bytes per row so far.
                self._expected = self._rows + (self._rows - rows_before) * left // max(1, self.offset - start)
        self._expected = 0
        if self._rows - rows_before > 1024:
            self._fit()  # a long read leaves no more than a little room to grow
        return self._count - before

    def __len__(self):
        return self._count

    # -- parsing ---------------------------------------------------------------------------------

    def _add(self, data):
        """Add the records of `data` (whole lines)."""
        lines = data.count(b"\n")
        table = None
        if lines >= TEMPLATE_MIN_LINES:
            table = self._by_templates(data, lines)
            for _ in range(4):  # a block may show a new shape or two
                if table is not None or not self._learn(data):
                    break
                table = self._by_templates(data, lines)
        if table is None:
            table = self._by_json(data)
        if table is not None and len(table):
            self._count += len(table)
            self._append(table)

    def _learn(self, data):
        """Learn the shape of the block's first line that no known shape matches; True if it was new."""
        known = re.compile(b"|".join(p for _, p in self._templates)).fullmatch if self._templates else None
        tried = 0
        for line in data.splitlines():
            if known is not None and known(line) is not None:
                continue
            found = _template(line)
            if found is not None and found not in self._templates:
                self._templates.insert(0, found)
                del self._templates[MAX_TEMPLATES:]
                self._matchers = {}
                return True
            tried += 1
            if tried >= 8:
                return False  # lines that are no records of numbers: the block is read with json
        return False

    def _by_templates(self, data, lines):
        """The block's records as a DataFrame when every line has a known shape, else None."""
        import pandas as pd

        if not self._templates:
            return None
        matcher = self._matchers.get("block")
        if matcher is None:
            matcher = self._matchers["block"] = re.compile(
                b"(?m)^(?:" + b"|".join(b"(" + p + b")" if len(self._templates) > 1 else p
                                       for _, p in self._templates) + rb")\r?\n")
        rows = matcher.findall(data)
        if len(rows) != lines:
            return None
        if len(self._templates) == 1:
            keys = self._templates[0][0]
            values = _numbers(rows, len(keys))
            return None if values is None else pd.DataFrame(dict(zip(keys, values)), copy=False)
        # Several shapes: each row holds its line as a whole group before the groups of its shape.
        parts, offset = [], 0
        for keys, _ in self._templates:
            start, offset = offset, offset + 1 + len(keys)
            picked = [i for i, row in enumerate(rows) if row[start]]
            if not picked:
                continue
            values = _numbers([rows[i][start + 1] if len(keys) == 1 else rows[i][start + 1:offset] for i in picked],
                              len(keys))
            if values is None:
                return None
            parts.append((picked[0], np.asarray(picked), keys, values))
        parts.sort(key=lambda part: part[0])  # columns in the order they first appear, as a single read has them
        columns = {}
        for _, at, keys, values in parts:
            for key, column in zip(keys, values):
                columns.setdefault(key, []).append((at, column))
        table = {}
        for key, pieces in columns.items():
            if len(pieces) == len(parts) and len({c.dtype for _, c in pieces}) == 1 and pieces[0][1].dtype == np.int64:
                out = np.empty(len(rows), np.int64)
            else:
                out = np.full(len(rows), np.nan)
            for at, column in pieces:
                out[at] = column
            table[key] = out
        return pd.DataFrame(table, copy=False)

    def _by_json(self, data):
        """The block's records, a line at a time (lines that are no JSON object are skipped)."""
        import pandas as pd

        records = json_objects(data)
        return pd.DataFrame.from_records(records) if records else None

    # -- the table ---------------------------------------------------------------------------------

    def _append(self, table):
        numeric = all(str(dtype) in _NUMERIC for dtype in table.dtypes)
        if self._blocks is None and numeric and ("global_step" in table or "global_step" in self._columns):
            steps = table["global_step"].to_numpy() if "global_step" in table else None
            held = self._columns.get("global_step")
            if (steps is not None and steps.dtype == np.int64 and (held is None or held.dtype == np.int64)
                    and (np.diff(steps) > 0).all() and (not self._rows or steps[0] > held[self._rows - 1])):
                self._extend(table)  # later steps, once each: the usual case
            else:
                self._merge(table)
            return
        if self._blocks is None:
            self._blocks = [self.frame()] if self._rows else []
        self._blocks.append(table)
        self._frame = None

    def _extend(self, table):
        """Append the rows of `table` (whose steps all follow the held ones)."""
        n, m = self._rows, len(table)
        for name, column in list(self._columns.items()):
            if name not in table:
                column = self._columns[name] = self._room(column.astype(np.float64) if column.dtype != np.float64
                                                          else column, n + m)
                column[n:n + m] = np.nan
        for name in table.columns:
            values = table[name].to_numpy()
            column = self._columns.get(name)
            if column is None:
                column = np.full(n, np.nan) if n else np.empty(0, values.dtype)
            elif column.dtype != values.dtype and column.dtype != np.float64:  # integers meet decimals (or gaps)
                column = column[:n].astype(np.float64)
            self._columns[name] = column = self._room(column, n + m)
            column[n:n + m] = values
        self._rows = n + m
        self._frame = None

    def _room(self, column, size):
        """`column` (its first `_rows` values) in an array of at least `size` values."""
        if len(column) >= size:
            return column
        grown = np.empty(max(size, len(column) + len(column) // 2, 1024, self._expected), column.dtype)
        grown[:self._rows] = column[:self._rows]
        return grown

    def _fit(self):
        """Leaves each column room for a little more than 1/16 of its rows, after a long read."""
        room = self._rows + self._rows // 16 + 1024
        for name, column in self._columns.items():
            if len(column) != room:
                fitted = np.empty(room, column.dtype)
                fitted[:self._rows] = column[:self._rows]
                self._columns[name] = fitted

    def _merge(self, table):
        """Join `table` to the held rows the way a single read does: the last record of a step wins."""
        import pandas as pd

        joined = pd.concat([self.frame(), table], ignore_index=True, sort=False) if self._rows else table
        joined = _steps(joined)
        self._columns = {name: joined[name].to_numpy().copy() for name in joined.columns}
        self._rows = len(joined)
        self._frame = None

    def frame(self):
        """The records as a DataFrame (one row per logged step, ordered by global_step). Shared: read it,
        never change it."""
        if self._frame is None:
            # Imported here: job supervisors import this module for its paths, and pandas would add
            # seconds to every job's start on a busy machine.
            import pandas as pd

            if self._blocks is not None:
                df = pd.concat(self._blocks, ignore_index=True, sort=False) if self._blocks else pd.DataFrame()
                if any(str(dtype) not in _NUMERIC for dtype in df.dtypes):
                    # Each column's type from all its values, as one `from_records` of every record has it.
                    df = pd.DataFrame.from_records(df.to_dict("records"), columns=list(df.columns))
                df = _steps(df) if len(df) else pd.DataFrame(columns=list(POSITION_COLUMNS))
            elif self._rows:
                views = {}
                for name, column in self._columns.items():
                    view = column[:self._rows]
                    view.flags.writeable = False  # the array grows on; what was handed out stays as it was
                    views[name] = view
                df = pd.DataFrame(views, copy=False)
            else:
                df = pd.DataFrame(columns=list(POSITION_COLUMNS))
            self._frame = df
        return self._frame


def _steps(df):
    """`df` with one row per global step (its last record) ordered by step."""
    # A resumed run's file holds each step once; order by step for safety all the same.
    return df.drop_duplicates("global_step", keep="last").sort_values("global_step", kind="stable").reset_index(drop=True)


def read(run_dir):
    """The metrics of the run recorded in `run_dir`: one row per logged step, a `global_step` column
    and one column per metric under its stable name. Empty (with the position columns) when the run
    has no metrics stream."""
    reader = MetricsReader(run_dir)
    reader.update()
    df = reader.frame().copy()
    if has_rollouts(run_dir):  # a second reward's step means, when the run was rescored (mmcore.runs.rescore)
        from mmcore.runs.rescore import rescores
        extra = rescores(run_dir)
        if len(extra):
            df = df.merge(extra, on="global_step", how="outer").sort_values("global_step", kind="stable")
            df = df.reset_index(drop=True)
    return df


def metric_columns(df):
    """The measured columns of a metrics frame (everything but the position columns)."""
    return [c for c in df.columns if c not in POSITION_COLUMNS]


def has_metrics(run_dir):
    return run_dir is not None and (Path(run_dir) / METRICS_FILE).is_file()


def has_rollouts(run_dir):
    return run_dir is not None and (Path(run_dir) / ROLLOUTS_FILE).is_file()


def records_dir(home):
    """Where the records of runs live under the dashboard's home (jobs in `job-N`, command-line runs
    in `<type>-<weight>_<hidden>`)."""
    return Path(home) / RECORDS_SUBDIR


def job_dir(home, job_id):
    """The records folder the dashboard gives job `job_id`."""
    return records_dir(home) / f"job-{job_id}"


def option_value(argv, option=RUN_DIR_OPTION):
    """The value of `option` in an argv list (`--opt value` or `--opt=value`), or None."""
    for i, arg in enumerate(argv):
        if arg == option and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(option + "="):
            return arg[len(option) + 1:]
    return None


def with_run_dir(argv, run_dir):
    """`argv` with `--run_dir run_dir` appended, unless it already names a records folder."""
    if option_value(argv) not in (None, ""):
        return list(argv)
    return [a for a in argv if a != RUN_DIR_OPTION] + [RUN_DIR_OPTION, str(run_dir)]


def job_run_dir(job, home):
    """Where job `job` keeps its records: the folder its command names, else its own folder."""
    named = option_value(job.argv or [])
    if named:
        return Path(os.path.normpath(Path(job.cwd or ".") / named))
    return job_dir(home, job.id)


def list_run_dirs(home, exclude=()):
    """Records folders under the home that hold a metrics stream, newest first (skipping `exclude`)."""
    root = records_dir(home)
    if not root.is_dir():
        return []
    skip = {str(Path(p)) for p in exclude}
    found = [p for p in root.iterdir() if p.is_dir() and str(p) not in skip and (p / METRICS_FILE).is_file()]
    return sorted(found, key=lambda p: (p / METRICS_FILE).stat().st_mtime, reverse=True)


def json_objects(data):
    """The JSON objects of a block of lines (bytes or text); a line that is no JSON object is skipped."""
    records = []
    for line in data.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records
