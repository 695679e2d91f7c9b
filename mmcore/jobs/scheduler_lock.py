"""One scheduler per job store: its lock, and starting or waking it from any process.

The scheduler (`python -m mmcore.queue.scheduler`) holds an exclusive `flock` on `<home>/scheduler.lock`
and writes its pid there; the kernel drops the lock when the process dies, so a killed scheduler
never blocks the next one. `ensure_running()` (on submit, on every page run, and from every
supervisor whose job ends) starts one when there is work and none runs; `wake()` makes a running
one decide at once instead of at its next poll.
"""
import fcntl
import os
import signal
import subprocess
import sys
import threading

from mmcore.base import paths
from mmcore.base.paths import ROOT

LOCK_NAME = "scheduler.lock"
LOG_NAME = "scheduler.log"


def lock_path(store):
    return store.home / LOCK_NAME


def try_lock(path):
    """An open file holding the exclusive lock, or None when another process holds it."""
    fd = paths.open_private(path, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def running_pid(store):
    """The pid of the scheduler that holds the lock, or None when none does."""
    path = lock_path(store)
    fd = try_lock(path)
    if fd is not None:
        os.close(fd)  # closing drops the lock
        return None
    try:
        text = path.read_text().strip()
        return int(text) if text.isdigit() else None
    except OSError:
        return None


def has_work(store):
    """True while jobs wait in the queue or Slurm jobs are active (they need reconciling)."""
    with store._connect() as conn:
        return conn.execute(
            "SELECT 1 FROM jobs WHERE status = 'queued' AND (waiting = 1 OR backend != 'local')"
            " OR (status = 'running' AND backend != 'local') LIMIT 1").fetchone() is not None


def ensure_running(store):
    """Start the scheduler of `store` when there is work and none runs; return its pid or None."""
    if not has_work(store):
        return None
    pid = running_pid(store)
    if pid is not None:
        return pid
    log = os.fdopen(paths.open_private(store.home / LOG_NAME), "ab")
    try:
        proc = subprocess.Popen([sys.executable, "-m", "mmcore.queue.scheduler", "--db", store.path], cwd=ROOT,
                                start_new_session=True, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    finally:
        log.close()
    threading.Thread(target=proc.wait, name=f"reap-scheduler-{proc.pid}", daemon=True).start()
    return proc.pid


def wake(store):
    """Make a running scheduler decide now instead of at its next poll (a job just ended)."""
    pid = running_pid(store)
    if pid is not None:
        try:
            os.kill(pid, signal.SIGUSR1)
        except (ProcessLookupError, PermissionError):
            pass
    else:
        ensure_running(store)
