"""The queue's decision as a pure function: which waiting jobs start now, on which GPUs, and why
the others wait.

Waiting jobs come in queue order (priority first, then place in the queue: first come first
served). A GPU is free when no job of ours holds it and no other process uses more than
`foreign_memory_mib` of its memory. A job that cannot start keeps the free resources it waits for
from later jobs (no starvation of big jobs), jobs that would write the same weight or resume file
wait for each other, and a pipeline stage waits for the stage before it (`depends_on`). Short jobs
(exports, evaluations) that would take a CPU slot run in the small-job lane instead: `SMALL_SLOTS`
of their own, so they never wait behind training that holds every CPU slot.

Why a job waits is kept as messages (`mmcore.base.i18n.message`), worded by whoever reads them: see
`mmcore.queue.queuetext`.
"""
from typing import NamedTuple

from mmcore.base.i18n import message
from mmcore.queue import queuetext

MIB = 1 << 20
# Jobs of the small-job lane that may run at once beside the CPU slots' jobs: one keeps a short job from
# waiting behind training without letting many of them take the cores training uses.
SMALL_SLOTS = 1


class Decision(NamedTuple):  # a tuple: a round makes one per waiting job, 1,000s of them
    job_id: int
    start: bool
    gpus: tuple = ()  # GPU indexes the job gets when it starts
    why: tuple = ()  # why it waits: messages, what it waits for first ("waiting for GPU 0", "GPU 0 held by ...")
    place: int = 0  # its place among the jobs that stay in the queue (1: next)

    @property
    def stored(self):
        """Why it waits, with its place, as the job store keeps it (`mmcore.queue.queuetext`)."""
        return queuetext.stored(self.why, self.place)

    @property
    def reason(self):
        """Why it waits, with its place, in English: "#2 in the queue · waiting for ..." ("" when it starts)."""
        return queuetext.english(self.stored) if self.why else ""


def wanted(job):
    """("cpu", None), ("small", None), ("any", n) or ("ids", [..]) from a job's `resources`."""
    res = job.resources or {}
    if res.get("lane") == "small":
        return "small", None
    if res.get("gpu_ids"):
        return "ids", [int(g) for g in res["gpu_ids"]]
    if res.get("gpus"):
        return "any", int(res["gpus"])
    return "cpu", None


def who(job):
    return queuetext.job(job.id, job.user)


def _gib(nbytes):
    return f"{nbytes / (1 << 30):.1f} GiB"


def gpu_state(gpus, active, our_pids, foreign_memory_mib):
    """(free GPU indexes, {index: why it is busy}) from NVML's view and the jobs that hold GPUs."""
    busy = {}
    for job in active:
        for index in job.assigned_gpus or ():
            busy.setdefault(int(index), message("reason.gpu_held", gpu=int(index), who=who(job)))
    limit = foreign_memory_mib * MIB
    for g in gpus:
        if g.index in busy:
            continue
        for proc in g.processes:
            if proc.pid in our_pids:
                continue
            if proc.used_memory is None or proc.used_memory > limit:
                used = "" if proc.used_memory is None else message("reason.gpu_mem", mem=_gib(proc.used_memory))
                busy[g.index] = message("reason.gpu_foreign", gpu=g.index, pid=proc.pid, mem=used)
                break
    free = [g.index for g in gpus if g.index not in busy]
    return free, busy


