"""The dashboard as a small Python API: submit, inspect, stop, resume and delete jobs from scripts.

    from mmcore import api
    job_id = api.submit("pretrain", {"hidden_size": 64, "data_path": "../dataset/demo/pretrain.jsonl"})
    api.get(job_id)["status"]
    api.stop(job_id)

The same acts as the pages run (`mmcore.actions`): the acting user's role (`mmcore.access.roles`), the value
checks and preflight of the Train page (paths inside the allowed roots, files no other active job writes),
and every change lands in the audit trail (`mmcore.access.audit`, entry "api"; "cli" for `python -m
mmcore`). `user` is the acting identity, trusted as given: only someone with a shell on the dashboard's
host can call this. None means the OS user. The job store is the dashboard's (`$MINIMIND_DASHBOARD_HOME`,
see `mmcore.jobs.jobstore`).

Every refusal raises `Refused` (or a subclass) whose message says why.
"""
import contextlib
import contextvars
import dataclasses
import sqlite3

from mmcore.access import audit
from mmcore.actions import core, experiment_acts, job_acts, model_acts, queue_acts
from mmcore.base.i18n import MessageError, language
from mmcore.data import report as data_report
from mmcore.experiments import rundiff, runtable, sweeps
from mmcore.jobs import jobnote, runner
from mmcore.jobs.jobstore import JobStore
from mmcore.queue import queuetext, scheduler

#: Keys of `values` that are not parameters of a type but still mean something to `command`.
DEVICE_KEYS = job_acts.DEVICE_KEYS
_ENTRY = contextvars.ContextVar("mmcore_api_entry", default=core.API)


class Refused(Exception):
    """An action the dashboard will not take; the message says why (each reason in `reasons`)."""

    def __init__(self, reasons):
        self.reasons = [reasons] if isinstance(reasons, str) else list(reasons)
        super().__init__("; ".join(self.reasons))


    @classmethod
    def of(cls, outcome):
        """The refusal an act's refused Outcome raises: AuditUnavailable when its record could not be written."""
        kind = AuditUnavailable if outcome.cause == core.AUDIT_DOWN else Refused
        return kind(list(outcome.reasons))


class NotFound(Refused):
    """No job has this id."""


class AuditUnavailable(Refused):
    """The audit trail cannot be written (or read): nothing was done (`python -m mmcore audit repair`)."""


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


@contextlib.contextmanager
def called_from(entry):
    """Record the acts of the calls inside as asked from `entry` (`python -m mmcore` runs its commands in
    `called_from("cli")`); outside, they are the API's."""
    token = _ENTRY.set(entry)
    try:
        yield
    finally:
        _ENTRY.reset(token)


def _value(outcome):
    """What an act made, or Refused with its reasons."""
    if outcome.refused or outcome.cause:
        raise Refused.of(outcome)
    return outcome.value


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
        return job_acts.full_values(train_type, values)
    except ValueError as exc:
        raise Refused(str(exc)) from None


def submit(train_type, values, user=None, name=None, backend=None, gpus=None, after=None, guards=None):
    """Queue a job of `train_type` with `values` (as `mmcore.train.commandline.build_argv` takes them; missing
    fields take the script's defaults); returns the new job's id. `user` owns the job.

    `backend`: "local" or "slurm" (None: the configured default, see `mmcore.queue.queueconf`). `gpus`:
    a number of GPUs (any free ones: the queue picks them) or a list of GPU ids; None keeps the
    device in `values` (CPU when none is given on a machine without GPUs). `after`: the id of the queued
    or running job that will write a missing base weight: the job waits until that one has succeeded.
    """
    return _value(job_acts.launch_job(open_store(), train_type, name, values, user, backend=backend, gpus=gpus,
                                      entry=_ENTRY.get(), after=after, guards=guards))


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


def runs(train_type=None, limit=None):
    """Every job as a run, newest first: `id`, `name`, `type`, `owner`, `status`, `tags`, `note` (the run's,
    set by `annotate`), `job_note` (how it ended), `created_at`, `params` (every parameter of its type as text)
    and `results` (`final_loss`, `best_loss`, `final_reward`, `tokens`, `wall_time_s`, `steps`, and
    `eval/<name>` for each held-out metric recorded); see `mmcore.experiments.runtable`."""
    store = open_store()
    try:
        return runtable.runs(store, train_type=train_type, limit=limit)
    except sqlite3.Error as exc:
        raise StoreUnavailable(f"the job store cannot be read: {exc}") from exc


