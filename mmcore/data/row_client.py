"""A row's tokens and loss mask, from the data worker (`mmcore/workers/data_worker.py serve`), without torch here.

The worker is one process per dashboard home, on `<home>/data_scans/worker.sock`, started on first use
under a file lock (two sessions never start two) and gone after half an hour without a request. It
encodes the row with the trainers' dataset classes (`mmcore.workers.data_tokens.encode_row`).
"""
import json

from mmcore.base import local_worker
from mmcore.data.scans import scans_dir

START_TIMEOUT_S = 120.0  # the first request imports torch and loads the tokenizer: slow on a busy machine
EXIT_AFTER_S = 1800.0


class RowError(RuntimeError):
    """The worker could not be reached or could not encode the row (the message says why)."""


def socket_path(home=None):
    return local_worker.socket_path(scans_dir(home), "minimind-data")


def running(home=None):
    return local_worker.answers(socket_path(home))


def ensure_worker(home=None):
    """Start the worker unless one answers; returns its socket path."""
    path = socket_path(home)
    return local_worker.ensure(scans_dir(home), path,
                               ["mmcore.workers.data_worker", "serve", "--socket", path,
                                "--exit_after", str(EXIT_AFTER_S)], START_TIMEOUT_S, "data worker", RowError)


def request(payload, home=None, timeout=300.0):
    """One request, one reply event (a dict); RowError for an error event or a lost worker."""
    try:
        sock = local_worker.connect(ensure_worker(home), timeout)
    except OSError as exc:
        raise RowError(f"the data worker is not reachable: {exc}") from None
    with sock, sock.makefile("rb") as reader:
        sock.sendall((json.dumps(payload) + "\n").encode())
        line = reader.readline()
    if not line:
        raise RowError("the data worker closed the connection without a reply")
    event = json.loads(line)
    if event.get("event") == "error":
        raise RowError(event.get("message", "unknown error"))
    return event


def encode(text, kind, max_seq_len, tokenizer=None, home=None):
    """The sequences training makes of one row (see `data_tokens.encode_row`)."""
    return request({"op": "encode", "text": text, "kind": kind, "max_seq_len": int(max_seq_len),
                    "tokenizer": str(tokenizer) if tokenizer else None}, home)["sequences"]


def status(home=None):
    """The worker's pid and memory, or None when it is not running."""
    return request({"op": "status"}, home) if running(home) else None
