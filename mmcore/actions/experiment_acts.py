"""Acts on runs as experiments: tag and annotate a run; queue a sweep, stop a sweep; choose one's notifications.

Each is one `core.perform` (role check, act, one audit row); `entry` says where it was asked from.
"""
import sqlite3

from mmcore.actions import core
from mmcore.actions.core import PAGE, did, perform, refused, refused_for
from mmcore.base.i18n import MessageError, t
from mmcore.experiments import sweeps
from mmcore.experiments.annotations import Annotations
from mmcore.jobs import notify, runner
from mmcore.queue import backends, job_arrays, jobqueue, launch, queueconf, resources


def annotate(store, job_id, user=None, tags=None, note=None, entry=PAGE):
    """Set a run's tags (a list, or one comma-separated text) and/or its note (None leaves that one as it is):
    its owner or an admin. The Outcome's value is what is stored now ({"tags": [...], "note": str})."""
    job, refusal = core.job_or_refusal(store, job_id)
    if refusal:
        return refusal
    request = {"job": job.id, **({"tags": tags} if tags is not None else {}),
               **({"note": note} if note is not None else {})}

    def do():
        try:
            now = Annotations(store.path).set(job.id, core.acting(user), tags=tags, note=note)
        except MessageError as exc:  # a bad tag or a note too long: nothing changed
            return refused(str(exc))
        return did("success", t("runs.annotated", id=job.id), {"job": job.id, **now}, value=now)

    return perform(store.home, user, "annotate", entry, request, do, owner=job.user, subject=job.id, job_id=job.id)


def queue_sweep(store, spec, name=None, user=None, backend=None, entry=PAGE, priority=None):
    """Check every run of the sweep `spec` (a `sweeps.SweepSpec`) and queue them all as one sweep owned by `user`,
    or none when any run cannot start (every reason said). `priority`: the queue priority of every run (an
    admin's choice, as for any job), written with each job's row. The Outcome's value: {"sweep": id, "jobs":
    [ids]}. One audit row records the sweep with its jobs."""
    user = core.acting(user)
    request = {"sweep": spec.as_dict(), "name": name, "backend": backend, "priority": priority}

    def do():
        if priority is not None and (why := core.refusal(user, "priority")):
            return refused(why)
        if priority is not None:
            try:
                jobqueue.check_priority(priority)
            except resources.QueueRefused as exc:
                return refused("; ".join(exc.reasons), exc.reasons)
        try:
            runs = sweeps.expand(spec)
        except MessageError as exc:
            return refused_for(t("sweep.refused"), [str(MessageError(m)) for m in exc.messages])
        chosen = backend or queueconf.load(store.home).default_backend
        gpu_count = jobqueue.gpu_count_for(store, chosen)
        kept = sweeps.SweepStore(store.path)
        sweep_id = kept.reserve(name, spec, user)
        checks = [launch.check(spec.train_type, values, gpu_count)
                  for values in sweeps.own_outputs(spec.train_type, runs, sweep_id)]
        problems = [f"{t('sweep.run', n=n)}: {reason}" for n, c in enumerate(checks, 1) for reason in c.reasons]
        if problems:
            kept.drop(sweep_id)
            return refused_for(t("sweep.refused"), problems)
        jobs = []
        as_array = chosen == "slurm"  # held until all are queued, then released as one job array
        try:
            for n, launch_check in enumerate(checks, 1):
                jobs.append(launch.start(store, f"{name or spec.train_type}-sw{sweep_id}-{n}", launch_check, user=user,
                                         backend=chosen, overwrite_others=core.may_overwrite_others(user),
                                         held=as_array, priority=priority))
        except (launch.LaunchRefused, resources.QueueRefused, OSError, sqlite3.Error) as exc:
            reasons = getattr(exc, "reasons", [str(exc)])
            if not jobs:
                kept.drop(sweep_id)
                return refused_for(t("sweep.refused"), reasons)
            # Some runs are queued: they stay, recorded with the sweep; the message says what did not start.
            kept.add_jobs(sweep_id, jobs)
            if as_array:
                job_arrays.release(store, jobs)
            return did("warning", t("sweep.partly", id=sweep_id, n=len(jobs), total=len(checks),
                                    error="; ".join(map(str, reasons))),
                       {"sweep": sweep_id, "jobs": jobs, "backend": chosen}, {"sweep": sweep_id, "jobs": jobs})
        kept.add_jobs(sweep_id, jobs)
        if as_array:
            job_arrays.release(store, jobs)
        return did("success", t("sweep.queued", id=sweep_id, n=len(jobs)),
                   {"sweep": sweep_id, "jobs": jobs, "backend": chosen}, {"sweep": sweep_id, "jobs": jobs})

    return perform(store.home, user, "sweep", entry, request, do, role_action="launch")