def diff(job_ids, only_differences=True):
    """What differs between 2 to 8 runs: `runs`, `params` ({name: [value per run]}, only those that differ
    unless `only_differences` is False), `data` (each data file's path, size, SHA-256), `code` (git commit)
    and `results`; see `mmcore.experiments.rundiff`."""
    store = open_store()
    try:
        return rundiff.diff(store, job_ids, only_differences=only_differences)
    except MessageError as exc:
        with language("en"):
            raise Refused(str(exc)) from None


def annotate(job_id, tags=None, note=None, user=None):
    """Set a run's tags (a list or "a,b") and/or note (None leaves it as it is): its owner or an admin;
    returns {"tags": [...], "note": str} as stored now."""
    store = open_store()
    job = _job(store, job_id)
    return _value(experiment_acts.annotate(store, job.id, user, tags=tags, note=note, entry=_ENTRY.get()))


def sweep(train_type, base=None, grid=None, random=None, trials=1, seeds=1, name=None, user=None, backend=None,
          priority=None):
    """Queue a sweep of `train_type`: `base` values every run shares (missing fields: the script's defaults),
    `grid` {name: [values]} (every combination), `random` {name: (low, high)} (`trials` draws), each once per
    seed (`seeds` > 1 sets `--seed` 1..N). Every run is checked first: nothing is queued when any cannot
    start. `priority`: the runs' queue priority (admins). Returns {"sweep": id, "jobs": [job ids]}; see
    `mmcore.experiments.sweeps`."""
    spec = sweeps.SweepSpec(train_type, base=dict(base or {}), grid={k: list(v) for k, v in (grid or {}).items()},
                            random={k: tuple(v) for k, v in (random or {}).items()}, trials=int(trials),
                            seeds=int(seeds))
    return _value(experiment_acts.queue_sweep(open_store(), spec, name=name, user=user, backend=backend,
                                              entry=_ENTRY.get(), priority=priority))


def stop_sweep(sweep_id, user=None, grace=runner.DEFAULT_GRACE_S):
    """Stop every queued or running job of a sweep (its owner or an admin); returns the ids asked to stop."""
    return _value(experiment_acts.stop_sweep(open_store(), sweep_id, user, grace=grace, entry=_ENTRY.get()))


def retry_sweep(sweep_id, user=None):
    """Queue again every run of a sweep that failed, was stopped or was lost (its owner or an admin); returns
    the new job ids."""
    return _value(experiment_acts.retry_sweep(open_store(), sweep_id, user, entry=_ENTRY.get()))


def set_notifications(events, email="", user=None):
    """Choose which of your runs' events reach you (failed, succeeded, guard_stopped, health, sweep_finished)
    and your e-mail address; where messages go is the admin's `notify.toml` (see `mmcore.jobs.notify`)."""
    return _value(experiment_acts.set_notifications(open_store(), list(events), email, user, entry=_ENTRY.get()))


def notification_failures(limit=100):
    """Messages that could not be delivered (or are being retried), newest first, with the error."""
    from mmcore.jobs import notify
    return notify.failures(open_store().path, limit)


def stop(job_id, user=None, grace=runner.DEFAULT_GRACE_S, wait=False):
    """Ask a job to stop (its processes get SIGTERM, then SIGKILL after `grace` seconds; on Slurm,
    after the cluster's KillWait) or take it out of the queue; True when it was queued or running,
    False when it had already ended. `wait`: return once its end is recorded."""
    store = open_store()
    job = _job(store, job_id)
    return _value(job_acts.stop_job(store, job.id, user, grace=grace, wait=wait, entry=_ENTRY.get()))


def delete(job_id, user=None):
    """Delete a finished job's row and log (not its weights); refused while it is queued or running."""
    store = open_store()
    job = _job(store, job_id)
    _value(job_acts.delete_job(store, job.id, user, entry=_ENTRY.get()))


def resume(job_id, user=None):
    """Start a new job that continues a finished job from its last resume state (from the beginning when it
    saved none); returns the new id."""
    store = open_store()
    job = _job(store, job_id)
    return _value(job_acts.resume_job(store, job.id, user, entry=_ENTRY.get(), needs_state=False))


