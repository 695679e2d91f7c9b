"""The MiniMind jsonl data formats and their validation, without torch.

One JSON object a line; blank lines are skipped.

- pretrain: `{"text": str}`
- sft (SFT, LoRA, distillation, reasoning distillation): `{"conversations": [{"role", "content"}, ...]}`
  with roles system / user / assistant / tool and at least one assistant turn. Tool calling as upstream:
  a first system turn may list `functions` (JSON schemas: the chat template's `tools`), an assistant
  turn may hold `tool_calls` (`{"name", "arguments"}` objects, or `{"function": {...}}`; its `content`
  may then be null or left out), and `tool` turns hold the results.
- dpo: `{"chosen": [messages], "rejected": [messages]}`, each list as in sft.
- rlaif (PPO, GRPO, SPO): `{"conversations": [...]}` whose last turn is the assistant's reference answer
  (may be empty) after at least one prompt turn. Roles may be left out, as in upstream's rlaif data:
  turns then alternate user, assistant, user, ...

The training datasets (`dataset.lm_dataset`) index their files with `scan_file`, and the dashboard checks
a file before launching a job with `validate_file`; both raise `DataFormatError` naming the file and
the 1-based line number. This module must not import torch: the dashboard never does.
"""
import json
import os
import re
from array import array

from trainer.rules.regular_file import NotRegularFile, open_regular
from trainer.rules.specs import SPECS

KINDS = ("pretrain", "sft", "dpo", "rlaif")

#: The data format each training type reads (trainer/rules/specs.py says it).
KIND_OF_TYPE = {key: s.data_kind for key, s in SPECS.items()}

ROLES = ("system", "user", "assistant", "tool")


class DataFormatError(ValueError):
    """A training data file that cannot be used: names the file and, for a bad line, its number."""


#: Limits of one row, so that no file can make a reader run out of memory or stack: its bytes
#: (MINIMIND_DATA_MAX_ROW_KB) and how deep its JSON nests (a row of real data nests a few levels).
MAX_ROW_BYTES = int(float(os.environ.get("MINIMIND_DATA_MAX_ROW_KB", 1024)) * 1024)
MAX_DEPTH = 64
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKET = re.compile(rb"[^\[\]{}]+")


def lines_within(f, limit=None):
    """(raw line, its length in bytes) of binary file `f`, reading at most `limit` (MAX_ROW_BYTES) + 1 bytes
    of any line: a longer line comes as its start only (the rest is skipped a block at a time), its length
    saying how long it was (`row_problem` then calls it too long)."""
    limit = MAX_ROW_BYTES if limit is None else limit
    while raw := f.readline(limit + 1):
        size = len(raw)
        if size > limit and not raw.endswith(b"\n"):
            while rest := f.readline(1 << 20):
                size += len(rest)
                if rest.endswith(b"\n"):
                    break
        yield raw, size


def depth(raw):
    """How deep the JSON text `raw` (bytes) nests, counted up to just past MAX_DEPTH (strings skipped)."""
    if raw.count(b"[") + raw.count(b"{") <= MAX_DEPTH:
        return 0 if not (b"[" in raw or b"{" in raw) else 1  # cannot exceed the limit: no need to count
    level = peak = 0
    for c in _NOT_BRACKET.sub(b"", _STRING.sub(b'""', raw)):
        level += 1 if c in b"[{" else -1
        if level > peak:
            peak = level
            if peak > MAX_DEPTH:
                break
    return peak


def row_problem(raw, size=None):
    """Why a raw line may not even be parsed, or None: longer than MAX_ROW_BYTES (`size`: its whole length
    when `raw` is only its start) or nested deeper than MAX_DEPTH."""
    size = len(raw) if size is None else size
    if size > MAX_ROW_BYTES + (1 if raw.endswith(b"\n") else 0):
        return (f"the row is too long: {size} bytes, over the {MAX_ROW_BYTES} a row may hold "
                f"(MINIMIND_DATA_MAX_ROW_KB)")
    if depth(raw) > MAX_DEPTH:
        return f"the row is too deep: its JSON nests more than {MAX_DEPTH} levels"
    return None


def chat_tools(messages):
    """The chat template's `tools` of a conversation, as upstream reads them: the first turn's
    `functions` when it is a system turn that has some, else None."""
    first = messages[0] if messages and isinstance(messages[0], dict) else {}
    return (first.get("functions") or None) if first.get("role") == "system" else None


def _check_tool_keys(message, where):
    """Return what is wrong with a message's tool-calling keys (`functions`, `tool_calls`), or None."""
    functions = message.get("functions")
    if functions is not None and not (isinstance(functions, list) and all(isinstance(f, dict) for f in functions)):
        return f'{where}: "functions" must be a list of objects (function schemas)'
    calls = message.get("tool_calls")
    if calls is None:
        return None
    if not isinstance(calls, list):
        return f'{where}: "tool_calls" must be a list'
    for j, call in enumerate(calls):
        call = call.get("function", call) if isinstance(call, dict) else call
        if not isinstance(call, dict) or not isinstance(call.get("name"), str) or "arguments" not in call:
            return f'{where}: "tool_calls"[{j}] must be an object with a "name" and "arguments"'
        if not isinstance(call["arguments"], (str, dict)):
            return f'{where}: "tool_calls"[{j}]: "arguments" must be a JSON string or an object'
    return None


