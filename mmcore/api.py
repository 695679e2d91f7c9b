"""The dashboard as a small Python API: submit, inspect, stop, resume and delete jobs from scripts.

    from mmcore import api
    job_id = api.submit("pretrain", {"hidden_size": 64, "data_path": "../dataset/demo/pretrain.jsonl"})
    api.get(job_id)["status"]
    api.stop(job_id)

The same rules as the pages apply: the acting user's role (`mmcore.access.roles`), the value checks and
preflight of the Train page (paths inside the allowed roots, files no other active job writes), and
every action lands in the audit trail (`mmcore.access.audit`). `user` is the acting identity, trusted as
given: only someone with a shell on the dashboard's host can call this. None means the OS user.
The job store is the dashboard's (`$MINIMIND_DASHBOARD_HOME`, see `mmcore.jobs.jobstore`).

Every refusal raises `Refused` (or a subclass) whose message says why.
"""
import dataclasses
import sqlite3

from mmcore.access import audit, roles
from mmcore.jobs import jobnote, runner
from mmcore.jobs.jobstore import JobStore
from mmcore.queue import (
    backends,
    jobqueue,
    launch,
    queueconf,
    queuetext,
    resources,
    scheduler,
)
from mmcore.train import train_types
from mmcore.widgets import train_form

#: Keys of `values` that are not parameters of a type but still mean something to `command`.
DEVICE_KEYS = ("device", "gpus")


class Refused(Exception):
    """An action the dashboard will not take; the message says why (each reason in `reasons`)."""

    def __init__(self, reasons):
        self.reasons = [reasons] if isinstance(reasons, str) else list(reasons)
        super().__init__("; ".join(self.reasons))


class NotFound(Refused):
    """No job has this id."""


class StoreUnavailable(Refused):
    """The job store cannot be opened or read."""


def open_store(path=None):
    """The dashboard's job store, or StoreUnavailable with the reason and what to do."""
    try:
        store = JobStore(path)
        store.reconcile()  # once per call: a job whose supervisor died reads as lost
        return store
    except (sqlite3.Error, RuntimeError, OSError) as exc:
        raise StoreUnavailable(f"the job store cannot be read: {exc}") from exc


def _acting(user):
    return user if user else roles.os_user()


def _require(user, action, job=None, store=None):
    try:
        roles.require(user, action, owner=job.user if job else None, job_id=job.id if job else None)
    except roles.RolesFileError as exc:
        raise Refused(f"the roles file cannot be used: {exc}") from exc
    except roles.Forbidden as exc:
        raise Refused(str(exc)) from exc


def _job(store, job_id):
    try:
        job = store.get(int(job_id))
    except (TypeError, ValueError):
        raise NotFound(f"{job_id!r} is not a job id") from None
    except sqlite3.Error as exc:
        raise StoreUnavailable(f"the job store cannot be read: {exc}") from exc
    if job is None:
        raise NotFound(f"there is no job with id {job_id}")
    return job


def job_dict(job):
    """A job as a plain dict: every stored field, plus `owner` (who launched it); `queue_reason` and
    `note` in English (the store keeps them as messages: `mmcore.queue.queuetext`, `mmcore.jobs.jobnote`)."""
    return {**dataclasses.asdict(job), "owner": job.user, "queue_reason": queuetext.english(job.queue_reason),
            "note": jobnote.english(job.note)}


def full_values(train_type, values):
    """`values` over the type's defaults (a missing field means the script's default).

    Raises Refused for an unknown type or a key that is not a field of the type.
    """
    try:
        t = train_types.get_type(train_type)
    except KeyError as exc:
        raise Refused(exc.args[0]) from None
    unknown = sorted(set(values) - set(t.names) - set(DEVICE_KEYS))
    if unknown:
        raise Refused(f"{t.label} has no field {', '.join(repr(k) for k in unknown)}; "
                      f"its fields are {', '.join(t.names)}")
    full = {k: v for k, v in train_types.defaults(train_type).items()}
    full.update(values)
    return full


def submit(train_type, values, user=None, name=None, backend=None, gpus=None):
    """Queue a job of `train_type` with `values` (as `mmcore.train.commandline.build_argv` takes them; missing
    fields take the script's defaults); returns the new job's id. `user` owns the job.

    `backend`: "local" or "slurm" (None: the configured default, see `mmcore.queue.queueconf`). `gpus`:
    a number of GPUs (any free ones: the queue picks them) or a list of GPU ids; None keeps the
    device in `values` (CPU when none is given on a machine without GPUs).
    """
    user = _acting(user)
    _require(user, "launch")
    full = full_values(train_type, values)
    name = name or train_form.default_job_name(train_type)
    store = open_store()
    try:
        backend = backend or queueconf.load(store.home).default_backend
        gpu_count = jobqueue.gpu_count_for(store, backend)
        if gpus is not None:
            full = resources.values_on(full, resources.resources_for(full, gpus, gpu_count))
        job_id = launch.launch(store, train_type, name, full, gpu_count, user=user, backend=backend, gpus=gpus)
    except resources.QueueRefused as exc:
        raise Refused(exc.reasons) from None
    except launch.LaunchRefused as exc:
        raise Refused(exc.reasons) from None
    except (sqlite3.Error, OSError) as exc:
        raise Refused(f"the job could not be started: {exc}") from exc
    audit.record(user, "launch", job_id, {"type": train_type, "name": name, "values": values, "backend": backend,
                                          "gpus": gpus}, home=store.home)
    return job_id


