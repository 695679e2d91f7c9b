"""A dashboard helper process on a Unix socket, one per dashboard home (the chat worker, the data worker).

A worker serves JSON lines with a `JsonLinesHandler` and reports its memory with `rss_mb`. The socket
lives in the worker's folder (or, where that path is too long for a socket, under a short name in the
temp folder); the worker is started on first use under a file lock in that folder, so two
sessions never start two, and its output goes to `worker.log` beside the lock.
"""
import fcntl
import hashlib
import json
import os
import socket
import socketserver
import subprocess
import sys
import tempfile
import time

from mmcore.base.paths import ROOT


def socket_path(folder, prefix):
    """`<folder>/worker.sock`, or `<temp>/<prefix>-<digest>.sock` when that is too long for a socket."""
    path = os.path.join(folder, "worker.sock")
    if len(path) < 100:
        return path
    digest = hashlib.sha1(path.encode()).hexdigest()[:12]
    return os.path.join(tempfile.gettempdir(), f"{prefix}-{digest}.sock")


def connect(path, timeout=None):
    """A connected socket to the worker at `path` (OSError when none answers)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        raise
    return sock


def answers(path):
    """Whether a worker answers on `path`."""
    try:
        connect(path, timeout=2).close()
        return True
    except OSError:
        return False


class JsonLinesHandler(socketserver.StreamRequestHandler):
    """One connection to a worker: one request (a JSON object on one line) in, event lines out. A subclass
    answers in `serve(request)`; the errors in `PLAIN_ERRORS` are told by their message alone, any other by
    its type too, and the worker keeps serving. The server's `touch()` marks the connection's start and end
    (the workers exit after a while without requests)."""
    PLAIN_ERRORS = ()

    def send(self, **event):
        self.wfile.write((json.dumps(event, ensure_ascii=False) + "\n").encode())
        self.wfile.flush()

    def handle(self):
        self.server.touch()
        try:
            request = json.loads(self.rfile.readline().decode() or "null")
            if not isinstance(request, dict):
                raise ValueError("a request is one JSON object on one line")
            self.serve(request)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the reader went away (e.g. the page was closed): nothing to tell
        except self.PLAIN_ERRORS as exc:
            self.send(event="error", message=str(exc))
        except Exception as exc:  # keep serving other users; report what broke this request
            self.send(event="error", message=f"{type(exc).__name__}: {exc}")
        finally:
            self.server.touch()

    def serve(self, request):
        raise NotImplementedError


def rss_mb():
    """Resident memory of this process in MiB (Linux /proc)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return None


def ensure(folder, path, module_args, start_timeout_s, name, error):
    """Start `python -m <module_args...>` in `folder` unless a worker answers on `path`; return `path` once
    one answers. `error` (an exception class) is raised, naming the `name`d worker and its log, when it
    exits while starting or does not answer within `start_timeout_s`."""
    if answers(path):
        return path
    log_path = os.path.join(folder, "worker.log")
    with open(os.path.join(folder, "worker.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if answers(path):  # another session started it while this one waited for the lock
            return path
        with open(log_path, "ab") as log:
            proc = subprocess.Popen([sys.executable, "-m", *module_args], cwd=ROOT, stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + start_timeout_s
        while time.monotonic() < deadline:
            if answers(path):
                return path
            if proc.poll() is not None:
                raise error(f"the {name} exited ({proc.returncode}) while starting; see {log_path}")
            time.sleep(0.1)
    raise error(f"the {name} did not answer within {start_timeout_s:.0f} s; see {log_path}")