def history(job_id=None, limit=200):
    """Audit entries (newest first) of one job or of all, as dicts."""
    store = open_store()
    try:
        return [dataclasses.asdict(e) for e in audit.entries(job_id, limit, home=store.home)]
    except audit.AuditUnavailable as exc:
        raise AuditUnavailable(str(exc)) from None


def refusals(limit=200):
    """Refused attempts (newest first) as dicts: who (`user`), what (`action`, `job_id`, `entry`, `request`),
    why (`reason`)."""
    store = open_store()
    try:
        return [dataclasses.asdict(r) for r in audit.refusals(limit, home=store.home)]
    except audit.AuditUnavailable as exc:
        raise AuditUnavailable(str(exc)) from None


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
    store = open_store()
    job = _job(store, job_id)
    return _value(queue_acts.move_job(store, job.id, where, user, entry=_ENTRY.get()))


def set_priority(job_id, priority, user=None):
    """Set a waiting job's priority (higher starts first; admins only). False when it is no longer waiting."""
    store = open_store()
    job = _job(store, job_id)
    return _value(queue_acts.set_priority(store, job.id, priority, user, entry=_ENTRY.get()))


def check_data(path, train_type=None, max_seq_len=None, tokenizer=None, sample=0, **steps):
    """The Data page's report of a data file (a path inside the read roots, relative to the working
    directory) for a training type and max_seq_len, as a dict: `kind`, `rows`, `bad_rows`
    ([{"line", "reason"}], 1-based), `problems`, `truncated_rows`, `answer_tokens_lost`, steps per epoch...
    (see `mmcore.data.report.check`). Raises `mmcore.data.sources.DataFileError` (a ValueError) for a
    file that cannot be opened. The scan is cached and shared with the page."""
    return data_report.check(path, train_type, max_seq_len, tokenizer=tokenizer, sample=sample, **steps)


def rescore(run_dir, reward, name=None, user=None, progress=None, wait=True):
    """Score every stored response of the run recorded in `run_dir` again with `reward` (`rule`, `format`,
    `py:MODULE:FUNCTION`, an admin-trusted function, or a reward-model folder, scored in a child process),
    recorded as `rescore/<name>` beside each response and as `rescore/<name>/mean|std` per step in
    `mmcore.metrics.read`. With `wait` the value is the summary (name, responses, steps, seconds, per_step);
    else it is queued as a job (small-job lane, progress on Jobs) and the value is the job id. `Refused`
    with the reason for a bad reward or run."""
    from mmcore.actions import run_acts
    if not wait:
        return _value(run_acts.queue_rescore(open_store(), run_dir, reward, name=name, user=user, entry=_ENTRY.get()))
    return _value(run_acts.rescore(run_dir, reward, name=name, user=user, entry=_ENTRY.get(), progress=progress))


def export_prompts(run_dir, path, keep=("learnable",), user=None):
    """Write the training prompts of the RL run recorded in `run_dir` whose flag is in `keep` (see
    `mmcore.runs.prompt_record`) as an RLAIF file at `path`, a new file inside the write roots; the value is
    the number of rows written. `Refused` with the reason for a path outside the roots, an existing file,
    an unknown flag or a folder without rollouts."""
    from mmcore.actions import run_acts
    return _value(run_acts.export_prompts(run_dir, path, keep=tuple(keep), user=user, entry=_ENTRY.get()))


def export(weight, out_dir, format=None, gguf_type="f16", user=None, wait=True, **options):
    """Export weight file `weight` to the folder `out_dir` as `format` ("llama", the default where the model
    allows it; "minimind", "gguf" or "peft"), verified after writing (see `model.export_hf`). `options`:
    hidden_size, num_hidden_layers, use_moe, lora, tokenizer_path, dtype, verify. With `wait` the export
    runs here and the value is its manifest (format, fallback reason, size, verification; `Refused` when
    it could not be written); else it is queued as a job and the value is the job id."""
    from mmcore.models import export_job
    options = {"format": format, "gguf_type": gguf_type, **options}
    if not wait:
        store = open_store()
        return _value(model_acts.launch_export(store, user, weight, out_dir, entry=_ENTRY.get(), **options))
    code, output = _value(model_acts.export(user, weight, out_dir, None, entry=_ENTRY.get(), timeout=None,
                                            **options))
    if code == 2:
        raise Refused(output.splitlines()[-1] if output else f"export to {out_dir} failed")
    return export_job.read_manifest(out_dir)
