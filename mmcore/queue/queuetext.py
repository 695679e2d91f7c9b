"""Why a job waits: kept as messages, worded for whoever reads it.

The scheduler (mmcore/queue/queueplan.py, mmcore/queue/scheduler.py, mmcore/queue/slurm.py) stores each waiting job's
reason in the job store's `queue_reason` column as JSON text, `{"place": 2, "parts": [message, ...]}`:
its place in the queue (0 where it has none, e.g. at Slurm) and what it waits for, as
`mmcore.base.i18n.message`s ("waiting for GPU 0", "GPU 0 held by job 5 (alice)"). One stored reason is
shared by every viewer; a page words it in the viewer's language (`reason_text`), the CLI and the API
in English (`english`). A row stored before reasons were kept as messages holds English text: it is
shown as it is.
"""
from mmcore.base import i18n
from mmcore.base.i18n import language, message, t, word


def stored(parts, place=0):
    """The `queue_reason` column's text for `parts` (messages) and a place in the queue (0: none)."""
    # i18n.stored's layout for {"place": place, "parts": parts}, put together from each part's own
    # stored text: a queue round stores one for every waiting job, most of them sharing their parts.
    return '{"place":%d,"parts":[%s]}' % (place, ",".join(i18n.stored(part) for part in parts))


def parse(text):
    """(place, parts) of a stored reason, or None for a plain-text one (an older row) or none at all."""
    value = i18n.read_stored(text, "parts", list)
    return None if value is None else (int(value.get("place") or 0), value["parts"])


def reason_text(text):
    """A stored reason in the current language ("#2 in the queue · waiting for GPU 0; GPU 0 held by
    job 5 (alice)"); a plain-text reason as it is."""
    parsed = parse(text)
    if parsed is None:
        return str(text or "")
    place, parts = parsed
    rest = t("sep.parts").join(str(word(part)) for part in parts)
    return t("reason.place", n=place, rest=rest) if place else rest


def english(text):
    """A stored reason in English, whatever the viewer chose (the CLI, the API); None stays None."""
    if text is None:
        return None
    with language("en"):
        return reason_text(text)


def job(job_id, user=None):
    """A job as a reason names it: "job 5 (alice)", or "job 5" when it has no owner."""
    return message("reason.job_of", id=job_id, user=user) if user else message("reason.job", id=job_id)


def stage(job_id, stage_index=None):
    """A job another waits for: "stage 2 (job 5)" for a pipeline's stage (`stage_index` 1), else "job 5"."""
    return message("reason.stage_job", n=stage_index + 1, id=job_id) if stage_index is not None else job(job_id)


# Reasons that do not depend on the queue's state.
SCHEDULER = stored([message("reason.scheduler")])  # queued, not yet looked at by the scheduler
SUBMITTING = stored([message("reason.submitting")])  # handed to sbatch


def slurm_submitted(slurm_id):
    return stored([message("reason.slurm_submitted", id=slurm_id)])


def slurm_state(slurm_id, state, why=""):
    """A job Slurm holds: its state ("pending") and Slurm's reason ("Resources"), in Slurm's words."""
    return stored([message("reason.slurm_state", id=slurm_id, state=state,
                           why=message("reason.slurm_why", why=why) if why else "")])


def launched_text(job_id, job):
    """What the page that queued job `job_id` says of it, as things stand (`job`: its row, None when it cannot
    be read): "Queued as job 5: #1 in the queue · waiting for ...", "Started job 5: it is running." or
    "Job 5 has ended: failed." in the current language. A launch that only queued is never called started."""
    if job is None or job.status == "queued":
        reason = reason_text(job.queue_reason) if job is not None and job.queue_reason else ""
        return t("train.launched.queued_why", id=job_id, why=reason) if reason else t("train.launched", id=job_id)
    if job.status == "running":
        return t("train.launched.running", id=job_id)
    return t("train.launched.ended", id=job_id, status=t(f"status.{job.status}"))


def job_ids_text(ids):
    """Job ids as one piece of text: "5–8" for a run of consecutive ids, else "5, 7, 9" (the current language's
    list separator); a single id as it is."""
    ids = [int(i) for i in ids]
    if len(ids) > 1 and ids == list(range(ids[0], ids[0] + len(ids))):
        return f"{ids[0]}–{ids[-1]}"
    return t("sep.list").join(str(i) for i in ids)


def pipeline_queued_text(pipeline_id, stages):
    """What the act that queued pipeline `pipeline_id` says of it: its jobs and the one that starts first, e.g.
    "Queued pipeline 2: jobs 5–8; job 5 (Pretrain) starts first, ...". `stages`: (job id, train type) in stage
    order."""
    first_id, first_type = stages[0]
    return t("queue.queued", id=pipeline_id, jobs=job_ids_text(job_id for job_id, _ in stages), first=first_id,
             type=t(f"type.{first_type}"))