def stop_sweep(store, sweep_id, user=None, grace=runner.DEFAULT_GRACE_S, entry=PAGE):
    """Stop every queued or running job of a sweep (its owner or an admin); the value: the ids asked to stop."""
    found = sweeps.SweepStore(store.path).get(sweep_id)
    if found is None:
        return refused(t("sweep.none", id=sweep_id))

    def do():
        stopping = backends.stop_all(store, found["jobs"], grace=grace)  # a job array: one scancel of it
        return did("info", t("sweep.stopping", id=found["id"], n=len(stopping)),
                   {"sweep": found["id"], "stopping": stopping}, stopping)

    return perform(store.home, user, "stop_sweep", entry, {"sweep": found["id"]}, do, role_action="stop",
                   owner=found["user"], subject=found["id"])


def set_notifications(store, events, email="", user=None, entry=PAGE):
    """Choose which of one's own runs' events reach one (`notify.EVENTS`), and one's e-mail address ("" for none).
    Anyone may, for themselves. The value: what is kept now ({"events", "email"})."""
    user = core.acting(user)
    request = {"events": list(events), "email": email}

    def do():
        try:
            kept = notify.save_prefs(store.path, user, events, email)
        except ValueError as exc:
            return refused(str(exc))
        return did("success", t("notify.saved"), kept, kept)

    return perform(store.home, user, "notify_prefs", entry, request, do, role_action="view")


def retry_sweep(store, sweep_id, user=None, entry=PAGE):
    """Queue again, as new jobs of the same sweep, every run of a sweep that failed, was stopped or was lost (and
    was not retried already): its owner or an admin; each new job keeps the priority of the run it repeats. The
    value: the new job ids."""
    found = sweeps.SweepStore(store.path).get(sweep_id)
    if found is None:
        return refused(t("sweep.none", id=sweep_id))

    def do():
        jobs = [store.get(j) for j in found["jobs"]]
        retried = {j.name.removesuffix("-retry") for j in jobs if j is not None and j.name.endswith("-retry")}
        ended = [j for j in jobs if j is not None and j.status in ("failed", "stopped", "lost")
                 and not j.name.endswith("-retry") and j.name not in retried]
        if not ended:
            return refused(t("sweep.nothing_failed", id=found["id"]))
        chosen = queueconf.load(store.home).default_backend
        gpu_count = jobqueue.gpu_count_for(store, chosen)
        checks = [(job, launch.check(job.train_type, job.params, gpu_count)) for job in ended]
        problems = [f"{t('sweep.run', n=job.id)}: {reason}" for job, c in checks for reason in c.reasons]
        if problems:
            return refused_for(t("sweep.refused"), problems)
        new = [launch.start(store, f"{job.name}-retry", c, user=core.acting(user), backend=job.backend,
                            overwrite_others=core.may_overwrite_others(user), held=job.backend == "slurm",
                            priority=job.priority)
               for job, c in checks]
        sweeps.SweepStore(store.path).add_jobs(found["id"], new)
        job_arrays.release(store, [j for j, (job, _) in zip(new, checks) if job.backend == "slurm"])
        return did("success", t("sweep.retried", id=found["id"], n=len(new)),
                   {"sweep": found["id"], "retried": [j.id for j in ended], "jobs": new}, new)

    return perform(store.home, user, "retry_sweep", entry, {"sweep": found["id"]}, do, role_action="retry",
                   owner=found["user"], subject=found["id"])
