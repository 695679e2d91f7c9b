"""The Jobs page's actions on one job (stop, delete, resume), each answered as an `Outcome`
message the page shows as it is."""
from dataclasses import dataclass

from mmcore import backends, launch, runner


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
            return Outcome("info", f"Job {job_id} left the queue without starting.")
        if backends.stop(store, job_id):
            return Outcome("info", f"Stopping job {job_id}: it gets SIGTERM (and saves its resume state), "
                                   f"then SIGKILL if it has not ended after the grace period.")
        return Outcome("warning", f"Job {job_id} had already finished.")
    except KeyError:
        return Outcome("error", f"There is no job with id {job_id}.")
    except (ValueError, OSError, RuntimeError) as exc:  # RuntimeError: scancel failed (SlurmError)
        return Outcome("error", f"Could not stop job {job_id}: {exc}")


def delete_refusal(store, job_id):
    """Why a job cannot be deleted now, or None when it can (asked before the confirmation step)."""
    store.reconcile()  # a job whose supervisor died has ended (lost)
    job = store.get(job_id)
    if job is None:
        return f"There is no job with id {job_id}."
    if job.active:
        return f"Job {job_id} is {job.status}: stop it before deleting it."
    return None


def delete_job(store, job_id, cache=None):
    """Delete a finished job and its log (after the user confirmed); refused while it runs."""
    job = store.get(job_id)
    if job is None:
        return Outcome("error", f"There is no job with id {job_id}.")
    try:
        runner.delete(store, job_id)
    except runner.JobRunningError as exc:
        return Outcome("error", f"Not deleted: {exc}.")
    except (KeyError, OSError) as exc:
        return Outcome("error", f"Could not delete job {job_id}: {exc}")
    if cache is not None:
        cache.forget(job.log_path)
    return Outcome("success", f"Deleted job {job_id} and its log.")


def resume_job(store, job_id, gpu_count):
    """Start a new job with the same parameters and from_resume=1 (the page's Resume button)."""
    store.reconcile()  # a job whose supervisor died has ended (lost) and may be resumed
    job = store.get(job_id)
    if job is None:
        return Outcome("error", f"There is no job with id {job_id}.")
    refusal = launch.resume_refusal(job)
    if refusal:
        return Outcome("error", refusal)
    try:
        new_id = launch.resume(store, job, gpu_count)
    except launch.LaunchRefused as exc:
        return Outcome("error", "Resume refused:\n" + "\n".join(f"- {reason}" for reason in exc.reasons))
    except (KeyError, ValueError, OSError) as exc:
        return Outcome("error", f"Could not resume job {job_id}: {exc}")
    return Outcome("success", f"Started job {new_id}, resuming job {job_id} from its last checkpoint.", new_id)
