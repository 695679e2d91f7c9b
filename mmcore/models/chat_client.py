"""Talk to the chat worker (`mmcore/workers/chat_worker.py`) from the dashboard, without importing torch.

The worker is one process per dashboard home, listening on `<home>/chat/worker.sock`; `chat()`
starts it on first use (under a file lock, so two sessions never start two) and streams its events:

    for event in chat_client.chat({"weight": "out/grpo_512.pth", "messages": [...], "temperature": 0}):
        if event["event"] == "token": print(event["text"], end="")

`split_think` separates a reasoning model's `<think>` part from its answer for display.
"""
import json
import re
from pathlib import Path

from mmcore.base import local_worker, paths
from mmcore.base.paths import default_home

START_TIMEOUT_S = 120.0  # first start imports torch: slow on a busy small machine
IDLE_UNLOAD_S = 300.0
EXIT_AFTER_S = 1800.0


class ChatError(RuntimeError):
    """The worker could not be reached or refused the request (the message says why)."""


def worker_dir(home=None):
    return paths.private_dir(Path(home or default_home()) / "chat")


def socket_path(home=None):
    """`<home>/chat/worker.sock`, or a short path in the temp folder when that is too long for a socket."""
    return local_worker.socket_path(worker_dir(home), "minimind-chat")


def worker_running(home=None):
    return local_worker.answers(socket_path(home))


def ensure_worker(home=None, idle_unload_s=IDLE_UNLOAD_S, exit_after_s=EXIT_AFTER_S, device="auto", threads=0):
    """Start the worker unless one answers on the socket; returns the socket path once it answers."""
    path = socket_path(home)
    return local_worker.ensure(worker_dir(home), path,
                               ["mmcore.workers.chat_worker", "--socket", path, "--idle_unload", str(idle_unload_s),
                                "--exit_after", str(exit_after_s), "--device", device, "--threads", str(threads)],
                               START_TIMEOUT_S, "chat worker", ChatError)


def request(payload, home=None, start=True, timeout=600.0):
    """Send one request to the worker and yield its events (dicts) until the last one."""
    path = ensure_worker(home) if start else socket_path(home)
    try:
        sock = local_worker.connect(path, timeout=timeout)
    except OSError as exc:
        raise ChatError(f"the chat worker is not reachable: {exc}") from None
    with sock, sock.makefile("rb") as reader:
        sock.sendall((json.dumps(payload) + "\n").encode())
        for line in reader:
            event = json.loads(line)
            yield event
            if event.get("event") in ("done", "error", "status"):
                return
    raise ChatError("the chat worker closed the connection before the reply ended")


def chat(payload, home=None):
    """Stream a chat reply: yields the worker's events; raises ChatError for an error event."""
    for event in request({"op": "chat", **payload}, home):
        if event.get("event") == "error":
            raise ChatError(event.get("message", "unknown error"))
        yield event


def reply(payload, home=None):
    """The finished reply's "done" event (text, ids, timings) of a chat request."""
    done = None
    for event in chat(payload, home):
        if event["event"] == "done":
            done = event
    return done


def status(home=None, start=False):
    """The worker's pid, memory and loaded models; None when it is not running (and start is False)."""
    if not start and not worker_running(home):
        return None
    return next(iter(request({"op": "status"}, home, start=start)), None)


_THINK = re.compile(r"^\s*<think>(.*?)(</think>|$)(.*)$", re.S)


def split_think(text):
    """(thought, answer) of a reply: the `<think>...</think>` part (None without one) and the rest.

    An unfinished thought (no closing tag yet, while streaming) is all thought. `<answer>` tags of
    the reasoning format are removed from the answer shown.
    """
    match = _THINK.match(text)
    if not match:
        return None, text
    thought, closed, rest = match.group(1).strip(), match.group(2), match.group(3)
    if not closed:
        return thought, ""
    answer = re.sub(r"</?answer>", "", rest).strip()
    return thought, answer
