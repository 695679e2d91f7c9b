"""What differs between 2 to 8 runs: their parameters, their data files' identity, their code and their results.

`diff(store, job_ids)` answers one dict: `runs` (id, name, type, owner, status, tags, note), `params`
({name: [value per run]}: only the parameters that differ unless `only_differences` is False), `data`
(per run: each data file's path, size and SHA-256), `code` (per run: the git commit its trainer started
from, and whether the checkout had changes) and `results` ({key: [value per run]}). The curves are the
runs' metrics streams (`mmcore.runs.metric_stream`), which the page overlays.
"""
import hashlib
import os
import threading

from mmcore.base.i18n import MessageError, message
from mmcore.base.regular_file import open_regular
from mmcore.experiments import runtable
from mmcore.experiments.annotations import Annotations
from mmcore.runs import codeversion
from mmcore.runs.metric_stream import job_run_dir

MIN_RUNS, MAX_RUNS = 2, 8
#: The parameters that name a run's data files.
DATA_PARAMS = ("data_path",)

_hashes = {}  # (path, size, mtime_ns) -> sha256
_lock = threading.Lock()


def file_identity(path):
    """{"path", "size", "sha256"} of a file (hashed once per version of it); size and hash None when it is gone."""
    try:
        stat = os.stat(path)
    except OSError:
        return {"path": str(path), "size": None, "sha256": None}
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    with _lock:
        digest = _hashes.get(key)
    if digest is None:
        try:
            with open_regular(path) as f:  # a data file named by a run may be a FIFO
                digest = hashlib.file_digest(f, "sha256").hexdigest()
        except OSError:
            digest = None
        with _lock:
            _hashes[key] = digest
    return {"path": str(path), "size": stat.st_size, "sha256": digest}


def data_files(job):
    """The identity of each data file the job read (its paths resolved from the job's working folder)."""
    found = []
    for name in DATA_PARAMS:
        value = runtable.params_of(job).get(name)
        if value:
            found.append({"param": name, **file_identity(os.path.normpath(os.path.join(job.cwd or ".", value)))})
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


def diff(store, job_ids, only_differences=True):
    """The comparison of the runs `job_ids` (see the module's docstring)."""
    jobs = jobs_of(store, job_ids)
    notes = Annotations(store.path).all()
    runs = [runtable.run_of(job, store.home, notes) for job in jobs]
    names = runtable.varying(runs) if only_differences else list({n: None for r in runs for n in r["params"]})
    result_keys = list({k: None for r in runs for k in r["results"]})
    return {
        "runs": [{k: r[k] for k in ("id", "name", "type", "owner", "status", "tags", "note")} for r in runs],
        "params": {name: [r["params"].get(name) for r in runs] for name in names},
        "data": [{"job": job.id, "files": data_files(job)} for job in jobs],
        "code": [{"job": job.id, **codeversion.read(job_run_dir(job, store.home))} for job in jobs],
        "results": {key: [r["results"].get(key) for r in runs] for key in result_keys},
    }
