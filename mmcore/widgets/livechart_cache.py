"""The Logs page's reading and chart work, done once per change of a run's files and shared by every
session of the server (the page holds one `Shared` with `st.cache_resource`).

- `Memo`: values kept per slot (what they are of) and version (the state of the files they come
  from): a new version replaces the old one, so a growing run keeps one table and one chart, not
  one per update; slots nobody asked for within `ttl_s` go, and at most `slots` are kept.
- `Shared.read(run)`: a run's `run_selection.Reading`, from log parsers shared by all sessions (each
  update reads only what was appended), per version of the run's files (sizes, times, inodes), its
  job's state and the viewer's language (the reading holds texts).
- `Shared.metrics(run_dir)`: a records folder's metrics stream per version, read incrementally once
  it grows.

What these return is shared: callers read it and never change it.
"""
import threading
import time
from collections import OrderedDict
from pathlib import Path

from mmcore.jobs import run_selection
from mmcore.jobs.change_watch import file_marker
from mmcore.runs import metric_stream

TTL_S = 600.0  # a run or chart nobody looked at for this long is forgotten (its parser too)


class Memo:
    """{slot: (version, value)}, thread-safe; `get(slot, version, make)` calls `make()` only when the
    slot has no value of that version. Sessions asking for the same slot at once wait for the one
    computing it; other slots are not held up meanwhile."""

    def __init__(self, slots=64, ttl_s=TTL_S, clock=time.monotonic):
        self.slots = slots
        self.ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._making = {}  # slot -> the lock its maker holds
        self._items = OrderedDict()  # slot -> [version, value, last asked]
        self.made = 0  # how many values were computed (for tests and benches)

    def _cached(self, slot, version):
        item = self._items.get(slot)
        if item is not None and item[0] == version:
            item[2] = self._clock()
            self._items.move_to_end(slot)
            return item
        return None

    def get(self, slot, version, make):
        with self._lock:
            if (item := self._cached(slot, version)) is not None:
                return item[1]
            making = self._making.setdefault(slot, threading.Lock())
        with making:
            with self._lock:
                if (item := self._cached(slot, version)) is not None:
                    return item[1]  # made meanwhile by another session
            value = make()
            with self._lock:
                now = self._clock()
                self.made += 1
                self._items[slot] = [version, value, now]
                self._items.move_to_end(slot)
                self._forget(now)
                if self._making.get(slot) is making:
                    del self._making[slot]
            return value

    def _forget(self, now):
        for slot in [s for s, item in self._items.items() if now - item[2] > self.ttl_s]:
            del self._items[slot]
        while len(self._items) > self.slots:
            self._items.popitem(last=False)

    def __len__(self):
        return len(self._items)


def run_files(run):
    """The files a run reads: its logs (a job's and its resumes') and its metrics stream."""
    paths = [path for _, path in (run.parts or [(None, run.path)])] if run.path else []
    if run.run_dir is not None:
        paths.append(str(Path(run.run_dir) / metric_stream.METRICS_FILE))
    return paths


def run_slot(run):
    """What identifies a run's reading apart from its files' state: its name, files and job state."""
    job = run.job
    return (run.label, run.path, tuple(run.parts or ()), str(run.run_dir),
            None if job is None else (job.id, job.status, job.started_at, job.ended_at))


def version_of(paths):
    """The state of `paths` (size, mtime, inode of each; None for a missing one)."""
    return tuple(file_marker(path) for path in paths)


class Shared:
    """One server's readings of runs (see the module)."""

    def __init__(self, slots=256, ttl_s=TTL_S, clock=time.monotonic):
        self.readings = Memo(slots, ttl_s, clock)
        self.charts = Memo(max(16, slots // 4), ttl_s, clock)  # a chart may hold 20 runs' points: fewer of them
        self.ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._parsers = {}  # log path -> LogParser, shared by every run that reads it
        self._path_locks = {}  # log path -> the lock of whoever updates its parser
        self._parser_used = {}  # log path -> when last used
        self._streams = {}  # records folder -> [MetricsReader (None until it grew), last used, its lock]

    def read(self, run, language=None):
        """(`run_selection.Reading` of `run`, its version): read again only when its files changed."""
        version = version_of(run_files(run))
        return self.readings.get((run_slot(run), language), version, lambda: self._read(run)), version

    def _read(self, run):
        paths = sorted(run_files(run))
        with self._lock:
            now = self._clock()
            for path in paths:
                self._parser_used[path] = now
            for path in [p for p, used in self._parser_used.items() if now - used > self.ttl_s]:
                self._parsers.pop(path, None)
                self._path_locks.pop(path, None)
                del self._parser_used[path]
            locks = [self._path_locks.setdefault(path, threading.Lock()) for path in paths]
        for lock in locks:  # taken in path order: two runs sharing a log (a job's lineage) cannot deadlock
            lock.acquire()
        try:
            with self._lock:
                own = {path: self._parsers[path] for path in paths if path in self._parsers}
            reading = run_selection.read_run(run, own)  # other runs are read meanwhile
            with self._lock:
                self._parsers.update(own)
            return reading
        finally:
            for lock in locks:
                lock.release()

    def metrics(self, run_dir):
        """(the metrics frame of the records folder `run_dir`, its version). A stream is read whole the
        first time and only its frame is kept (a reader holds every record as a dict); one that changed
        since (a running job's) gets a reader that from then on reads only appended lines."""
        path = str(Path(run_dir) / metric_stream.METRICS_FILE)
        version = version_of([path])
        return self.readings.get(("metrics", str(run_dir)), version, lambda: self._metrics(run_dir)), version

    def _metrics(self, run_dir):
        folder = str(run_dir)
        with self._lock:
            now = self._clock()
            for old in [f for f, entry in self._streams.items() if now - entry[1] > self.ttl_s]:
                del self._streams[old]
            entry = self._streams.get(folder)
            if entry is None:
                entry = self._streams[folder] = [None, now, threading.Lock()]  # read once: no reader yet
                first = True
            else:
                entry[1], first = now, False
        with entry[2]:  # reading: other streams are read meanwhile
            if first:
                return metric_stream.read(run_dir)
            if entry[0] is None:
                entry[0] = metric_stream.MetricsReader(run_dir)  # read again: it grows
            entry[0].update()
            return entry[0].frame()
