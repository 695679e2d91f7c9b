"""Bytes of a log as a terminal shows them: shared by the log parser and the file helpers."""
import re

SPACES = rb"[ \t]*"

# Terminal escape sequences: colours and cursor moves (CSI), titles (OSC), charset switches.
ANSI_RE = re.compile(rb"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b\n]*(?:\x07|\x1b\\)?|[()][0-9A-Za-z]|[=>78NOM])")


def visible(line):
    """What a terminal shows of one line: the text after its last `\\r` (a trailing one ignored)."""
    line = line.rstrip(b"\r")
    return line[line.rfind(b"\r") + 1:]


def clean(line):
    """A line without ANSI escape codes, as a terminal shows it."""
    if b"\x1b" in line:
        line = ANSI_RE.sub(b"", line)
    return visible(line)


def find_all(regex, marker, data):
    """Matches of `regex` at the starts of lines that begin with `marker`. bytes.find locates the
    rare marker much faster than a regex scan of the whole block."""
    pos = data.find(marker)
    while pos >= 0:
        if pos == 0 or data[pos - 1] in b"\r\n":
            m = regex.match(data, pos)
            if m is not None:
                yield m
        pos = data.find(marker, pos + 1)


def decode(data):
    """Log bytes as text (invalid UTF-8 replaced)."""
    return data.decode("utf-8", "replace")
