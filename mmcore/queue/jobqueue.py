"""Putting jobs in the queue and changing their order.

`submit()` checks a job like a launch does, `enqueue()` writes it as a waiting `queued` row with
the resources it asks for (`mmcore.queue.resources`) and makes sure the scheduler runs
(`mmcore.jobs.scheduler_lock`); `set_priority()` and `move()` change the order the scheduler
(`mmcore.queue.scheduler`) considers waiting jobs in. A waiting job leaves the queue with
`mmcore.queue.backends.stop` (it ends as stopped, "cancelled while queued").
"""
from mmcore.base import gpu
from mmcore.base.i18n import field_error, t
from mmcore.base.paths import TRAINER_DIR
from mmcore.jobs import scheduler_lock
from mmcore.queue import queueconf, queuetext
from mmcore.queue.resources import QueueRefused, resources_for, values_on
from mmcore.queue.scheduler import waiting_jobs
from mmcore.train import commandline, file_owners


def submit(store, train_type, values, name=None, user=None, backend=None, gpus=None, gpu_count=None,
           check=True, **fields):
    """Check a job and queue it; return its id. Raises QueueRefused with every reason it cannot be queued.

    `values`: command values as `mmcore.train.commandline.build_command` takes them. `backend`: "local",
    "slurm" or None for the configured default. `gpus`: see `resources_for`. `check=False` skips the
    file checks (pipeline stages whose base weights an earlier stage has yet to write). Further
    `fields` are stored with the job (pipeline_id, stage, depends_on, priority).
    """
    backend = backend or queueconf.load(store.home).default_backend
    if gpu_count is None:
        gpu_count = gpu_count_for(store, backend)
    if gpus is not None:
        values = values_on(values, resources_for(values, gpus, gpu_count))
    try:
        cmd = commandline.build_command(train_type, values)
    except commandline.ValidationError as exc:
        raise QueueRefused([f"{k}: {field_error(v)}" for k, v in exc.errors.items()]) from None
    except KeyError as exc:
        raise QueueRefused(str(exc.args[0])) from None
    if check:
        problems = _preflight(train_type, values, gpu_count)
        if problems:
            raise QueueRefused(problems)
    return enqueue(store, train_type, name, values, cmd, backend=backend, gpus=gpus, user=user,
                   gpu_count=gpu_count, **fields)


def gpu_count_for(store, backend):
    """GPUs a job may ask for: this machine's for local jobs; for Slurm, what a node is set to
    offer (any number when unset: the cluster decides)."""
    if backend == "local":
        return gpu.gpu_count()
    settings = queueconf.load(store.home)
    return settings.slurm_gpus_per_node * settings.slurm_nodes or 1024


def _preflight(train_type, values, gpu_count):
    from mmcore.train import preflight  # preflight reads the disk; only a checked submission needs it

    checked = commandline.check(train_type, values)
    if checked.errors:
        return [f"{k}: {field_error(v)}" for k, v in checked.errors.items()]
    return preflight.problems(checked, gpu_count)


def enqueue(store, train_type, name, values, cmd, backend=None, gpus=None, user=None, gpu_count=None,
            overwrite_others=False, small=False, with_row=None, **fields):
    """Write a checked job (its `cmd` built from `values`) into the queue and wake the scheduler.

    Every launch passes here, so here a job of `user` is refused when it would write over (or continue
    the resume state of) another user's files, unless `overwrite_others` (an admin's act says so).
    A `small` job (an export, an evaluation: seconds to minutes) that would take a CPU slot here runs in
    the small-job lane instead (`mmcore.queue.queueplan.SMALL_SLOTS`), never waiting behind training.
    `with_row`: as `JobStore.create` takes it (what is written with the job's row, in its transaction)."""
    if not overwrite_others:
        taken = file_owners.others_files(store, train_type, values, user, cmd.cwd or TRAINER_DIR)
        if taken:
            raise QueueRefused([t("owners.foreign_file", path=f.path, owner=f.user, job=f.job if f.job else "?")
                                for f in taken])
    backend = backend or queueconf.load(store.home).default_backend
    if backend not in queueconf.BACKENDS:
        raise QueueRefused(f"backend must be one of {', '.join(queueconf.BACKENDS)}, got {backend!r}")
    if gpu_count is None:
        gpu_count = gpu_count_for(store, backend)
    resources = resources_for(values, gpus, gpu_count)
    if small and backend == "local" and not resources:
        resources = {"lane": "small"}
    if backend == "local":
        wanted = resources.get("gpus") or len(resources.get("gpu_ids", ()))
        if wanted > gpu_count:
            raise QueueRefused(f"asks for {wanted} GPUs; this machine has {gpu_count}")
    job_id = store.create(train_type=train_type, name=name or "", params=values, argv=cmd.argv, cwd=cmd.cwd,
                          env=cmd.env, user=user, backend=backend, resources=resources, waiting=1,
                          with_row=with_row, **{"queue_reason": queuetext.SCHEDULER, **fields})
    scheduler_lock.ensure_running(store)
    return job_id


def check_priority(priority):
    """Raise QueueRefused unless `priority` is a job's priority: a whole number from -1000 to 1000."""
    if isinstance(priority, bool) or not isinstance(priority, int) or not -1000 <= priority <= 1000:
        raise QueueRefused("priority must be a whole number from -1000 to 1000")


def set_priority(store, job_id, priority):
    """Change a waiting job's priority (higher goes first); False when it is not waiting."""
    check_priority(priority)
    ok = store.update_waiting(job_id, priority=priority)
    scheduler_lock.wake(store)
    return ok


def move(store, job_id, where):
    """Move a waiting job among jobs of its priority: "up", "down", "top" or "bottom"."""
    if where not in ("up", "down", "top", "bottom"):
        raise QueueRefused("where must be up, down, top or bottom")
    queue = [j for j in waiting_jobs(store)]
    job = next((j for j in queue if j.id == int(job_id)), None)
    if job is None:
        return False
    peers = [j for j in queue if j.priority == job.priority]
    i = peers.index(job)
    if where == "top" and i > 0:
        pos = peers[0].queue_pos - 1
    elif where == "bottom" and i < len(peers) - 1:
        pos = peers[-1].queue_pos + 1
    elif where == "up" and i > 0:
        before = peers[i - 2].queue_pos if i >= 2 else peers[0].queue_pos - 2
        pos = (before + peers[i - 1].queue_pos) / 2
    elif where == "down" and i < len(peers) - 1:
        after = peers[i + 2].queue_pos if i + 2 < len(peers) else peers[-1].queue_pos + 2
        pos = (peers[i + 1].queue_pos + after) / 2
    else:
        return True  # already there
    ok = store.update_waiting(job_id, queue_pos=pos)
    scheduler_lock.wake(store)
    return ok


