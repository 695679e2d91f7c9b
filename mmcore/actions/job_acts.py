"""The Jobs page's actions on one job (stop, delete, resume), each answered as an `Outcome`
message the page shows as it is, in the viewer's language."""
from dataclasses import dataclass

from mmcore.base.i18n import t
from mmcore.jobs import runner
from mmcore.queue import backends, launch


@dataclass(frozen=True)
class Outcome:
    """The result of an action on a job, as a message for the user."""
    kind: str
    message: str
    job_id: int | None = None  # the job the page should select next (a resumed job's new id)


def stop_job(store, job_id):
    """Ask a job to stop (the page's Stop button)."""
    try:
        job = store.get(job_id)
        if job is not None and job.in_queue and backends.stop(store, job_id):
            return Outcome("info", t("action.left_queue", id=job_id))
        if backends.stop(store, job_id):
            return Outcome("info", t("action.stopping", id=job_id))
        return Outcome("warning", t("action.already_finished", id=job_id))
    except KeyError:
        return Outcome("error", t("action.no_job", id=job_id))
    except (ValueError, OSError, RuntimeError) as exc:  # RuntimeError: scancel failed (SlurmError)
        return Outcome("error", t("action.stop_failed", id=job_id, error=exc))


def delete_refusal(store, job_id):
    """Why a job cannot be deleted now, or None when it can (asked before the confirmation step)."""
    store.reconcile()  # a job whose supervisor died has ended (lost)
    job = store.get(job_id)
    if job is None:
        return t("action.no_job", id=job_id)
    if job.active:
        return t("action.stop_before_delete", id=job_id, status=t(f"status.{job.status}"))
    return None


def delete_job(store, job_id, cache=None):
    """Delete a finished job and its log (after the user confirmed); refused while it runs."""
    job = store.get(job_id)
    if job is None:
        return Outcome("error", t("action.no_job", id=job_id))
    try:
        runner.delete(store, job_id)
    except runner.JobRunningError as exc:
        return Outcome("error", t("action.not_deleted", error=exc))
    except (KeyError, OSError) as exc:
        return Outcome("error", t("action.delete_failed", id=job_id, error=exc))
    if cache is not None:
        cache.forget(job.log_path)
    return Outcome("success", t("action.deleted", id=job_id))


def resume_job(store, job_id, gpu_count):
    """Start a new job with the same parameters and from_resume=1 (the page's Resume button)."""
    store.reconcile()  # a job whose supervisor died has ended (lost) and may be resumed
    job = store.get(job_id)
    if job is None:
        return Outcome("error", t("action.no_job", id=job_id))
    refusal = launch.resume_refusal(job)
    if refusal:
        return Outcome("error", refusal)
    try:
        new_id = launch.resume(store, job, gpu_count)
    except launch.LaunchRefused as exc:
        return Outcome("error", t("action.resume_refused") + "\n" + "\n".join(f"- {reason}" for reason in exc.reasons))
    except (KeyError, ValueError, OSError) as exc:
        return Outcome("error", t("action.resume_failed", id=job_id, error=exc))
    return Outcome("success", t("action.resumed", new=new_id, id=job_id), new_id)