def _check_messages(messages, key, need_roles=True, tools=False):
    """Return what is wrong with a list of chat messages, or None. With `tools` (sft, dpo), the
    tool-calling keys are checked and an assistant turn with `tool_calls` may have no content."""
    if not isinstance(messages, list) or not messages:
        return f'"{key}" must be a non-empty list of messages'
    for i, message in enumerate(messages):
        where = f'"{key}"[{i}]'
        if not isinstance(message, dict):
            return f"{where} must be an object with \"role\" and \"content\""
        if tools:
            problem = _check_tool_keys(message, where)
            if problem:
                return problem
        calls_only = tools and bool(message.get("tool_calls")) and message.get("content") is None
        if "content" not in message and not calls_only:
            return f'{where} has no "content"'
        if not isinstance(message.get("content"), str) and not calls_only:
            return f'{where}: "content" must be a string'
        if need_roles or "role" in message:
            if "role" not in message:
                return f'{where} has no "role"'
            if message["role"] not in ROLES:
                return f'{where}: unknown role {message["role"]!r} (expected one of {", ".join(ROLES)})'
    return None


def rlaif_roles(messages):
    """The roles of an rlaif conversation: given ones, or user/assistant alternating where left out."""
    return [m.get("role") or ("user" if i % 2 == 0 else "assistant") for i, m in enumerate(messages)]


def check_record(obj, kind):
    """Return what is wrong with one parsed line of a `kind` file, or None when it is valid."""
    if not isinstance(obj, dict):
        return f"expected a JSON object, got {type(obj).__name__}"
    if kind == "pretrain":
        if "text" not in obj:
            return 'missing key "text"'
        if not isinstance(obj["text"], str):
            return '"text" must be a string'
        return None
    if kind == "sft":
        if "conversations" not in obj:
            return 'missing key "conversations"'
        problem = _check_messages(obj["conversations"], "conversations", tools=True)
        if problem is None and not any(m["role"] == "assistant" for m in obj["conversations"]):
            problem = '"conversations" has no assistant turn to learn from'
        return problem
    if kind == "dpo":
        for key in ("chosen", "rejected"):
            if key not in obj:
                return f'missing key "{key}"'
            problem = _check_messages(obj[key], key, tools=True)
            if problem is None and not any(m["role"] == "assistant" for m in obj[key]):
                problem = f'"{key}" has no assistant turn'
            if problem:
                return problem
        return None
    if kind == "rlaif":
        if "conversations" not in obj:
            return 'missing key "conversations"'
        messages = obj["conversations"]
        problem = _check_messages(messages, "conversations", need_roles=False)
        if problem:
            return problem
        if len(messages) < 2:
            return '"conversations" needs a prompt turn followed by the assistant\'s reference answer'
        if rlaif_roles(messages)[-1] != "assistant":
            return 'the last turn of "conversations" must be the assistant\'s reference answer'
        return None
    raise ValueError(f"unknown data kind {kind!r}; known: {', '.join(KINDS)}")


def scan_file(path, kind, max_lines=None):
    """Check every non-blank line of `path` as a `kind` record; return their byte offsets (array 'q').

    Streams through the file, keeping only the offsets. `max_lines` stops after that many lines
    (blank ones included). Raises FileNotFoundError for a missing file and DataFormatError for a bad
    line or a file without any record.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown data kind {kind!r}; known: {', '.join(KINDS)}")
    if not os.path.exists(path):
        raise FileNotFoundError(f"data file not found: {path} (absolute: {os.path.abspath(path)})")
    if os.path.isdir(path):
        raise DataFormatError(f"{path} is a folder, not a jsonl data file")
    try:
        f = open_regular(path)
    except NotRegularFile as exc:  # a FIFO or a device: never waited on
        raise DataFormatError(str(exc)) from None
    offsets = array("q")
    with f:
        offset, lineno = 0, 0
        for raw, size in lines_within(f):
            lineno += 1
            if max_lines is not None and lineno > max_lines:
                break
            start, offset = offset, offset + size
            if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):  # UTF-8 byte-order mark
                raw, start, size = raw[3:], start + 3, size - 3
            if not raw.strip():
                continue
            if problem := row_problem(raw, size):
                raise DataFormatError(f"{path} line {lineno}: {problem}")
            try:
                obj = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as e:
                raise DataFormatError(f"{path} line {lineno}: not UTF-8 text ({e.reason} at byte {e.start})") from None
            except json.JSONDecodeError as e:
                raise DataFormatError(f"{path} line {lineno}: invalid JSON ({e.msg} at column {e.colno})") from None
            problem = check_record(obj, kind)
            if problem:
                raise DataFormatError(f"{path} line {lineno}: {problem} (expected {kind} format)")
            offsets.append(start)
    if not offsets:
        raise DataFormatError(f"{path} has no data: the file is empty or holds only blank lines")
    return offsets


def validate_file(path, kind, max_lines=None):
    """Check a data file (or its first `max_lines` lines); return the number of records checked.

    `kind` is "pretrain", "sft", "dpo" or "rlaif" (see `KIND_OF_TYPE` for a training type's kind).
    Raises FileNotFoundError or DataFormatError with a message naming the file and line.
    """
    return len(scan_file(path, kind, max_lines))
