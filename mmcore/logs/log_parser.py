"""Incremental parser of MiniMind training logs: `mmcore.logs.log_parser.parse_file(path)` and `LogParser`.

A training log is whatever a trainer printed: progress lines in the upstream MiniMind formats,

    Epoch:[1/2](100/44160) loss:8.896761 lr:0.000549999999 epoch_Time:332.0min:
    Epoch:[1/1](100/1000), loss: 2.3456, logits_loss: 2.3, aux_loss: 0.0, lr: 0.00050000, epoch_time: 3.0min
    Epoch: 1, Step: 5/100, Actor Loss: 0.012345, Reward: 0.512300, Avg Response Len: 88.00, LR: 8.00e-08
    Step: 5/100, Loss: 0.1234, Reward: 0.5, Baseline: 0.5, KL: 0.0012, Rho: 0.9

mixed with everything else a process prints (warnings, tqdm bars, ANSI colours, `\\r` rewrites,
tracebacks, resume notices). The parser works on bytes, a block at a time, and never loops over
lines in Python. `LogParser` remembers its byte position and reads only what was appended since;
it hands each block of complete lines to the three readers of a log:

- `mmcore.logs.loglines`: progress lines -> one compact array per column (the records);
- `mmcore.logs.logheader`: header lines (job, type, command, how it ended) and errors (tracebacks);

and `mmcore.logs.logfiles` has what pages do with log files (tail, uploads, explanations);
`mmcore.jobs.progress` summarizes the records.
"""
import os

from mmcore.base.regular_file import NotRegularFile, open_regular
from mmcore.logs import logheader
from mmcore.logs.loglines import ProgressLines

READ_BLOCK = 1 << 20  # bytes parsed at a time: small blocks keep the transient memory small
MAX_LINE = 1 << 20  # a "line" longer than this without a newline is skipped (binary junk, runaway bar)
SIGNATURE_BYTES = 64  # the file's first bytes, compared on every update to notice a rewritten file


class LogParser:
    """Reads one log file incrementally: each `update()` parses only the bytes appended since.

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
        self._lines = ProgressLines()
        self._columns = self._lines.columns
        self.header = {}
        self._errors = logheader.ErrorLog()
        self.exists = None  # unknown until the first read
        self.unreadable = None  # why the path is not read (a FIFO, a device), or None
        self.size = 0

    def state(self):
        """Everything needed to continue reading later, as JSON-able values."""
        return {
            "path": self.path,
            "position": self.position,
            "file_id": list(self._file_id) if self._file_id else None,
            "signature": self._signature.hex(),
            "skipping": self._skipping,
            "header": dict(self.header),
            **self._errors.state(),
        }

    def _restore(self, state):
        self.position = int(state.get("position", 0))
        file_id = state.get("file_id")
        self._file_id = tuple(file_id) if file_id else None
        self._signature = bytes.fromhex(state.get("signature", ""))
        self._skipping = bool(state.get("skipping", False))
        self.header = dict(state.get("header") or {})
        self._errors.restore(state)

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
        return self._errors.errors

    @property
    def last_error(self):
        """The most recent error, or None."""
        errors = self.errors
        return errors[-1] if errors else None

    @property
    def kind(self):
        """What the file is, for a page to explain itself:

        `missing` (no such file), `unreadable` (not a regular file: `unreadable` says why), `empty` (no
        bytes yet), `progress` (has progress records), `no_progress` (a MiniMind log, by its header,
        without progress lines yet), `unknown` (neither a header nor progress lines: not a MiniMind
        training log).
        """
        if self.unreadable:
            return "unreadable"
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
        """The records as a DataFrame: `INDEX_COLUMNS`, then one float column per metric. `copy=False`
        shares the parser's arrays (records read later do not change it): read it, never change it."""
        return self._columns.frame(copy=copy)

    @property
    def first_step(self):
        """The global step of the first record, or None."""
        return self._columns.first_step()

    # -- reading ------------------------------------------------------------------------------

    def records_from(self, start):
        """The records from index `start` on, as dicts (a negative `start` counts from the end)."""
        return self._columns.rows(max(0, len(self._columns) + start) if start < 0 else start)

    def update(self):
        """Read what was appended since the last call; return how many new records it held."""
        before = len(self._columns)
        self.restarted = False
        self.unreadable = None
        try:
            f = open_regular(self.path)
        except FileNotFoundError:
            self.exists = False
            return 0
        except NotRegularFile as exc:  # a FIFO named *.log: reading it would wait for a writer
            self.exists, self.unreadable = True, str(exc)
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
        if len(self._columns) - before > 1024:
            self._columns.fit()  # a long read leaves no more than a little room to grow
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
        self._lines.parse(data)
        logheader.parse_header(self.header, data)
        self._errors.feed(data)


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

