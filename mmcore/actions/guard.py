"""The pages' actions on jobs with the signed-in user's role checked and every action audited.

Each function takes the acting identity (`mmcore.access.auth.session_user`), refuses what its role does not
allow (`mmcore.access.roles`: a member acts on its own jobs only, a viewer only looks) and records what it
did in the audit trail (`mmcore.access.audit`), then answers with an `actions.Outcome` the page shows.
"""
from mmcore.access import audit, roles
from mmcore.actions import job_acts
from mmcore.base.i18n import t
from mmcore.queue import launch


def refusal(user, action, job=None):
    """Why `user` may not take `action` (on `job`), or None: what a page uses to disable a button."""
    try:
        return roles.refusal(user, action, owner=job.user if job else None, job_id=job.id if job else None)
    except roles.RolesFileError as exc:
        return t("role.file_unusable", error=exc)


def _refused(store, user, action, job_id):
    job = store.get(job_id)
    if job is None:
        return None, job_acts.Outcome("error", t("action.no_job", id=job_id))
    why = refusal(user, action, job)
    return job, (job_acts.Outcome("error", why) if why else None)


def stop_job(store, job_id, user):
    job, refused = _refused(store, user, "stop", job_id)
    if refused:
        return refused
    outcome = job_acts.stop_job(store, job_id)
    audit.record(user, "stop", job_id, {"was": job.status, "outcome": outcome.kind}, home=store.home)
    return outcome


def delete_job(store, job_id, user, cache=None):
    job, refused = _refused(store, user, "delete", job_id)
    if refused:
        return refused
    outcome = job_acts.delete_job(store, job_id, cache)
    if outcome.kind == "success":
        audit.record(user, "delete", job_id, {"name": job.name, "type": job.train_type, "owner": job.user},
                     home=store.home)
    return outcome


def resume_job(store, job_id, gpu_count, user):
    job, refused = _refused(store, user, "resume", job_id)
    if refused:
        return refused
    if job.active:
        return job_acts.Outcome("error", launch.resume_refusal(job))
    why = launch.resume_refusal(job)
    if why:
        return job_acts.Outcome("error", why)
    try:
        new_id = launch.resume(store, job, gpu_count, user=user)
    except launch.LaunchRefused as exc:
        return job_acts.Outcome("error", t("action.resume_refused") + "\n" + "\n".join(f"- {reason}" for reason in exc.reasons))
    except (KeyError, ValueError, OSError) as exc:
        return job_acts.Outcome("error", t("action.resume_failed", id=job_id, error=exc))
    audit.record(user, "resume", job_id, {"new_job": new_id}, home=store.home)
    return job_acts.Outcome("success", t("action.resumed", new=new_id, id=job_id), new_id)


def clone(store, job, user):
    """Record a Clone to Train (the launch it leads to is recorded on its own); None, or why not."""
    why = refusal(user, "clone", job)
    if why is None:
        audit.record(user, "clone", job.id, {"type": job.train_type}, home=store.home)
    return why


def start(store, name, launch_check, user, **options):
    """Launch from the Train page as `user`: role checked, audited; returns the job id (LaunchRefused)."""
    why = refusal(user, "launch")
    if why:
        raise launch.LaunchRefused([why])
    job_id = launch.start(store, name, launch_check, user=user, **options)
    audit.record(user, "launch", job_id, {"type": launch_check.train_type, "name": name,
                                          "values": launch_check.values}, home=store.home)
    return job_id
