"""Acts on jobs: launch, stop, delete, resume, clone, restore the job database, and repair the audit trail.

Each is one `core.perform`: the acting user's role is checked, the act runs, and one audit row records it;
each answers with a `core.Outcome` whose message is in the acting user's language. `entry` says where it
was asked from (`core.PAGE`, `core.API`, `core.CLI`); `user` None is the OS user running this process.
"""
import datetime
import sqlite3

from mmcore.access import audit
from mmcore.actions import core
from mmcore.actions.core import PAGE, did, perform, refused, refused_for
from mmcore.base.i18n import MessageError, t
from mmcore.base.paths import DB_NAME
from mmcore.jobs import restored, runner, storeguard
from mmcore.jobs.jobstore import JobStore
from mmcore.queue import backends, jobqueue, launch, queueconf, resources, scheduler
from mmcore.runs import guards as run_guards
from mmcore.train import train_types

#: Keys of `values` that are not parameters of a type but still mean something to `commandline`.
DEVICE_KEYS = ("device", "gpus")


def refusal(user, action, job=None):
    """Why `user` may not take `action` (on `job`), or None: what a page asks to disable a button."""
    return core.refusal(user, action, owner=job.user if job else None, subject=job.id if job else None)


def default_job_name(train_type, now=None):
    """A job name like "grpo-20260102-1530"."""
    now = now or datetime.datetime.now()
    return f"{train_type}-{now:%Y%m%d-%H%M}"


def full_values(train_type, values):
    """`values` over the type's defaults (a missing field means the script's default); ValueError for an
    unknown type or a key that is not a field of the type."""
    try:
        spec = train_types.get_type(train_type)
    except KeyError as exc:
        raise ValueError(exc.args[0]) from None
    unknown = sorted(set(values) - set(spec.names) - set(DEVICE_KEYS))
    if unknown:
        raise ValueError(f"{spec.label} has no field {', '.join(repr(k) for k in unknown)}; "
                         f"its fields are {', '.join(spec.names)}")
    return {**train_types.defaults(train_type), **values}


def launch_job(store, train_type, name, values, user=None, check=None, backend=None, gpus=None, entry=PAGE,
               after=None, guards=None):
    """Queue a job of `train_type` owned by `user`; the Outcome's value is its id.

    From the Train page, `check` is the form's `launch.LaunchCheck` (the job starts exactly what the page
    showed); otherwise `values` (missing fields: the script's defaults) are checked here. `backend`: "local",
    "slurm" or None (the configured default); `gpus`: a number of GPUs or a list of ids (None: the device in
    `values`). `after`: the job that will write a missing base weight (`launch.LaunchCheck.after`); the
    new job waits in the queue until that one has succeeded.
    `guards`: {name: value} of `mmcore.runs.guards` (None: the default guards).
    """
    user = core.acting(user)
    name = name or default_job_name(train_type)
    request = {"type": train_type, "name": name, "values": values, "backend": backend, "gpus": gpus}
    if after is not None:
        request["after"] = after
    if guards:
        request["guards"] = dict(guards)

    def do():
        chosen, launch_check = backend, check
        try:
            kept_guards = run_guards.parse(guards)
        except MessageError as exc:
            return refused_for(t("train.refused"), [str(MessageError(m)) for m in exc.messages])
        try:
            full = full_values(train_type, values) if check is None else None
        except ValueError as exc:  # an unknown type or field
            return refused(str(exc))
        try:
            if launch_check is None:
                chosen = backend or queueconf.load(store.home).default_backend
                gpu_count = jobqueue.gpu_count_for(store, chosen)
                if gpus is not None:
                    full = resources.values_on(full, resources.resources_for(full, gpus, gpu_count))
                launch_check = launch.check(train_type, full, gpu_count, store=store)
            override = core.may_overwrite_others(user)
            # The guards go in with the job's row: the scheduler may start it the moment it exists.
            job_id = launch.start(store, name, launch_check, user=user, backend=chosen, gpus=gpus,
                                  overwrite_others=override, after=after, guards=kept_guards if guards else None)
            result = {"job": job_id, "backend": chosen, **({"after": after} if after is not None else {})}
            if guards:
                result["guards"] = kept_guards.as_dict()
            if override and (taken := launch.others_files(store, launch_check, user)):
                result["overwrites"] = core.overwritten(taken)  # an admin's choice, on the record
        except (launch.LaunchRefused, resources.QueueRefused) as exc:
            return refused_for(t("train.refused"), exc.reasons)
        except (OSError, ValueError, KeyError, RuntimeError, sqlite3.Error) as exc:  # the store or queue failed
            return refused(t("train.failed", error=exc))
        if after is not None:
            return did("success", t("train.queued_after", id=job_id, after=after), result, job_id)
        return did("success", t("train.launched", id=job_id), result, job_id)
    return perform(store.home, user, "launch", entry, request, do)


