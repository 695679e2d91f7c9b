"""What differs between 2 to 8 runs: their parameters, their data files' identity, their code and their results.

`diff(store, job_ids)` answers one dict: `runs` (id, name, type, owner, status, tags, note), `params`
({name: [value per run]}: only the parameters that differ unless `only_differences` is False), `data`
(per run: each data file's path, size and SHA-256, or `hashing` while a hash the caller did not wait for
is computed), `code` (per run: the git commit its trainer started from, and whether the checkout had
changes) and `results` ({key: [value per run]}). The curves are the runs' metrics streams
(`mmcore.runs.metric_stream`), which the page overlays.
"""
import hashlib
import os
import threading
import time

from mmcore.base.i18n import MessageError, message
from mmcore.base.regular_file import open_regular
from mmcore.experiments import runtable
from mmcore.experiments.annotations import Annotations
from mmcore.runs import codeversion
from mmcore.runs.metric_stream import job_run_dir

MIN_RUNS, MAX_RUNS = 2, 8
#: The parameters that name a run's data files.
DATA_PARAMS = ("data_path",)

#: How long the Runs page waits for a data file's hash: a large file or a slow mount is hashed on in the
#: background, and the page says so instead of waiting.
HASH_WAIT_S = 5.0

_hashes = {}  # (path, size, mtime_ns) -> sha256 (None: not readable)
_hashing = {}  # (path, size, mtime_ns) -> threading.Event set when its hash is known
_lock = threading.Lock()


def _hash(path, key, done):
    digest = None
    try:
        with open_regular(path) as f:  # a data file named by a run may be a FIFO
            digest = hashlib.file_digest(f, "sha256").hexdigest()
    except OSError:
        pass
    finally:
        with _lock:
            _hashes[key] = digest
            _hashing.pop(key, None)
        done.set()


def file_identity(path, wait_s=None):
    """{"path", "size", "sha256", "hashing"} of a file (hashed once per version of it, in a thread of its own);
    size and hash None when it is gone. `wait_s`: how long to wait for a hash not known yet (None: until it
    is); when that runs out, sha256 is None and hashing True, and the hash goes on for a later call."""
    try:
        stat = os.stat(path)
    except OSError:
        return {"path": str(path), "size": None, "sha256": None, "hashing": False}
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    with _lock:
        known, done = key in _hashes, _hashing.get(key)
        if not known and done is None:
            done = _hashing[key] = threading.Event()
            threading.Thread(target=_hash, args=(path, key, done), name="rundiff-hash", daemon=True).start()
    if not known and not done.wait(wait_s):
        return {"path": str(path), "size": stat.st_size, "sha256": None, "hashing": True}
    with _lock:
        digest = _hashes.get(key)
    return {"path": str(path), "size": stat.st_size, "sha256": digest, "hashing": False}


def data_files(job, deadline=None):
    """The identity of each data file the job read (its paths resolved from the job's working folder); a hash not
    known by `deadline` (time.monotonic(); None: none) is left to compute on (see `file_identity`)."""
    found = []
    for name in DATA_PARAMS:
        value = runtable.params_of(job).get(name)
        if value:
            wait_s = None if deadline is None else max(0.0, deadline - time.monotonic())
            found.append({"param": name, **file_identity(os.path.normpath(os.path.join(job.cwd or ".", value)),
                                                         wait_s)})
    return found


def jobs_of(store, job_ids):
    """The jobs named by `job_ids` in that order; MessageError for fewer than 2 or more than 8 distinct runs, or
    an id that is no job."""
    ids = []
    for raw in job_ids:
        try:
            job_id = int(raw)
        except (TypeError, ValueError):
            raise MessageError(message("action.no_job", id=raw)) from None
        if job_id not in ids:
            ids.append(job_id)
    if not MIN_RUNS <= len(ids) <= MAX_RUNS:
        raise MessageError(message("runs.diff_count", low=MIN_RUNS, high=MAX_RUNS))
    jobs = []
    for job_id in ids:
        job = store.get(job_id)
        if job is None:
            raise MessageError(message("action.no_job", id=job_id))
        jobs.append(job)
    return jobs


def diff(store, job_ids, only_differences=True, hash_wait_s=None):
    """The comparison of the runs `job_ids` (see the module's docstring); `hash_wait_s`: how long to wait for a
    data file's hash, all files together (see `file_identity`; None: until each is known)."""
    jobs = jobs_of(store, job_ids)
    notes = Annotations(store.path).all()
    runs = [runtable.run_of(job, store.home, notes) for job in jobs]
    names = runtable.varying(runs) if only_differences else list({n: None for r in runs for n in r["params"]})
    result_keys = list({k: None for r in runs for k in r["results"]})
    deadline = None if hash_wait_s is None else time.monotonic() + hash_wait_s
    return {
        "runs": [{k: r[k] for k in ("id", "name", "type", "owner", "status", "tags", "note")} for r in runs],
        "params": {name: [r["params"].get(name) for r in runs] for name in names},
        "data": [{"job": job.id, "files": data_files(job, deadline)} for job in jobs],
        "code": [{"job": job.id, **codeversion.read(job_run_dir(job, store.home))} for job in jobs],
        "results": {key: [r["results"].get(key) for r in runs] for key in result_keys},
    }