def plan(waiting, active, gpus, cpu_slots, foreign_memory_mib=1024, our_pids=frozenset(),
         outputs=None, dependencies=None, small_slots=SMALL_SLOTS):
    """One decision per waiting job, in queue order.

    `waiting`: jobs in the queue, already in queue order. `active`: jobs of ours that hold
    resources (local jobs started and not ended). `gpus`: `mmcore.base.gpu.GpuInfo` list.
    `outputs(job) -> paths` it writes, most telling first (default: none). `dependencies`: {job id: (status,
    label)} of the jobs waiting jobs depend on, each label a message (`queuetext.job`, "stage 2 (job 5)").
    `small_slots`: jobs of the small-job lane that may run at once (they take no CPU slot).
    """
    outputs = outputs or (lambda job: ())
    dependencies = dependencies or {}
    free, busy = gpu_state(gpus, active, our_pids, foreign_memory_mib)
    free = list(free)
    present = {g.index for g in gpus}
    cpu_jobs = [j for j in active if j.backend == "local" and not j.assigned_gpus and wanted(j)[0] == "cpu"]
    cpu_used = len(cpu_jobs)
    cpu_full = None  # why a CPU job waits once the slots are taken: the same for all of them, made once
    small_jobs = [j for j in active if j.backend == "local" and wanted(j)[0] == "small"]
    writers = {}  # path -> (job, started or waiting ahead)
    for job in active:
        for path in outputs(job):
            writers.setdefault(path, (job, "running"))
    reserved = {}  # GPU index -> job ahead in the queue that waits for it
    decisions = []
    for job in waiting:
        files = outputs(job)
        if job.depends_on is not None:
            status, label = dependencies.get(job.depends_on, ("missing", queuetext.job(job.depends_on)))
            if status != "succeeded":
                decisions.append(Decision(job.id, False, why=(message("reason.depends", who=label),)))
                _claim(writers, files, job)
                continue
        clash = next((p for p in files if p in writers), None)
        if clash is not None:
            other, how = writers[clash]
            key = "reason.writes" if how == "running" else "reason.writes_ahead"
            decisions.append(Decision(job.id, False, why=(message(key, who=who(other), path=clash),)))
            _claim(writers, files, job)
            continue
        kind, need = wanted(job)
        if job.backend != "local":
            decisions.append(Decision(job.id, True))  # the cluster's scheduler places it
            _claim(writers, files, job, "running")
            continue
        if kind == "small":
            if len(small_jobs) < small_slots:
                small_jobs.append(job)
                decisions.append(Decision(job.id, True))
                _claim(writers, files, job, "running")
            else:
                decisions.append(Decision(job.id, False, why=(message(
                    "reason.small_slot", used=len(small_jobs), slots=small_slots, holders=[who(j) for j in small_jobs]),)))
                _claim(writers, files, job)
            continue
        if kind == "cpu":
            if cpu_used < cpu_slots:
                cpu_used += 1
                cpu_jobs.append(job)
                decisions.append(Decision(job.id, True))
                _claim(writers, files, job, "running")
            else:
                if cpu_full is None:
                    cpu_full = (message("reason.cpu_slot", used=cpu_used, slots=cpu_slots,
                                        holders=[who(j) for j in cpu_jobs]),)
                decisions.append(Decision(job.id, False, why=cpu_full))
                _claim(writers, files, job)
            continue
        ids = need if kind == "ids" else None
        count = len(need) if kind == "ids" else need
        if kind == "ids":
            missing = [i for i in ids if i not in present]
            if missing:
                decisions.append(Decision(job.id, False, why=(message("reason.no_such_gpu", gpu=missing[0],
                                                                      n=len(present)),)))
                continue
            takeable = [i for i in ids if i in free and i not in reserved]
        else:
            if count > len(present):
                key = "reason.too_many_gpus" if count > 1 else "reason.too_many_gpus.one"
                decisions.append(Decision(job.id, False, why=(message(key, count=count, n=len(present)),)))
                continue
            takeable = [i for i in free if i not in reserved][:count]
        if len(takeable) == count:
            for i in takeable:
                free.remove(i)
                busy[i] = message("reason.gpu_held", gpu=i, who=who(job))
            decisions.append(Decision(job.id, True, gpus=tuple(takeable)))
            _claim(writers, files, job, "running")
            continue
        candidates = ids if ids is not None else sorted(present)
        why = [busy.get(i) or message("reason.gpu_wanted", gpu=i, who=who(reserved[i]))
               for i in candidates if i not in takeable and (i in busy or i in reserved)]
        if ids is not None:
            head = message("reason.wants_gpus" if count > 1 else "reason.wants_gpu", ids=list(ids))
        else:
            head = message("reason.wants_count", count=count) if count > 1 else message("reason.wants_one")
        decisions.append(Decision(job.id, False, why=(head, *why)))
        for i in takeable:
            reserved[i] = job
        _claim(writers, files, job)
    # Places count the jobs that stay in the queue, so the first that waits is #1.
    places = iter(range(1, len(decisions) + 1))
    return [d if d.start else d._replace(place=next(places)) for d in decisions]


def _claim(writers, files, job, how="waiting"):
    for path in files:
        writers.setdefault(path, (job, how))
