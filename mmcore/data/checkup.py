"""The format and health scan of a jsonl data file: one pass, streaming, torch-free.

Each line is judged by the trainers' own validation (`dataset.formats.check_record`, with the
same wording for lines that are not JSON or not UTF-8), so a bad row here is a row the dataset
classes refuse. Beyond validity the scan looks for what wastes a run without failing it:
duplicate rows, empty answers, role-order problems (a trailing user turn is never trained),
DPO pairs whose chosen and rejected are identical, and reasoning rows without the
`<think>...</think><answer>...</answer>` tags. Every problem is kept as {"line", "reason"}
(1-based line numbers; each list capped at `LIST_CAP`, its count exact).
"""
import itertools
import json
import os
import re
from collections import Counter

from dataset.formats import KIND_OF_TYPE, KINDS, check_record, lines_within, rlaif_roles, row_problem
from mmcore.base.i18n import t
from mmcore.base.regular_file import open_regular

#: Problem lists, in the order the page shows them.
PROBLEMS = ("bad", "duplicate", "empty_answer", "role_order", "dpo_identical", "missing_tags")
LIST_CAP = 1000
DETECT_LINES = 200  # lines read to guess a file's kind
DETECT_BYTES = 4 * 2**20  # and at most this much of it: the page's own read stays small whatever the file
REASON_TYPES = ("distill_reason",)
_TAGS = re.compile(r"<think>.*?</think>.*?<answer>.*?</answer>", re.DOTALL)


def types_reading(kind, rlaif_ok=False):
    """The training types that read a file of `kind` (an sft file whose rows all end with an
    assistant answer is also an RL prompt file)."""
    kinds = {kind} | ({"rlaif"} if kind == "sft" and rlaif_ok else set())
    return [key for key, k in KIND_OF_TYPE.items() if k in kinds]


def file_format(file_kind, result):
    """(format, types) the Data page says of a file, whichever type it was scanned for: the file's own
    format (`detect_file_kind`; the scan's when none was detected) and every type that reads it (those
    of its own format and those the scan found it fits: an sft file of prompts with answers is read by
    the RL types too)."""
    kind = file_kind or result["kind"]
    reading = set(types_reading(kind)) | set(result["types"])
    return kind, [key for key in KIND_OF_TYPE if key in reading]


def parse_line(raw, lineno, size=None):
    """(object, None) or (None, reason) for one raw line, worded as `dataset.formats.scan_file` words it.
    A line too long or too deep to parse (`dataset.formats.row_problem`; `size`: its whole length when
    `raw` is its start only) is not parsed."""
    if problem := row_problem(raw, size):
        return None, f"line {lineno}: {problem}"
    try:
        if b"\0" in raw or raw.startswith(b"\xef\xbb\xbf"):  # json would guess UTF-16 or skip a BOM: not the trainers
            return json.loads(raw.decode("utf-8")), None
        return json.loads(raw), None  # plain UTF-8 bytes: json decodes them itself, a little faster
    except UnicodeDecodeError as e:
        return None, f"line {lineno}: not UTF-8 text ({e.reason} at byte {e.start})"
    except json.JSONDecodeError as e:
        return None, f"line {lineno}: invalid JSON ({e.msg} at column {e.colno})"
    except RecursionError:  # deeper than the interpreter's stack: row_problem counts on MAX_DEPTH below it
        return None, f"line {lineno}: the row is too deep to read"


def detect_kind(lines):
    """The kind most of `lines` (raw bytes) match, in the order dpo, pretrain, sft, rlaif; None when none match."""
    votes = Counter()
    for i, raw in enumerate(lines, 1):
        obj, _ = parse_line(raw, i)
        if obj is None:
            continue
        for kind in ("dpo", "pretrain", "sft", "rlaif"):
            if check_record(obj, kind) is None:
                votes[kind] += 1
                break
    return max(votes, key=lambda k: (votes[k], -KINDS.index(k))) if votes else None


def detect_file_kind(path, lines=DETECT_LINES, max_bytes=DETECT_BYTES):
    """`detect_kind` over the first non-blank lines of a file (at most `max_bytes` of it: a row too long
    or too deep is skipped, never read whole)."""
    return detect_kind(_head(path, lines, max_bytes)[0])


def head_problems(path, lines=DETECT_LINES, max_bytes=DETECT_BYTES):
    """["line N: the row is too long / too deep ..."] of the first lines `detect_file_kind` skipped: why a
    file whose kind cannot be told may not have been read."""
    return _head(path, lines, max_bytes)[1]


