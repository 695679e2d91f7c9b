"""Live pages for every viewer at a cost that does not grow with the viewers.

One `ChangeWatch` per server process (pages hold it with `st.cache_resource`) looks at the job
store's and the logs' change markers at most once per `interval`, however many tabs ask:

- the store: SQLite's `PRAGMA data_version` on one connection kept open (it changes when any other
  connection commits: a job launched from another browser, a supervisor recording progress or an
  ending), and the database file's identity;
- the logs: size and modification time of each active job's log, and of the logs folder.

Each check gives a `Snapshot` with two counters, `store_version` and `logs_version`, bumped when
their marker changed, and one counter per file a tab shows (`file_versions`, for files registered
through `paths_marker`). A tab keeps the snapshot it last drew (`Seen`) and reruns only when
`should_rerun` says so: at once for a store change (a new or ended job), and at most every
`progress_s` for a log that only grew (progress, charts). Work done on a rerun is shared between
sessions by keying caches on these counters.

`MarkerFile` publishes each snapshot as a small JSON file that Streamlit serves as a static file: a
tab's ticker fetches it and runs nothing on the server until something it shows changed. The tab side
(the ticker, the "updated N s ago" line) is `mmcore.live.livepage`.
"""
import atexit
import hashlib
import json
import logging
import os
import secrets
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from mmcore.jobs.jobrow import ACTIVE_STATUSES

CHECK_S = 1.0  # at most one look at the markers per second for the whole server
RECONCILE_S = 5.0  # how often the watch notices jobs whose supervisor died (a few process probes)
FILES_TTL_S = 600.0  # a file no tab asked about for this long is no longer watched
MARKER_PREFIX = "live-"  # MarkerFile names: live-<pid>-<token>.json (feeds: live-<pid>-feed-<token>.json)
_LOGGER = logging.getLogger(__name__)


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
    file_versions: dict = field(default_factory=dict)  # path -> counter, for the files tabs show


class ChangeWatch:
    """The store's and the active logs' change markers, checked at most once per `interval`.

    Thread-safe: every session of the server calls `poll()`; only the first call in each interval
    looks at anything, the others get the same snapshot. `paths_marker(paths)` watches files a page
    shows that are not active jobs' logs (uploads, files of the logs folder) in the same checks.
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
        self._files = {}  # path -> [marker at the last check, version, last asked]
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
        files_changed = self._check_files(now)
        changed = files_changed or (store_version, logs_version) != (snap.store_version, snap.logs_version)
        self._snapshot = Snapshot(store_version, logs_version, now if changed else snap.changed_at, now,
                                  counts, error, {path: entry[1] for path, entry in self._files.items()})

    def _check_files(self, now):
        """Bump the version of each watched file whose marker changed; forget files nobody asked about
        for FILES_TTL_S. Whether any version moved."""
        changed = False
        for path, entry in list(self._files.items()):
            if now - entry[2] > FILES_TTL_S:
                del self._files[path]
                continue
            marker = file_marker(path)
            if marker != entry[0]:
                entry[0] = marker
                entry[1] += 1
                changed = True
        return changed

    def poll(self):
        """The latest snapshot, checking the markers first if the last check is `interval` old."""
        with self._lock:
            now = self._clock()
            if now - self._snapshot.checked_at >= self.interval:
                self._check(now)
            return self._snapshot

    def file_versions(self, paths):
        """path -> the counter of each of `paths` that is watched (see `paths_marker`)."""
        with self._lock:
            return {path: self._files[path][1] for path in paths if path in self._files}

    def paths_marker(self, paths):
        """A value that changes when any of `paths` changes (size, mtime, inode), as of the last check
        (each file looked at no more than once per `interval` for the whole server). The paths are
        watched from then on: each check bumps their counters in `Snapshot.file_versions`."""
        with self._lock:
            now = self._clock()
            for path in paths:
                entry = self._files.get(path)
                if entry is None:
                    self._files[path] = [file_marker(path), 1, now]
                else:
                    entry[2] = now
            if now - self._snapshot.checked_at >= self.interval:
                self._check(now)
            return tuple(self._files[path][0] for path in paths)


def path_key(path):
    """A file's name in the published marker: a digest, so the marker names no path."""
    return hashlib.sha256(str(path).encode("utf-8", "surrogateescape")).hexdigest()[:16]


