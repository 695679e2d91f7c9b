"""Starting jobs: check submitted values, put the job in the queue (which starts it); resume a job.

What the Train page's Launch button and the Jobs page's Resume button call. A launch is checked
once (`check`: the values parsed by `mmcore.train.commandline`, then `mmcore.train.preflight` on valid ones) and
started from that check (`start`), so a page that shows the check's findings launches exactly
what it showed.
"""
import functools
from dataclasses import dataclass, field
from pathlib import Path

from mmcore.base import i18n
from mmcore.base.i18n import t
from mmcore.queue import job_arrays, jobqueue
from mmcore.runs import guards as run_guards
from mmcore.runs import metric_stream
from mmcore.train import commandline, file_owners, preflight, train_types
from trainer.rules import specs


class LaunchRefused(Exception):
    """A launch that cannot start; `reasons` lists every problem, each a sentence for the user."""

    def __init__(self, reasons):
        self.reasons = list(reasons)
        super().__init__("; ".join(self.reasons))


@dataclass
class LaunchCheck:
    """What submitted values would launch and what stands in the way.

    `command` is None while any field is invalid; `errors` maps fields to messages (shown next to
    each field); `problems` are preflight findings (missing files and the like), shown above Launch.
    `values` are the submitted values themselves: what the job stores as its params.
    """
    train_type: str
    values: dict
    command: commandline.Command | None
    errors: dict = field(default_factory=dict)
    problems: list = field(default_factory=list)
    warnings: list = field(default_factory=list)  # worth a look, but no reason to refuse the launch
    pending: list = field(default_factory=list)  # PendingWeight: missing base weights a queued/running job writes

    @property
    def ok(self):
        return self.command is not None and not self.errors and not self.problems and not self.pending

    @property
    def after(self):
        """The job this launch can be queued after (it waits for nothing else), or None."""
        writers = {p.job_id for p in self.pending}
        if self.command is None or self.errors or self.problems or len(writers) != 1:
            return None
        return writers.pop()

    @property
    def reasons(self):
        """Every problem as a sentence: field errors first, then preflight findings."""
        return [f"{train_types.field_label(name)}: {i18n.field_error(message)}"
                for name, message in self.errors.items()] + list(self.problems) + [p.message for p in self.pending]


@dataclass(frozen=True)
class PendingWeight:
    """A base weight that is not there yet, which a queued or running job will write."""
    path: Path
    why: str
    job_id: int
    job_type: str
    job_status: str

    @property
    def message(self):
        return t("preflight.weight_pending", path=self.path, why=self.why, id=self.job_id,
                 type=t(f"type.{self.job_type}"), status=t(f"status.{self.job_status}"))


def pending_weights(store, checked, trainer_dir=preflight.TRAINER_DIR):
    """The missing base weights of parsed values that a queued or running job of `store` will write,
    each with its writer (the newest such job)."""
    missing = preflight.missing_base_weights(specs.spec(checked.train_type), checked.effective(), trainer_dir)
    if not missing:
        return []
    active = store.list(status=["queued", "running"], limit=None)
    writes = [(job, file_owners.written_files(job.train_type, job.params, job.cwd or trainer_dir)) for job in active]
    pending = []
    for path, why in missing:
        writer = next((job for job, files in writes if path.resolve() in files), None)
        if writer is not None:
            pending.append(PendingWeight(path, why, writer.id, writer.train_type, writer.status))
    return pending


def check(train_type, values, gpu_count, extra_errors=None, store=None):
    """Validate command values once, then run the preflight checks on valid ones -> LaunchCheck.

    `extra_errors` (field -> message) are a form's own findings (its device choice, its job name).
    `store`: a missing base weight that one of its queued or running jobs will write is `pending`
    (the launch can be queued after that job) rather than a problem.
    """
    checked = commandline.check(train_type, values)
    errors = {**(extra_errors or {}), **checked.errors}
    if errors:
        return LaunchCheck(train_type, values, command=None, errors=errors)
    try:
        pending = pending_weights(store, checked) if store is not None else []
        problems = preflight.problems(checked, gpu_count, pending={p.path.resolve() for p in pending})
    except OSError as exc:  # an unreadable file or folder is a problem to show, not a crash
        pending, problems = [], [t("preflight.cannot_check", error=exc)]
    return LaunchCheck(train_type, values, command=commandline.command_of(checked), problems=problems,
                       warnings=preflight.warnings(checked), pending=pending)