def get(job_id):
    """The job as a dict (see `job_dict`): status, exit_code, owner, name, log_path, params, times,
    `backend`, `external_id` (the Slurm job id) and `queue_reason` (its place and why it waits)."""
    return job_dict(_job(open_store(), job_id))


def list_jobs(status=None, train_type=None, limit=100):
    """Jobs newest first, as dicts; the filters are those of `JobStore.list`."""
    store = open_store()
    try:
        return [job_dict(j) for j in store.list(status=status, train_type=train_type, limit=limit)]
    except sqlite3.Error as exc:
        raise StoreUnavailable(f"the job store cannot be read: {exc}") from exc


def stop(job_id, user=None, grace=runner.DEFAULT_GRACE_S, wait=False):
    """Ask a job to stop (its processes get SIGTERM, then SIGKILL after `grace` seconds; on Slurm,
    after the cluster's KillWait) or take it out of the queue; True when it was queued or running,
    False when it had already ended. `wait`: return once its end is recorded."""
    user = _acting(user)
    store = open_store()
    job = _job(store, job_id)
    _require(user, "stop", job)
    try:
        stopping = backends.stop(store, job.id, grace=grace, wait=wait)
    except RuntimeError as exc:  # scancel failed
        raise Refused(f"job {job.id} could not be stopped: {exc}") from None
    audit.record(user, "stop", job.id, {"was": job.status, "stopping": stopping}, home=store.home)
    return stopping


def delete(job_id, user=None):
    """Delete a finished job's row and log (not its weights); refused while it is queued or running."""
    user = _acting(user)
    store = open_store()
    job = _job(store, job_id)
    _require(user, "delete", job)
    try:
        runner.delete(store, job.id)
    except runner.JobRunningError as exc:
        raise Refused(str(exc)) from None
    audit.record(user, "delete", job.id, {"name": job.name, "type": job.train_type, "owner": job.user},
                 home=store.home)


def resume(job_id, user=None):
    """Start a new job that continues a finished job from its last resume state; returns the new id."""
    user = _acting(user)
    store = open_store()
    job = _job(store, job_id)
    _require(user, "resume", job)
    if job.active:
        raise Refused(f"job {job.id} is {job.status}: it can be resumed once it has ended")
    try:
        new_id = launch.resume(store, job, jobqueue.gpu_count_for(store, job.backend), user=user)
    except launch.LaunchRefused as exc:
        raise Refused(exc.reasons) from None
    audit.record(user, "resume", job.id, {"new_job": new_id}, home=store.home)
    return new_id


def history(job_id=None, limit=200):
    """Audit entries (newest first) of one job or of all, as dicts."""
    store = open_store()
    return [dataclasses.asdict(e) for e in audit.entries(job_id, limit, home=store.home)]


def queue():
    """Jobs waiting in the queue, in the order they will be considered, as dicts (see `job_dict`);
    `queue_reason` says each one's place and what it waits for."""
    store = open_store()
    try:
        return [job_dict(_job(store, entry.id)) for entry in scheduler.waiting_jobs(store)]
    except sqlite3.Error as exc:
        raise StoreUnavailable(f"the job store cannot be read: {exc}") from exc


def move(job_id, where, user=None):
    """Move a waiting job among jobs of its priority: "up", "down", "top" or "bottom" (its owner or
    an admin). False when it is no longer waiting."""
    user = _acting(user)
    store = open_store()
    job = _job(store, job_id)
    _require(user, "stop", job)  # who may take a job out of the queue may also reorder it
    try:
        return jobqueue.move(store, job.id, where)
    except resources.QueueRefused as exc:
        raise Refused(exc.reasons) from None


def set_priority(job_id, priority, user=None):
    """Set a waiting job's priority (higher starts first; admins only). False when it is no longer waiting."""
    user = _acting(user)
    store = open_store()
    job = _job(store, job_id)
    _require(user, "settings")
    try:
        changed = jobqueue.set_priority(store, job.id, priority)
    except resources.QueueRefused as exc:
        raise Refused(exc.reasons) from None
    audit.record(user, "settings", job.id, {"priority": priority, "changed": changed}, home=store.home)
    return changed
