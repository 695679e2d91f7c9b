"""The Logs page's reading and chart work, done once per change of a run's files and shared by every
session of the server (the page holds one `Shared` with `st.cache_resource`).

- `Memo`: values kept per slot (what they are of) and version (the state of the files they come
  from): a new version replaces the old one, so a growing run keeps one table and one chart, not
  one per update; slots nobody asked for within `ttl_s` go, and at most `slots` are kept.
- `Shared.read(run)`: a run's `run_selection.Reading`, from log parsers shared by all sessions (each
  update reads only what was appended), per version of the run's files (sizes, times, inodes), its
  job's state and the viewer's language (the reading holds texts).
- `Shared.metrics(run_dir)`: a records folder's metrics stream per version, from the reader its
  runs' readings use too (each update reads only appended lines).
- `Shared.metric_chart`, `Shared.panel_chart`: a chart of many runs per version of all their files,
  put together from each run's part (`traces`), kept per version of that run's files: when one of
  many overlaid runs grows, only its part is computed again.

What these return is shared: callers read it and never change it.
"""
import functools
import threading
import time
from collections import OrderedDict
from pathlib import Path

import pandas as pd

from mmcore.jobs import run_selection
from mmcore.jobs.change_watch import file_marker
from mmcore.logs import charts
from mmcore.runs import metric_stream, rlview

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


@functools.lru_cache(maxsize=64)
def _empty(columns, x):
    """A frame without rows of `columns` but `x` (shared: never changed)."""
    return pd.DataFrame(columns=[c for c in columns if c != x])


def version_of(paths):
    """The state of `paths` (size, mtime, inode of each; None for a missing one)."""
    return tuple(file_marker(path) for path in paths)


class Shared:
    """One server's readings of runs (see the module)."""

    def __init__(self, slots=256, ttl_s=TTL_S, clock=time.monotonic):
        self.readings = Memo(slots, ttl_s, clock)
        self.traces = Memo(slots * 4, ttl_s, clock)  # one run's part of one chart: a run that grows redoes only its own
        self.charts = Memo(max(16, slots // 4), ttl_s, clock)  # a chart may hold 20 runs' points: fewer of them
        self.ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._parsers = {}  # log path -> LogParser, shared by every run that reads it
        self._streams = {}  # metrics stream path -> MetricsReader, shared by every run and chart that reads it
        self._path_locks = {}  # file path -> the lock of whoever updates its parser or reader
        self._used = {}  # file path -> when last used

    def read(self, run, language=None):
        """(`run_selection.Reading` of `run`, its version): read again only when its files changed."""
        version = version_of(run_files(run))
        return self.readings.get((run_slot(run), language), version, lambda: self._read(run)), version

    def _hold(self, paths):
        """The locks of `paths` (file paths), noting their use and forgetting what was not used for
        `ttl_s`: to be taken in this order (two runs sharing a log, a job's lineage, cannot deadlock)."""
        paths = sorted(paths)
        with self._lock:
            now = self._clock()
            for path in paths:
                self._used[path] = now
            for path in [p for p, used in self._used.items() if now - used > self.ttl_s]:
                self._parsers.pop(path, None)
                self._streams.pop(path, None)
                self._path_locks.pop(path, None)
                del self._used[path]
            return [self._path_locks.setdefault(path, threading.Lock()) for path in paths]

    def _read(self, run):
        locks = self._hold(run_files(run))
        for lock in locks:
            lock.acquire()
        try:
            with self._lock:
                parsers = {path: self._parsers[path] for path in run_files(run) if path in self._parsers}
                streams = self._own_stream(run.run_dir)
            reading = run_selection.read_run(run, parsers, streams=streams)  # other runs are read meanwhile
            with self._lock:
                self._parsers.update(parsers)
                self._keep_streams(streams)
            return reading
        finally:
            for lock in locks:
                lock.release()

    def metrics(self, run_dir):
        """(the metrics frame of the records folder `run_dir`, its version), from the reader its runs'
        readings share: once read, a stream is read on from where it stopped."""
        path = str(Path(run_dir) / metric_stream.METRICS_FILE)
        version = version_of([path])
        return self.readings.get(("metrics", str(run_dir)), version, lambda: self._metrics(run_dir, path)), version

    def _metrics(self, run_dir, path):
        (lock,) = self._hold([path])
        with lock:  # reading: other streams are read meanwhile
            with self._lock:
                streams = self._own_stream(run_dir)
            frame = run_selection.updated_stream(streams, run_dir).frame()
            with self._lock:
                self._keep_streams(streams)
            return frame

    # -- charts ------------------------------------------------------------------------------------

    def metric_chart(self, metric, tables, versions, language=None, **options):
        """`charts.metric_chart(metric, tables, **options)` for `tables` ({label: table}) whose runs' files
        are at `versions` (in the same order): once per change for every session, and each run's part
        (`charts.run_traces`) once per change of that run's files."""
        slot = ("metric", metric, tuple(tables), tuple(sorted(options.items())), language)
        of_run = dict(zip(tables, versions))

        def part(i, name, df, metric, **given):
            return self.traces.get(("metric", i, name, metric, tuple(sorted(given.items()))), of_run[name],
                                   lambda: charts.run_traces(i, name, df, metric, **given))
        return self.charts.get(slot, tuple(versions), lambda: charts.metric_chart(metric, tables, parts=part, **options))

    def panel_chart(self, panel, frames, versions, x, language=None):
        """The chart of the RL panel `panel` (`rlview.panel_figure` as a `charts.chart_of`) over `frames`
        [(label, metrics frame)] whose records are at `versions`: once per change for every session, one
        run's traces at a time (that run's figure with the other frames empty, so that colours and names
        are the whole chart's), each once per change of its own records."""
        labels = tuple(label for label, _ in frames)
        return self.charts.get(("panel", panel.key, labels, x, language), tuple(versions),
                               lambda: self._panel_chart(panel, frames, versions, x, language))

    def _panel_chart(self, panel, frames, versions, x, language):
        labels = tuple(label for label, _ in frames)
        names = tuple(panel.columns(list(dict.fromkeys(c for _, df in frames for c in df.columns))))

        def alone(r):  # run r's frame; the others' columns without the x axis: skipped, still naming metrics
            return [(label, df if i == r else _empty(tuple(df.columns), x)) for i, (label, df) in enumerate(frames)]
        parts = [self.traces.get(("panel", panel.key, labels, names, r, x, language), version,
                                 lambda r=r: charts.chart_of(rlview.panel_figure(panel, alone(r), x=x)))
                 for r, version in enumerate(versions)]
        return charts.joined(parts)

    def _own_stream(self, run_dir):
        """{records folder: its reader}, as `run_selection.updated_stream` takes them: the shared one, if any."""
        if run_dir is None:
            return {}
        reader = self._streams.get(str(Path(run_dir) / metric_stream.METRICS_FILE))
        return {str(run_dir): reader} if reader is not None else {}

    def _keep_streams(self, streams):
        for folder, reader in streams.items():
            self._streams[str(Path(folder) / metric_stream.METRICS_FILE)] = reader
