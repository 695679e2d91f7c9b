"""The full-file scan of a data file, run once in a background child process and shared by every session.

A scan is keyed by the file (real path, size, mtime), its kind, the tokenizer's fingerprint and the
token sample size, so a changed file or tokenizer gets a new scan and every other request, from any
session, the CLI or the API, reads the cached one. Its files live in `<home>/data_scans/`:

    <key>.lock           held (flock) by the worker while it runs: "running" is "locked"
    <key>.progress.json  {"phase": "health"|"tokens", "done", "total"}, rewritten about twice a second
    <key>.health.json    the health scan's result, as soon as it is done (the page shows it at once)
    <key>.json, .npz     the final report and the token table (`mmcore.data.sizing.TokenTable`)
    <key>.error.txt      why a scan failed (shown, and removed by `start(..., retry=True)`)

The page's script never scans: `start` spawns `python -m mmcore.workers.data_worker scan ...`
(detached, its own session) and returns at once; `state` reads what there is.
"""
import fcntl
import hashlib
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mmcore.base import regular_file
from mmcore.base.paths import ROOT, default_home, open_private, private_dir
from mmcore.data.sizing import TokenTable
from trainer.rules.roots import BUNDLED_TOKENIZER
from trainer.rules.weight_meta import tokenizer_fingerprint

SCANS_SUBDIR = "data_scans"
PAGE_SAMPLE = 5_000  # rows the page's scan encodes (all of a smaller file); the CLI encodes all by default
KEEP_SCANS = 40  # older scans are removed when a new one starts
START_WAIT_S = 10.0


@dataclass
class ScanState:
    key: str
    status: str  # "done", "running", "failed" or "missing"
    progress: dict | None = None
    health: dict | None = None
    report: dict | None = None
    table: TokenTable | None = None
    error: str | None = None


def scans_dir(home=None):
    return private_dir(Path(home or default_home()) / SCANS_SUBDIR)


def tokenizer_dir(value=None):
    return Path(value).resolve() if value else BUNDLED_TOKENIZER


def scan_key(path, kind, tokenizer=None, sample=PAGE_SAMPLE):
    """The cache key of a scan: the file's real path, size and mtime, the kind, tokenizer and sample."""
    st = os.stat(path)
    fingerprint = tokenizer_fingerprint(str(tokenizer_dir(tokenizer)))
    text = json.dumps([os.path.realpath(path), st.st_size, st.st_mtime_ns, kind, fingerprint, int(sample or 0)])
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _file(home, key, suffix):
    return scans_dir(home) / f"{key}{suffix}"


def _read_json(path):
    try:
        return json.loads(regular_file.read_text(path))
    except (OSError, ValueError):
        return None


def running(home, key):
    """True while a worker holds the scan's lock."""
    try:
        fd = os.open(_file(home, key, ".lock"), os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # closing drops a lock this check took
    return False


def state(home, key):
    """What there is of a scan now: finished report and table, health only, progress, or an error."""
    report = _read_json(_file(home, key, ".json"))
    if report is not None:
        table = None
        try:
            with np.load(_file(home, key, ".npz")) as arrays:
                table = TokenTable.from_arrays(arrays, report["rows"], report["kind"])
        except (OSError, ValueError, KeyError):
            pass
        return ScanState(key, "done", health=report.get("health"), report=report, table=table)
    health = _read_json(_file(home, key, ".health.json"))
    if running(home, key):
        return ScanState(key, "running", progress=_read_json(_file(home, key, ".progress.json")), health=health)
    error = _file(home, key, ".error.txt")
    if error.exists():
        return ScanState(key, "failed", health=health, error=regular_file.read_text(error, errors="replace"))
    return ScanState(key, "missing", health=health)


def worker_argv(path, kind, key, home, tokenizer=None, sample=PAGE_SAMPLE):
    return [sys.executable, "-m", "mmcore.workers.data_worker", "scan", "--file", str(path), "--kind", kind,
            "--tokenizer", str(tokenizer_dir(tokenizer)), "--sample", str(int(sample or 0)),
            "--out", str(scans_dir(home) / key)]


def start(path, kind, home=None, tokenizer=None, sample=PAGE_SAMPLE, retry=False):
    """Make sure the scan of `path` exists or runs; returns its key at once (never waits for the scan).

    Under a start lock, so two sessions asking at once start one worker."""
    home = home or default_home()
    key = scan_key(path, kind, tokenizer, sample)
    folder = scans_dir(home)
    with open(open_private(folder / "start.lock", os.O_WRONLY | os.O_CREAT), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if retry:
            _file(home, key, ".error.txt").unlink(missing_ok=True)
        now = state(home, key)
        if now.status != "running":
            _remove_leftovers(home, key)  # of a worker that was killed (no exit path of its own ran)
        if now.status in ("done", "running", "failed"):
            return key
        _prune(folder)
        with open(open_private(_file(home, key, ".log")), "ab") as log:
            proc = subprocess.Popen(worker_argv(path, kind, key, home, tokenizer, sample), cwd=ROOT,
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        deadline = time.monotonic() + START_WAIT_S
        while time.monotonic() < deadline and not running(home, key) and proc.poll() is None:
            time.sleep(0.02)  # until the worker holds its lock: no second start slips in
    return key


def run(path, kind, home=None, tokenizer=None, sample=0, timeout=None):
    """Scan `path` and wait for it (the CLI and the API): returns the finished ScanState (or a failed one)."""
    home = home or default_home()
    key = scan_key(path, kind, tokenizer, sample)
    now = state(home, key)
    if now.status == "done":
        return now
    _file(home, key, ".error.txt").unlink(missing_ok=True)
    if now.status != "running":
        with open(open_private(_file(home, key, ".log")), "ab") as log:
            subprocess.run(worker_argv(path, kind, key, home, tokenizer, sample), cwd=ROOT, stdin=subprocess.DEVNULL,
                           stdout=log, stderr=subprocess.STDOUT, timeout=timeout, check=False)
    while running(home, key):  # another caller's worker: wait for it
        time.sleep(0.2)
    _remove_leftovers(home, key)  # a worker killed from outside (memory, a signal) ran no exit path of its own
    return state(home, key)


def _remove_leftovers(home, key):
    """The temporary files of a scan that no worker runs: its rows copy, the copy's parts, its progress."""
    folder = scans_dir(home)
    for path in [*folder.glob(f"{key}.rows.jsonl*"), folder / f"{key}.progress.json"]:
        path.unlink(missing_ok=True)


def _prune(folder):
    """Remove the files of the oldest finished scans beyond KEEP_SCANS."""
    reports = sorted(folder.glob("*.npz"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in reports[KEEP_SCANS:]:
        key = old.name[:-len(".npz")]
        for suffix in (".json", ".npz", ".health.json", ".progress.json", ".lock", ".log", ".error.txt"):
            (folder / f"{key}{suffix}").unlink(missing_ok=True)