def stop_job(store, job_id, user=None, grace=runner.DEFAULT_GRACE_S, wait=False, entry=PAGE):
    """Take a waiting job out of the queue, or ask a running one to stop (SIGTERM, then SIGKILL after
    `grace` seconds; on Slurm, scancel). `wait`: return once its end is recorded. The value: whether it
    was queued or running (False: it had already ended)."""
    job, missing = core.job_or_refusal(store, job_id)
    if missing:
        return missing

    def do():
        try:
            stopping = backends.stop(store, job.id, grace=grace, wait=wait)
        except KeyError:
            return refused(t("action.no_job", id=job.id))
        except (ValueError, OSError, RuntimeError) as exc:  # RuntimeError: scancel failed (SlurmError)
            return refused(t("action.stop_failed", id=job.id, error=exc))
        result = {"was": job.status, "stopping": stopping}
        if not stopping:
            return did("warning", t("action.already_finished", id=job.id), result, False)
        return did("info", t("action.left_queue" if job.in_queue else "action.stopping", id=job.id), result, True)
    return perform(store.home, user, "stop", entry, {"job": job.id}, do, owner=job.user, subject=job.id,
                   job_id=job.id)


def stop_refusal(store, job_id, user=None):
    """Why `user` cannot stop the job (their role, or there is no such job), or None: what the Jobs page
    asks before its confirmation step."""
    job = store.get(job_id)
    return refusal(user, "stop", job) if job is not None else t("action.no_job", id=job_id)


def resume_refusal(job, user=None):
    """Why `user` cannot resume `job` now (their role, it still runs, it saved no resume state), or None."""
    return refusal(user, "resume", job) or launch.resume_refusal(job)


def delete_refusal(store, job_id, user=None):
    """Why `user` cannot delete the job now (their role, or it runs or was handed to its backend), or None
    when they can: what the Jobs page asks before its confirmation step. A job the queue still holds may
    be deleted: it leaves the queue as it goes."""
    store.reconcile()  # a job whose supervisor died has ended (lost)
    job = store.get(job_id)
    if job is None:
        return t("action.no_job", id=job_id)
    if why := refusal(user, "delete", job):
        return why
    if job.active and not job.in_queue:
        return t("action.stop_before_delete", id=job_id, status=t(f"status.{job.status}"))
    return None


def delete_job(store, job_id, user=None, cache=None, entry=PAGE):
    """Delete an ended job's row and log (not its weights), or take a job the queue still holds out of
    it and delete it in the same act (the jobs that wait for it are held, as after a Stop); refused
    while it runs. `cache`: a `progress.ProgressCache` that forgets the job's log."""
    job, missing = core.job_or_refusal(store, job_id)
    if missing:
        return missing

    def do():
        if job.in_queue:
            if not store.cancel_waiting(job.id):  # it started meanwhile
                now = store.get(job.id)
                return refused(t("action.stop_before_delete", id=job.id,
                                 status=t(f"status.{now.status if now else 'running'}")))
            scheduler.Queue(store).block_after_failures()
        try:
            runner.delete(store, job.id)
        except runner.JobRunningError as exc:
            return refused(t("action.not_deleted", error=exc))
        except (KeyError, OSError) as exc:
            return refused(t("action.delete_failed", id=job.id, error=exc))
        if cache is not None:
            cache.forget(job.log_path)
        return did("success", t("action.deleted", id=job.id), {"name": job.name, "type": job.train_type,
                                                               "owner": job.user})
    return perform(store.home, user, "delete", entry, {"job": job.id}, do, owner=job.user, subject=job.id,
                   job_id=job.id)


