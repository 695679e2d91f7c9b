"""Acts on the queue: move a waiting job, set its priority, queue a pipeline, stop or retry one, and save the
queue's settings.

Each is one `core.perform` (role checked, act run, one audit row), answered with a `core.Outcome` in the
acting user's language; `entry` and `user` as in `job_acts`. A member moves, stops and retries its own
jobs and pipelines; priorities and settings are an admin's.
"""
import dataclasses
import sqlite3

from mmcore.actions import core
from mmcore.actions.core import PAGE, did, perform, refused, refused_for
from mmcore.base.i18n import t
from mmcore.queue import backends, jobqueue, pipelines, queueconf
from mmcore.queue.resources import QueueRefused

WHERE = ("up", "down", "top", "bottom")


def refusal(user, action, job=None):
    """Why `user` may not take `action` ("move", "settings", ...) on `job`, or None: to disable a control."""
    return core.refusal(user, action, owner=job.user if job else None, subject=job.id if job else None)


def pipeline_refusal(user, action, pipeline):
    """Why `user` may not take `action` ("stop", "retry") on `pipeline`, or None."""
    return core.refusal(user, action, owner=pipeline.user, subject=t("queue.of_pipeline", id=pipeline.id))


def move_job(store, job_id, where, user=None, entry=PAGE):
    """Move a waiting job among jobs of its priority ("up", "down", "top" or "bottom"); the value is
    whether it was still waiting."""
    return _change_waiting(store, job_id, user, entry, "move", {"where": where},
                           lambda job: jobqueue.move(store, job.id, where), f"queue.moved.{where}")


def set_priority(store, job_id, priority, user=None, entry=PAGE):
    """Set a waiting job's priority (-1000 to 1000, higher starts first; an admin's act); the value is
    whether it was still waiting."""
    return _change_waiting(store, job_id, user, entry, "priority", {"priority": priority},
                           lambda job: jobqueue.set_priority(store, job.id, priority), "queue.priority_set",
                           role_action="priority")


def _change_waiting(store, job_id, user, entry, action, asked, change, done_key, role_action=None):
    """One change to a waiting job: `change(job)` is True when the job was still waiting. A member
    changes its own jobs (`role_action` None); an admin-only change names its role action."""
    job, missing = core.job_or_refusal(store, job_id)
    if missing:
        return missing

    def do():
        try:
            changed = change(job)
        except QueueRefused as exc:
            return refused("; ".join(exc.reasons), exc.reasons)
        if not changed:
            return did("warning", t("queue.not_waiting", id=job.id), {"changed": False}, False)
        return did("info", t(done_key, id=job.id, **asked), {"changed": True}, True)
    owner = {} if role_action else {"owner": job.user, "subject": job.id}
    return perform(store.home, user, action, entry, {"job": job.id, **asked}, do, role_action=role_action,
                   job_id=job.id, **owner)


def queue_pipeline(store, name, stages, user=None, backend=None, gpu_count=None, template="", entry=PAGE):
    """Check every stage and queue them all as one pipeline owned by `user` (see
    `mmcore.queue.pipelines.create`); the value is the pipeline's id."""
    user = core.acting(user)
    request = {"name": name, "template": template, "backend": backend, "stages": [train_type for train_type, _ in stages]}

    def do():
        try:
            pipeline_id = pipelines.create(store, name, stages, user=user, backend=backend, gpu_count=gpu_count,
                                           template=template, overwrite_others=core.may_overwrite_others(user))
        except (pipelines.PipelineRefused, QueueRefused) as exc:
            return refused_for(t("queue.refused"), exc.reasons)
        except (OSError, sqlite3.Error) as exc:
            return refused(t("queue.failed", error=exc))
        pipeline = pipelines.get(store, pipeline_id)
        return did("success", pipelines.queued_text(pipeline),
                   {"pipeline": pipeline_id, "jobs": pipeline.job_ids}, pipeline_id)
    return perform(store.home, user, "queue_pipeline", entry, request, do, role_action="launch")


def _pipeline_or_refusal(store, pipeline_id):
    pipeline = pipelines.get(store, pipeline_id)
    return pipeline, None if pipeline is not None else refused(t("queue.no_pipeline", id=pipeline_id))


def stop_pipeline(store, pipeline_id, user=None, entry=PAGE):
    """Stop every queued or running stage of a pipeline; the value is the ids of the stages stopped."""
    pipeline, missing = _pipeline_or_refusal(store, pipeline_id)
    if missing:
        return missing

    def do():
        stopped = []
        try:
            for job in pipeline.stages:
                if job.active and backends.stop(store, job.id):
                    stopped.append(job.id)
        except (KeyError, ValueError, OSError, RuntimeError) as exc:
            if not stopped:
                return refused(t("action.stop_failed", id=job.id, error=exc))
        message = t("queue.stopping", ids=", ".join(map(str, stopped))) if stopped else t("queue.nothing_active")
        return did("info", message, {"stopped": stopped}, stopped)
    return perform(store.home, user, "stop_pipeline", entry, {"pipeline": pipeline.id}, do, role_action="stop",
                   owner=pipeline.user, subject=t("queue.of_pipeline", id=pipeline.id))


def retry_pipeline(store, pipeline_id, resume=False, user=None, entry=PAGE):
    """Queue a pipeline's failed (or stopped) stage again, from scratch or (`resume`) from its resume
    state, and release the stages held behind it; the value is the new job's id."""
    pipeline, missing = _pipeline_or_refusal(store, pipeline_id)
    if missing:
        return missing
    user = core.acting(user)

    def do():
        try:
            new_id = pipelines.retry(store, pipeline.id, resume=resume, user=user,
                                     overwrite_others=core.may_overwrite_others(user))
        except (pipelines.PipelineRefused, QueueRefused) as exc:
            return refused("; ".join(exc.reasons), exc.reasons)
        return did("success", t("queue.retried", id=new_id), {"job": new_id}, new_id)
    return perform(store.home, user, "retry_pipeline", entry, {"pipeline": pipeline.id, "resume": resume}, do,
                   role_action="retry", owner=pipeline.user, subject=t("queue.of_pipeline", id=pipeline.id))


def save_settings(store, settings, user=None, entry=PAGE):
    """Save the queue's settings (a `queueconf.QueueSettings`; an admin's act)."""
    request = {"queue": dataclasses.asdict(settings)}

    def do():
        try:
            queueconf.save(store.home, settings)
        except (ValueError, OSError, sqlite3.Error) as exc:  # a bad value is worded in this viewer's language
            return refused(t("logs.not_saved", error=exc))
        return did("success", t("queue.saved"), {"saved": True})
    return perform(store.home, user, "settings", entry, request, do)