def _head(path, lines, max_bytes):
    head, skipped, read = [], [], 0
    with open_regular(path) as f:
        for lineno, (raw, size) in enumerate(lines_within(f), 1):
            read += size
            if raw.strip():
                if problem := row_problem(raw, size):
                    skipped.append(f"line {lineno}: {problem}")
                else:
                    head.append(raw[3:] if not head and raw.startswith(b"\xef\xbb\xbf") else raw)
            if len(head) >= lines or read >= max_bytes:
                break
    return head, skipped


def role_problem(messages):
    """What is wrong with the order of a conversation's roles, or None (tool-calling turns allowed)."""
    roles = [m.get("role") for m in messages]
    for i, role in enumerate(roles):
        if role == "system" and i > 0:
            return t("data.role.system_late", n=i + 1)
    talk = [(i, r) for i, r in enumerate(roles) if r != "system"]
    if not talk:
        return None
    if talk[0][1] != "user":
        return t("data.role.first_not_user", role=talk[0][1])
    for (_, prev), (i, role) in itertools.pairwise(talk):
        if role == "tool" and prev not in ("assistant", "tool"):
            return t("data.role.tool_out_of_place", n=i + 1)
        if role == prev and role in ("user", "assistant") and not messages[i - 1].get("tool_calls"):
            return t("data.role.repeated", role=role, n=i + 1)
    if talk[-1][1] != "assistant":
        return t("data.role.ends_with", role=talk[-1][1])
    return None


def _answers(obj, kind):
    """The assistant contents a row trains on (sft, dpo chosen) or holds as reference (rlaif)."""
    if kind == "sft":
        return [m for m in obj["conversations"] if m.get("role") == "assistant"]
    if kind == "dpo":
        return [m for m in obj["chosen"] if m.get("role") == "assistant"]
    if kind == "rlaif":
        return [obj["conversations"][-1]]
    return []


def _rlaif_too(messages):
    """For a valid sft conversation: `check_record(obj, "rlaif") is None`, without checking it all again
    (a valid sft turn has a known role; rlaif also wants text contents and a final assistant turn)."""
    return (len(messages) >= 2 and messages[-1]["role"] == "assistant"
            and all(isinstance(m.get("content"), str) for m in messages))