def start(store, name, launch_check, user=None, backend=None, gpus=None, overwrite_others=False, after=None,
          held=False, guards=None, priority=None):
    """Put a job owned by `user` (None: the OS user) from a passed check in the queue, which starts
    it as soon as its resources are free (`mmcore.queue.jobqueue`); return the job id. `backend`:
    "local", "slurm" or None (the configured default); `gpus`: as `mmcore.queue.resources.resources_for` takes it.
    `overwrite_others`: it may write over another user's files (an admin's launch). `after`: the id of
    the job that writes the check's pending base weights (`LaunchCheck.after`): the job waits until that
    one has succeeded, as a pipeline's stage waits for the stage before. `held`: the queue passes it over until
    `mmcore.queue.job_arrays.release` makes it part of a job array with the jobs queued with it. `guards`: the
    job's `mmcore.runs.guards.Guards`, kept in the same transaction as its row (the scheduler never sees the job
    without them); None: the defaults. `priority`: the job's queue priority, written with its row (None: 0).

    Raises LaunchRefused with every reason when the check found problems (other than the pending
    weights of the job named by `after`).
    """
    waits = after is not None and launch_check.after == after
    if not (launch_check.ok or waits):
        raise LaunchRefused(launch_check.reasons)
    with_row = None if guards is None else functools.partial(run_guards.save_in, guards=guards)
    try:
        return jobqueue.enqueue(store, launch_check.train_type, name, launch_check.values, launch_check.command,
                                backend=backend, gpus=gpus, user=user, overwrite_others=overwrite_others,
                                with_row=with_row, **({"depends_on": after} if waits else {}),
                                **({"queue_reason": job_arrays.HELD} if held else {}),
                                **({"priority": priority} if priority is not None else {}))
    except jobqueue.QueueRefused as exc:
        raise LaunchRefused(exc.reasons) from None


def launch(store, train_type, name, values, gpu_count, user=None, backend=None, gpus=None, overwrite_others=False):
    """Check command values and queue the job as `user`; return its id (LaunchRefused when it cannot be queued)."""
    return start(store, name, check(train_type, values, gpu_count), user, backend, gpus, overwrite_others)


def resume_values(train_type, params):
    """A finished job's params for a resumed run: the same values with from_resume=1.

    Values the job does not have (a job written by another tool) take the script's defaults.
    """
    values = {**train_types.defaults(train_type), **params}
    values["from_resume"] = "1"
    return values


def resume_checkpoint(job):
    """Where `job`'s trainer keeps its resume state (../checkpoints/<name>_<hidden>[_moe]_resume.pth
    from its working folder), or None when its parameters do not say (unknown type, invalid values)."""
    try:
        checked = commandline.check(job.train_type, resume_values(job.train_type, job.params))
        if not checked.ok:
            return None
        values = checked.effective()
        spec = specs.spec(job.train_type)
        return Path(job.cwd or preflight.TRAINER_DIR) / specs.CHECKPOINT_DIR / spec.resume_file(values)
    except (KeyError, ValueError, TypeError):
        return None


def resume_refusal(job):
    """Why `job` cannot be resumed now (running, or it never saved resume state), or None when it can."""
    if job.active:
        return t("resume.still_active", id=job.id, status=t(f"status.{job.status}"))
    path = resume_checkpoint(job)
    if path is None or not path.is_file():
        if path is None:
            return t("resume.no_state", id=job.id)
        return t("resume.no_state_file", id=job.id, path=path.resolve())
    return None


def resume(store, job, gpu_count, user=None, overwrite_others=False):
    """Queue a new job that resumes `job` from its last checkpoint, on the same backend; return its id."""
    name = f"{job.name}-resume" if job.name else f"{job.train_type}-resume"
    values = resume_values(job.train_type, job.params)
    values[file_owners.RESUME_OF] = str(job.id)  # the trainer refuses a resume state another job wrote
    if not values.get("run_dir"):  # continue the resumed job's records rather than start new ones
        values["run_dir"] = str(metric_stream.job_run_dir(job, store.home))
    return launch(store, job.train_type, name, values, gpu_count, user, backend=job.backend,
                  overwrite_others=overwrite_others)


def others_files(store, launch_check, user):
    """The files the checked launch writes that belong to another user (`file_owners.others_files`)."""
    cwd = launch_check.command.cwd if launch_check.command is not None else None
    return file_owners.others_files(store, launch_check.train_type, launch_check.values, user,
                                    cwd or preflight.TRAINER_DIR)
