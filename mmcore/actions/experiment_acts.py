"""Acts on runs as experiments: tag and annotate a run.

Each is one `core.perform` (role check, act, one audit row); `entry` says where it was asked from.
"""
from mmcore.actions import core
from mmcore.actions.core import PAGE, did, perform, refused
from mmcore.base.i18n import MessageError, t
from mmcore.experiments.annotations import Annotations


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
