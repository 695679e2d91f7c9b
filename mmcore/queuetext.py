"""Why a job waits, in the viewer's language.

The scheduler (mmcore/queueplan.py, mmcore/slurm.py) stores each waiting job's reason as one English
text in the job store, shared by every viewer, the CLI and the API. A page shows it through
`reason_text`, which rewords the parts it knows ("#2 in the queue · waiting for GPU 0; GPU 0 held by
job 5 (alice)") and leaves any other part as it is.
"""
import re

from mmcore.i18n import t

_PLACE = re.compile(r"#(?P<n>\d+) in the queue · (?P<rest>.+)", re.S)
_STAGE = re.compile(r"\bstage (?P<n>\d+)")
_JOB = re.compile(r"\bjob (?P<id>\d+)(?: \((?P<user>[^()]*)\))?")
# (pattern over one "; "-separated part, key); the parts' job mentions are reworded by `_jobs`.
_PARTS = tuple((re.compile(pattern, re.S), key) for pattern, key in (
    (r"waiting for the scheduler", "reason.scheduler"),
    (r"submitting to Slurm", "reason.submitting"),
    (r"Slurm job (?P<id>\S+): submitted", "reason.slurm_submitted"),
    (r"Slurm job (?P<id>\S+): (?P<state>[a-z_]+)(?: \((?P<why>.*)\))?", "reason.slurm_state"),
    (r"waiting for (?P<who>.+?), ahead in the queue, which writes (?P<path>.+)", "reason.writes_ahead"),
    (r"waiting for (?P<who>.+?), which writes (?P<path>.+)", "reason.writes"),
    (r"waiting for a CPU slot \((?P<used>\d+) of (?P<slots>\d+) in use: (?P<holders>.*)\)", "reason.cpu_slot"),
    (r"GPU (?P<gpu>\d+) does not exist on this machine \((?P<n>\d+) GPUs\)", "reason.no_such_gpu"),
    (r"asks for (?P<count>\d+) GPUs; this machine has (?P<n>\d+)", "reason.too_many_gpus"),
    (r"waiting for GPU (?P<ids>\d+)", "reason.wants_gpu"),
    (r"waiting for GPUs (?P<ids>\d+(?:, \d+)*)", "reason.wants_gpus"),
    (r"waiting for 1 GPU", "reason.wants_one"),
    (r"waiting for (?P<count>\d+) GPUs", "reason.wants_count"),
    (r"GPU (?P<gpu>\d+) held by (?P<who>.+)", "reason.gpu_held"),
    (r"GPU (?P<gpu>\d+) wanted by (?P<who>.+), ahead in the queue", "reason.gpu_wanted"),
    (r"GPU (?P<gpu>\d+) used by another process \(pid (?P<pid>\d+)(?:, (?P<mem>[\d.]+ GiB))?\)", "reason.gpu_foreign"),
    (r"waiting for (?P<who>.+) to succeed", "reason.depends"),
))


def _jobs(text):
    """"job 5 (alice)", "stage 2 (job 5)" -> the viewer's wording of jobs, owners and stages."""
    text = _JOB.sub(lambda m: t("reason.job_of", id=m["id"], user=m["user"]) if m["user"] is not None
                    else t("reason.job", id=m["id"]), text)
    return _STAGE.sub(lambda m: t("reason.stage", n=m["n"]), text)


def _part(text):
    """One reason reworded, or None when the table does not know it."""
    for pattern, key in _PARTS:
        if match := pattern.fullmatch(text):
            values = {k: _jobs(v) if k in ("who", "holders") else (v or "") for k, v in match.groupdict().items()}
            if key == "reason.slurm_state" and values["why"]:
                values["why"] = t("reason.slurm_why", why=values["why"])
            if key == "reason.gpu_foreign" and values["mem"]:
                values["mem"] = t("reason.gpu_mem", mem=values["mem"])
            return t(key, **values)
    return None


def reason_text(reason):
    """A stored queue reason in the current language (unknown parts as they are)."""
    text = str(reason or "")
    place = _PLACE.fullmatch(text)
    rest = place["rest"] if place else text
    # One reason ("asks for 9 GPUs; this machine has 3"), else reasons joined by "; ".
    worded = _part(rest) or "; ".join(_part(part) or part for part in rest.split("; "))
    return t("reason.place", n=place["n"], rest=worded) if place else worded