def keyed_versions(versions):
    """{path: counter} as the published marker names files: {`path_key`: counter}."""
    return {path_key(path): version for path, version in versions.items()}


def marker_body(snap):
    """What a tab needs from a snapshot: counters and times only (the file is served to anyone who
    knows its name, without sign-in)."""
    return {"store": snap.store_version, "logs": snap.logs_version,
            "files": keyed_versions(snap.file_versions),
            "changed_at": snap.changed_at, "checked_at": snap.checked_at, "error": snap.error is not None}


class MarkerFile:
    """The watch's snapshot as a JSON file in `folder` (Streamlit's static folder), rewritten by one
    thread every `interval`: what a tab's ticker fetches instead of running a script on the server.

    The name holds the server's pid and a random token: servers may share a folder, and the name
    cannot be guessed. `start()` also removes the files of servers that are gone.

    `before_publish` holds callables given each snapshot before it is published (the pages' fed
    sections write their feeds there, so that a tab that sees a change finds its feed ready). One that
    fails is logged and the marker is published anyway.
    """

    def __init__(self, watch, folder, interval=CHECK_S):
        self.watch = watch
        self.folder = Path(folder)
        self.interval = interval
        self.name = f"{MARKER_PREFIX}{os.getpid()}-{secrets.token_hex(8)}.json"
        self.path = self.folder / self.name
        self._stop = threading.Event()
        self._thread = None
        self.before_publish = []

    def write(self):
        """Check the watch and publish its snapshot (atomically: a tab never reads half a file)."""
        snap = self.watch.poll()
        for call in list(self.before_publish):
            try:
                call(snap)
            except Exception:  # noqa: BLE001 - the marker must keep coming: the tabs fall back on it
                _LOGGER.exception("live marker: %r failed", call)
        body = marker_body(snap)
        publish(self.folder, self.name, body)
        return body

    def start(self):
        """Publish once (OSError when the folder cannot be written) and keep publishing."""
        remove_stale_markers(self.folder)
        self.write()
        self._thread = threading.Thread(target=self._run, name="live-marker", daemon=True)
        self._thread.start()
        atexit.register(self.close)
        return self

    def _run(self):
        while not self._stop.wait(self.interval):
            try:
                self.write()
            except OSError:
                pass  # a full or read-only disk: the tabs see a stale marker and tick the server instead

    def close(self):
        """Stop publishing and remove this process's files (the marker and any feeds)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        for path in [*self.folder.glob(f"{MARKER_PREFIX}{os.getpid()}-*.json"),
                     *self.folder.glob(f".{MARKER_PREFIX}{os.getpid()}-*.tmp")]:
            try:
                path.unlink()
            except FileNotFoundError:
                pass


def publish(folder, name, body):
    """Write `body` as the JSON file `name` of `folder` atomically (a tab never reads half a file)."""
    tmp = Path(folder) / f".{name}.tmp"
    tmp.write_text(json.dumps(body), encoding="utf-8")
    os.replace(tmp, Path(folder) / name)


def remove_stale_markers(folder):
    """Remove the marker (and feed) files of server processes that no longer exist."""
    for path in Path(folder).glob(f"{MARKER_PREFIX}*.json"):
        try:
            pid = int(path.name[len(MARKER_PREFIX):].split("-", 1)[0])
        except ValueError:
            continue
        if pid == os.getpid() or _alive(pid):
            continue
        try:
            path.unlink()
        except OSError:
            pass


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


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