def resume_job(store, job_id, user=None, gpu_count=None, entry=PAGE, needs_state=True):
    """Queue a new job with the same parameters and from_resume=1, owned by `user`; the value is its id.
    `gpu_count`: GPUs it may ask for (None: what its backend offers). Refused while the job is queued or
    running, and (`needs_state`, the pages' rule) when it saved no resume state; `mmcore.api` lets a script
    resume such a job anyway, and its trainer then starts from the beginning."""
    store.reconcile()  # a job whose supervisor died has ended (lost) and may be resumed
    job, missing = core.job_or_refusal(store, job_id)
    if missing:
        return missing
    user = core.acting(user)

    def do():
        if job.active:
            return refused(t("resume.still_active", id=job.id, status=t(f"status.{job.status}")))
        if needs_state and (why := launch.resume_refusal(job)):
            return refused(why)
        try:
            count = jobqueue.gpu_count_for(store, job.backend) if gpu_count is None else gpu_count
            new_id = launch.resume(store, job, count, user=user, overwrite_others=core.may_overwrite_others(user))
        except launch.LaunchRefused as exc:
            return refused_for(t("action.resume_refused"), exc.reasons)
        except (KeyError, ValueError, OSError, sqlite3.Error) as exc:
            return refused(t("action.resume_failed", id=job.id, error=exc))
        return did("success", t("action.resumed", new=new_id, id=job.id), {"new_job": new_id}, new_id)
    return perform(store.home, user, "resume", entry, {"job": job.id}, do, owner=job.user, subject=job.id,
                   job_id=job.id)


def clone_job(store, job_id, user=None, entry=PAGE):
    """Record a Clone to Train (the launch it may lead to is an act of its own); the value is the job."""
    job, missing = core.job_or_refusal(store, job_id)
    if missing:
        return missing
    return perform(store.home, user, "clone", entry, {"job": job.id},
                   lambda: did("success", "", {"type": job.train_type}, job), job_id=job.id)


def restore_store(home, backup, user=None, entry=PAGE, adopt_running=False):
    """Put a backup of the job database back (`backup`: "latest" or a file; an admin's act); the value is
    (the backup used, where the replaced file was kept or None).

    Restored rows are reconciled with what happened since the backup (`mmcore.jobs.restored`): a job
    whose supervisor runs is adopted (kept with its id when the backup is older than it), a job that ran is
    marked with what its log says; no id in use is given again. While supervisors
    of the store run, the restore is refused unless `adopt_running` says to adopt their jobs."""
    live = restored.live_supervisors(home / DB_NAME)

    def do():
        if live and not adopt_running:
            return refused(t("action.restore_running", jobs=", ".join(f"{job} (pid {pid})" for job, (pid, _)
                                                                         in sorted(live.items()))))
        changed = {}

        def adjusted(staged):  # jobs launched since the backup that run now come along, with their ids
            restored.keep_live_jobs(staged, home / DB_NAME, live)
            return restored.reconcile(JobStore(staged), live)
        try:
            source, aside = storeguard.restore(home / DB_NAME, backup,
                                               adjust=lambda staged: changed.update(adjusted(staged)))
        except (OSError, sqlite3.Error, RuntimeError, storeguard.StoreDamaged) as exc:
            return refused(t("action.not_restored", error=exc))
        message = (t("action.restored_aside", db=home / DB_NAME, source=source, aside=aside) if aside
                   else t("action.restored", db=home / DB_NAME, source=source))
        if changed:
            message += "\n" + t("action.restored_reconciled", jobs=", ".join(
                f"{job}: {t('action.adopted') if what == 'adopted' else t(f'status.{what}')}"
                for job, what in sorted(changed.items())))
        return did("success", message, {"from": str(source), "kept_aside": str(aside) if aside else None,
                                        "reconciled": {str(k): v for k, v in changed.items()}}, (source, aside))
    return perform(home, user, "restore", entry, {"backup": str(backup), "adopt_running": adopt_running}, do)


def repair_audit(home, user=None, entry=PAGE):
    """Keep a damaged audit trail aside and start a new one (an admin's act, recorded in the new trail);
    the value is where the damaged file was kept (None: the trail was intact, nothing was moved)."""
    def do():
        try:
            aside = audit.repair(home)
        except (OSError, audit.AuditUnavailable) as exc:
            return refused(t("audit.not_repaired", error=exc))
        if aside is None:
            return refused(t("audit.intact", path=audit.audit_path(home)))
        return did("success", t("audit.repaired", aside=aside), {"kept_aside": str(aside)}, aside)
    return perform(home, user, "audit_repair", entry, {}, do)
