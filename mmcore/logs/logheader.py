"""Header and error lines of MiniMind logs: what ran (job, type, command, how it ended) and
what went wrong (tracebacks, `Error:` lines).

Headers: this dashboard's runner writes `# job <id> · type <type> · <name>`, `# command: ...`,
`# cwd: ...`, `# env: ...`, `# started: ...` and at the end `# finished: <status> (exit code N) at
<time>`; upstream's trainer_web writes `开始训练 {type} 进程` and `命令: {command}`.
"""
import re
from collections import deque

from mmcore.logs.logtext import SPACES as _SP
from mmcore.logs.logtext import clean, decode, find_all, visible

MAX_ERRORS = 10  # errors kept (the most recent ones)
MAX_TRACEBACK_LINES = 400

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


def parse_header(header, data):
    """Update `header` (a dict) from the header lines in `data` (complete lines)."""
    # `#` alone is found at memchr speed; `# ` would be checked at every space.
    for m in find_all(_OUR_HEADER_RE, b"#", data):
        key, value = m.group(1).decode(), decode(clean(m.group(2))).strip()
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
    for m in find_all(_UPSTREAM_START_RE, _UPSTREAM_START, data):
        found = _UPSTREAM_TYPE_RE.match(decode(clean(m.group(1))).strip())
        if found and "type" not in header:
            header["type"] = found.group(1)
            header.setdefault("source", "upstream")
    for m in find_all(_UPSTREAM_COMMAND_RE, _UPSTREAM_COMMAND, data):
        header.setdefault("command", decode(clean(m.group(1))).strip())

class ErrorLog:
    """The most recent errors of a log: tracebacks (whole) and error lines, oldest first.

    `feed` takes blocks of complete lines; a traceback may span blocks. `state()` and `restore()`
    carry what is needed to continue in another parser.
    """

    def __init__(self):
        self._errors = deque(maxlen=MAX_ERRORS)
        self._traceback = None  # the traceback being collected: {"prefix": bytes, "lines": [bytes]}

    @property
    def errors(self):
        """The most recent errors, oldest first; a traceback still being written is the last one."""
        errors = list(self._errors)
        if self._traceback is not None:
            errors.append(self._traceback_text())
        return errors

    def state(self):
        """JSON-able: the errors kept and the traceback being collected."""
        tb = self._traceback
        return {"errors": list(self._errors),
                "traceback": None if tb is None else {"prefix": tb["prefix"].hex(),
                                                      "lines": [line.hex() for line in tb["lines"]]}}

    def restore(self, state):
        self._errors.extend(state.get("errors") or [])
        tb = state.get("traceback")
        if tb:
            self._traceback = {"prefix": bytes.fromhex(tb["prefix"]),
                               "lines": [bytes.fromhex(line) for line in tb["lines"]]}

    def _traceback_text(self):
        return "\n".join(decode(line) for line in self._traceback["lines"])

    def feed(self, data):
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
            prefix = visible(data[line_start:i])  # e.g. "[rank0]: " from torchrun
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
                line = clean(data[line_start:data.index(b"\n", i)])
                if _ERROR_LINE_RE.match(line):
                    lines[line_start] = decode(line).strip()
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
            line = clean(data[pos:end])
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



_EPOCHS_FLAG_RE = re.compile(r"--epochs[ =](\d+)")


def epochs_from_command(command):
    """The `--epochs N` of a logged command line, or None."""
    found = _EPOCHS_FLAG_RE.search(command or "")
    return int(found.group(1)) if found else None