class HealthScan:
    """Feed it a file's lines in order (`feed`), then read `result()`."""

    def __init__(self, kind, first_chunk=True):
        self.first_chunk = first_chunk  # only a file's first line may carry a byte-order mark
        if kind not in KINDS:
            raise ValueError(f"unknown data kind {kind!r}; known: {', '.join(KINDS)}")
        self.kind = kind
        self.rows = 0  # valid rows
        self.lines = 0
        self.blank = 0
        self.rlaif_ok = kind == "sft"
        self.tagged = 0
        self.counts = Counter()
        self.lists = {name: [] for name in PROBLEMS}
        self._seen = {}  # hash of a row's bytes -> its first line
        self.dups = []  # (line, line of its first copy), worded in result()

    def _add(self, name, line, reason):
        self.counts[name] += 1
        if len(self.lists[name]) < LIST_CAP:
            self.lists[name].append({"line": line, "reason": reason})

    def feed(self, raw, size=None):
        """Judge one raw line (bytes; `size`: its whole length when `raw` is its start only, as
        `dataset.formats.lines_within` reads a line too long); returns the parsed object of a valid row, else None."""
        self.lines += 1
        line = self.lines
        if line == 1 and self.first_chunk and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]
        body = raw.strip()
        if not body:
            self.blank += 1
            return None
        obj, reason = parse_line(body, line, None if size is None else size - (len(raw) - len(body)))
        if obj is None:
            self._add("bad", line, reason.split(": ", 1)[1])
            return None
        problem = check_record(obj, self.kind)
        if problem:
            self._add("bad", line, f"{problem} (expected {self.kind} format)")
            return None
        self.rows += 1
        first = self._seen.setdefault(hash(body), line)
        if first != line:
            self.counts["duplicate"] += 1
            if len(self.dups) < LIST_CAP:
                self.dups.append((line, first))
        self._check_row(obj, line)
        return obj

    def _check_row(self, obj, line):
        kind = self.kind
        if kind == "pretrain":
            if not obj["text"].strip():
                self._add("empty_answer", line, t("data.empty_text"))
            return
        if kind == "sft" and self.rlaif_ok and not _rlaif_too(obj["conversations"]):
            self.rlaif_ok = False
        for m in _answers(obj, kind):
            if not (m.get("content") or "").strip() and not m.get("tool_calls"):
                self._add("empty_answer", line, t("data.empty_answer"))
                break
        conversations = [obj["chosen"], obj["rejected"]] if kind == "dpo" else [obj["conversations"]]
        for messages in conversations:
            if kind == "rlaif":
                messages = [{**m, "role": r} for m, r in zip(messages, rlaif_roles(messages))]
            problem = role_problem(messages)
            if problem:
                self._add("role_order", line, problem)
                break
        if kind == "dpo":
            if obj["chosen"] == obj["rejected"]:
                self._add("dpo_identical", line, t("data.dpo_identical"))
            elif obj["chosen"][:-1] != obj["rejected"][:-1]:
                self._add("dpo_identical", line, t("data.dpo_prompts_differ"))
        answers = _answers(obj, kind)
        last = (answers[-1].get("content") or "") if answers else ""
        if _TAGS.search(last):
            self.tagged += 1
        else:
            self._add("missing_tags", line, t("data.missing_tags"))

    def result(self):
        """The scan's findings as a JSON-able dict."""
        reasoning = self.kind in ("sft", "rlaif", "dpo") and self.rows > 0 and self.tagged * 2 >= self.rows
        counts = {name: self.counts[name] for name in PROBLEMS}
        lists = dict(self.lists)
        lists["duplicate"] = [{"line": line, "reason": t("data.dup_of", line=first)} for line, first in self.dups]
        if not reasoning:  # tags only matter for reasoning data: kept apart, shown for distill_reason
            counts["missing_tags_if_reasoning"] = counts.pop("missing_tags")
            lists["missing_tags_if_reasoning"] = lists.pop("missing_tags")
            counts["missing_tags"], lists["missing_tags"] = 0, []
        return {"kind": self.kind, "rows": self.rows, "lines": self.lines, "blank_lines": self.blank,
                "reasoning": reasoning, "types": types_reading(self.kind, self.rlaif_ok and self.rows > 0),
                "counts": counts, "problems": lists}


    def state(self):
        """What a chunk's scan hands back to the process that merges it (picklable)."""
        return {k: v for k, v in vars(self).items()}

    def absorb(self, other):
        """Append the scan of the next chunk of the same file (`other`, a HealthScan or its `state()`),
        whose lines were numbered from 1: renumber them, and a row first seen in `other` that this scan
        has seen already is a duplicate of this scan's line."""
        other = other if isinstance(other, dict) else other.state()
        offset = self.lines
        remap = {}
        for h, line in other["_seen"].items():
            line += offset
            first = self._seen.setdefault(h, line)
            if first != line:  # first in its chunk, but not in the file
                remap[line] = first
                self.counts["duplicate"] += 1
                self.dups.append((line, first))
        for line, first in other["dups"]:
            first += offset
            self.dups.append((line + offset, remap.get(first, first)))
        self.dups = sorted(self.dups)[:LIST_CAP]
        for name, items in other["lists"].items():
            shifted = [{"line": i["line"] + offset, "reason": i["reason"]} for i in items]
            self.lists[name] = sorted(self.lists[name] + shifted, key=lambda i: i["line"])[:LIST_CAP]
        self.counts.update(other["counts"])
        self.rows += other["rows"]
        self.lines += other["lines"]
        self.blank += other["blank"]
        self.tagged += other["tagged"]
        self.rlaif_ok = self.rlaif_ok and other["rlaif_ok"]
        return self


def chunks(path, parts):
    """`parts` byte ranges [(start, end)] of a file, each starting at a line's start."""
    size = os.path.getsize(path)
    bounds = [0]
    with open_regular(path) as f:
        for i in range(1, parts):
            f.seek(max(bounds[-1], size * i // parts))
            if f.tell() > 0:
                f.seek(f.tell() - 1)
                f.readline()  # to the start of the next line (a line starting right at the cut stays whole)
            bounds.append(min(size, max(bounds[-1], f.tell())))
    bounds.append(size)
    return [(a, b) for a, b in itertools.pairwise(bounds) if b > a]


def scan_range(path, kind, start, end, on_row=None, progress=None, every_bytes=8 * 2**20):
    """A HealthScan of the lines in bytes [start, end) of a file, numbered from 1 (`absorb` renumbers).
    `progress(bytes_read)`, `on_row(line, raw, obj)` as in `scan`."""
    health = HealthScan(kind, first_chunk=start == 0)
    done, next_report = 0, every_bytes
    with open_regular(path, buffering=2**20) as f:
        f.seek(start)
        left = end - start
        for raw, size in lines_within(f):
            if left <= 0:
                break
            left -= size
            done += size
            obj = health.feed(raw, size)
            if obj is not None and on_row is not None:
                on_row(health.lines, raw, obj)
            if progress is not None and done >= next_report:
                progress(done)
                next_report = done + every_bytes
    if progress is not None:
        progress(done)
    return health


def scan(path, kind, progress=None, every_bytes=8 * 2**20, on_row=None):
    """Run a HealthScan over a whole file. `progress(bytes_read)` is called about every `every_bytes`;
    `on_row(line, raw, obj)` for every valid row (the token phase's sampling)."""
    return scan_range(path, kind, 0, os.path.getsize(path), on_row, progress, every_bytes).result()
