"""Live pages for every viewer at a cost that does not grow with the viewers.

One `ChangeWatch` per server process (pages hold it with `st.cache_resource`) looks at the job
store's and the logs' change markers at most once per `interval`, however many tabs ask:

- the store: SQLite's `PRAGMA data_version` on one connection kept open (it changes when any other
  connection commits: a job launched from another browser, a supervisor recording progress or an
  ending), and the database file's identity;
- the logs: size and modification time of each active job's log, and of the logs folder.

Each check gives a `Snapshot` with two counters, `store_version` and `logs_version`, bumped when
their marker changed. A tab keeps the snapshot it last drew (`Seen`) and reruns only when
`should_rerun` says so: at once for a store change (a new or ended job), and at most every
`progress_s` for a log that only grew (progress, charts). Work done on a rerun is shared between
sessions by keying caches on these counters. The tab side (a tick only while the tab is visible, the
"updated N s ago" line) is `mmcore.livepage`.
"""
import os
import sqlite3
import threading
import time
from dataclasses import dataclass, field

from mmcore.jobrow import ACTIVE_STATUSES

CHECK_S = 1.0  # at most one look at the markers per second for the whole server
RECONCILE_S = 5.0  # how often the watch notices jobs whose supervisor died (a few process probes)


def file_marker(path):
    """(size, mtime_ns, inode) of a file, or None when it does not exist (cheap: one stat)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns, st.st_ino


@dataclass(frozen=True)
class Snapshot:
    """What one check found. Counters only grow; times are unix seconds."""
    store_version: int
    logs_version: int
    changed_at: float  # the last time either counter moved (the start of the watch at first)
    checked_at: float
    counts: dict = field(default_factory=dict)  # status -> number of jobs, as of store_version
    error: str | None = None  # why the store could not be read at the last check


class ChangeWatch:
    """The store's and the active logs' change markers, checked at most once per `interval`.

    Thread-safe: every session of the server calls `poll()`; only the first call in each interval
    looks at anything, the others get the same snapshot. `paths_marker(paths)` does the same for
    files a page shows that are not active jobs' logs (uploads, files of the logs folder).
    """

    def __init__(self, store, interval=CHECK_S, reconcile_every=RECONCILE_S, clock=time.time):
        self.store = store
        self.interval = interval
        self.reconcile_every = reconcile_every
        self._clock = clock
        self._lock = threading.Lock()
        self._conn = None
        self._db_id = None
        self._store_marker = object()
        self._logs_marker = object()
        self._active_logs = ()
        self._reconciled_at = float("-inf")
        self._path_markers = {}  # path -> (checked_at, marker)
        now = clock()
        self._snapshot = Snapshot(0, 0, now, float("-inf"))

    def _data_version(self):
        db_id = file_marker(self.store.path)
        db_id = db_id and db_id[2]
        if self._conn is None or db_id != self._db_id:  # first use, or the file was replaced
            if self._conn is not None:
                self._conn.close()
            self._conn = sqlite3.connect(self.store.path, timeout=5, check_same_thread=False,
                                         isolation_level=None)
            self._db_id = db_id
        return db_id, self._conn.execute("PRAGMA data_version").fetchone()[0]

    def _check(self, now):
        snap = self._snapshot
        store_version, logs_version, counts, error = snap.store_version, snap.logs_version, snap.counts, None
        try:
            if now - self._reconciled_at >= self.reconcile_every:
                self._reconciled_at = now
                self.store.reconcile()  # a dead supervisor's job becomes `lost`: a store change below
            marker = self._data_version()
            if marker != self._store_marker:
                self._store_marker = marker
                store_version += 1
                counts = self.store.counts()
                self._active_logs = tuple(job.log_path for job in self.store.list(status=ACTIVE_STATUSES, limit=None)
                                          if job.log_path)
        except (sqlite3.Error, OSError) as exc:
            error = str(exc)
            if self._conn is not None:
                self._conn.close()
                self._conn = None
        logs = (file_marker(self.store.logs_dir), tuple(file_marker(p) for p in self._active_logs))
        if logs != self._logs_marker:
            self._logs_marker = logs
            logs_version += 1
        changed = (store_version, logs_version) != (snap.store_version, snap.logs_version)
        self._snapshot = Snapshot(store_version, logs_version, now if changed else snap.changed_at, now,
                                  counts, error)

    def poll(self):
        """The latest snapshot, checking the markers first if the last check is `interval` old."""
        with self._lock:
            now = self._clock()
            if now - self._snapshot.checked_at >= self.interval:
                self._check(now)
            return self._snapshot

    def paths_marker(self, paths):
        """A value that changes when any of `paths` changes (size, mtime, inode), each file looked at
        no more than once per `interval` for the whole server."""
        now = self._clock()
        markers = []
        with self._lock:
            for path in paths:
                cached = self._path_markers.get(path)
                if cached is None or now - cached[0] >= self.interval:
                    cached = self._path_markers[path] = (now, file_marker(path))
                markers.append(cached[1])
            if len(self._path_markers) > 4096:  # paths nobody asks for any more
                stale = [p for p, (at, _) in self._path_markers.items() if now - at > 60]
                for p in stale:
                    del self._path_markers[p]
        return tuple(markers)


@dataclass
class Seen:
    """What one tab last drew and what it follows.

    `store_version`/`logs_version`: the counters of the snapshot it drew; `paths`: the marker of the
    files it shows (`ChangeWatch.paths_marker`); `drawn_at`: when. It follows store changes always,
    the active jobs' logs when `follow_logs`, its own files when `paths` is not empty, and reruns
    for grown logs at most every `progress_s` seconds.
    """
    store_version: int
    logs_version: int
    drawn_at: float
    follow_logs: bool = False
    paths: tuple = ()
    progress_s: float = 5.0


def should_rerun(seen, snap, paths=(), now=None, progress_s=None):
    """Whether a tab that drew `seen` must rerun to show `snap` (and `paths`, the current marker of
    its own files): at once for a store change (a job added, ended, deleted), and for a log that only
    grew once `seen.progress_s` (or `progress_s`, if given) has passed since the tab last drew."""
    if seen is None:
        return False  # the tab is drawing for the first time right now
    if snap.store_version != seen.store_version:
        return True
    grew = (seen.follow_logs and snap.logs_version != seen.logs_version) or tuple(paths) != tuple(seen.paths)
    if not grew:
        return False
    now = time.time() if now is None else now
    wait = seen.progress_s if progress_s is None else progress_s
    return now - seen.drawn_at >= wait
