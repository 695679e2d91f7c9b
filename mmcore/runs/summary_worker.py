"""The background worker that summarises the metrics streams the Runs page left for later.

    python -m mmcore.runs.summary_worker --db JOBS_DB --paths LIST_JSON

The page's script hands the never-summarised streams of finished runs over (`hand_over`) and shows those runs as
being read; a child process (its own session, niced, so the page keeps its core) reads each stream once
(`runresults.metrics_summary`) and keeps the summaries in the job store's `run_summaries` table, a batch about
twice a second, so the page (`left`), any other session and every later process find them there.

One worker per job store at a time: the starter holds `<jobs.db>.summaries.lock` (flock) and hands it to the
child, which holds it until it exits, so "running" is "locked". Streams handed over while a worker runs are
started when it ends; a stream a worker was given but could not keep (it died, the file cannot be read) is no
longer left for later, so the page reads it itself (`unfinished`) rather than waiting for ever.
"""
import argparse
import fcntl
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

from mmcore.base.paths import ROOT, open_private, python_path
from mmcore.runs import runresults

KEEP_EVERY_S = 0.5  # a batch of summaries is kept at least this often, so the page sees progress
_state = {}  # job store -> {"paths": {metrics file: (size, mtime_ns)} handed over, "started": set of given ones}
_state_lock = threading.Lock()


def lock_path(store_path):
    return f"{store_path}.summaries.lock"


def _work(store_path):
    return _state.setdefault(str(store_path), {"paths": {}, "started": set()})


def running(store_path):
    """True while a worker summarises streams of this job store (from any process)."""
    fd = open_private(lock_path(store_path), os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # (closing it releases a lock taken here)
    return False


def _start(store_path, paths):
    """Start a worker on `paths` unless one runs; True when started."""
    fd = open_private(lock_path(store_path), os.O_RDWR | os.O_CREAT)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        folder = os.path.dirname(os.path.abspath(str(store_path)))
        handle, listing = tempfile.mkstemp(prefix=".summaries-", suffix=".json", dir=folder)
        with os.fdopen(handle, "w", encoding="utf-8") as f:
            json.dump(sorted(paths), f)
        log = open_private(os.path.join(folder, "run_summaries.log"))
        try:  # the child inherits the locked descriptor: the lock is held until it exits
            subprocess.Popen([sys.executable, "-m", "mmcore.runs.summary_worker", "--db", str(store_path),
                              "--paths", listing], cwd=ROOT, env={**os.environ, "PYTHONPATH": python_path()},
                             stdin=subprocess.DEVNULL, stdout=log, stderr=log, pass_fds=(fd,),
                             start_new_session=True)
        except OSError:
            os.unlink(listing)
            raise
        finally:
            os.close(log)
        return True
    finally:
        os.close(fd)


def hand_over(store_path, paths):
    """Leave `paths` ({metrics file: (size, mtime_ns)}) to the background worker: started now unless one runs
    (then `left` starts one for them when it ends)."""
    with _state_lock:
        work = _work(store_path)
        work["paths"].update(paths)
        fresh = [p for p in work["paths"] if p not in work["started"]]
        if fresh and _start(store_path, fresh):
            work["started"].update(fresh)


def unfinished(store_path):
    """The streams handed over whose worker ended without keeping their summary: to be read by the page."""
    with _state_lock:
        work = _work(store_path)
        given = [p for p in work["paths"] if p in work["started"]]
    return set(given) if given and not running(store_path) else set()


def left(store_path):
    """How many of the streams handed over are not summarised yet (0 when what is left will not come from a
    worker: the page then reads it itself). Starts a worker for those handed over while another ran."""
    kept = runresults.SummaryStore(store_path).keys()
    with _state_lock:
        work = _work(store_path)
        for path, key in list(work["paths"].items()):
            if kept.get(path) == key:
                del work["paths"][path]
                work["started"].discard(path)
        if not work["paths"]:
            return 0
        if not running(store_path):
            fresh = [p for p in work["paths"] if p not in work["started"]]
            if not fresh or not _start(store_path, fresh):
                return 0 if not fresh else len(work["paths"])
            work["started"].update(fresh)
        return len(work["paths"])


def summarise(store_path, paths):
    """Read each stream once and keep the summaries in the job store's file, a batch at a time."""
    kept = runresults.SummaryStore(store_path)
    batch, since = set(), time.monotonic()
    for path in paths:
        runresults.metrics_summary(path, batch)
        if batch and time.monotonic() - since >= KEEP_EVERY_S:
            kept.keep(batch)
            batch, since = set(), time.monotonic()
    kept.keep(batch)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="the job store's file")
    parser.add_argument("--paths", required=True, help="a JSON list of metrics files (removed once read)")
    args = parser.parse_args(argv)
    os.nice(10)  # the page that started it renders first
    with open(args.paths, encoding="utf-8") as f:
        paths = json.load(f)
    os.unlink(args.paths)
    summarise(args.db, paths)


if __name__ == "__main__":
    main()
