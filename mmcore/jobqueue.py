"""The queue's operations on the job store: submit, cancel, reorder, and the scheduler's tick.

`submit()` checks a job like a launch does, writes it as a waiting `queued` row with the
resources it asks for, and makes sure the scheduler runs. `Queue.tick()` is one round of the
scheduler (`mmcore.scheduler`): reconcile what ended, hold pipeline stages behind failed ones,
decide with `scheduler.plan`, hand starting jobs to their backend, and store each waiting job's
place and reason.
"""
import os
import time
from pathlib import Path

from mmcore import backends, command, gpu, queueconf, scheduler
from mmcore.paths import ensure_root_on_path

ensure_root_on_path()
from trainer import specs  # noqa: E402  (torch-free)

BLOCKING = ("failed", "stopped", "lost", "blocked")


class QueueRefused(ValueError):
    """A submission or queue change that cannot be made; `reasons` lists every problem."""

    def __init__(self, reasons):
        self.reasons = [reasons] if isinstance(reasons, str) else list(reasons)
        super().__init__("; ".join(self.reasons))


# -- what a job asks for -------------------------------------------------------------------------

def resources_for(values, gpus=None, gpu_count=0):
    """The `resources` a job asks for: {} (a CPU slot), {"gpus": N} or {"gpu_ids": [...]}.

    `gpus` (the API's argument) wins: an int asks for that many GPUs (any), a list for those GPUs.
    Otherwise the command values decide: several `gpus`, or `device` cuda:N; `device` auto/empty
    means one GPU when the machine has one, like the trainers' own default.
    """
    if gpus is not None:
        if isinstance(gpus, bool):
            raise QueueRefused("gpus must be a number of GPUs or a list of GPU ids")
        if isinstance(gpus, int):
            if gpus < 0:
                raise QueueRefused("gpus must be 0 or more")
            return {"gpus": gpus} if gpus else {}
        ids, problem = command._parse_gpus(gpus)
        if problem:
            raise QueueRefused(f"gpus {problem}")
        return {"gpu_ids": ids} if ids else {}
    ids, _ = command._parse_gpus(values.get("gpus"))
    if len(ids) >= 2:
        return {"gpu_ids": ids}
    device = str(values.get("device") or "").strip()
    if device.startswith("cuda:") and device[5:].isdigit():
        return {"gpu_ids": [int(device[5:])]}
    if len(ids) == 1:
        return {"gpu_ids": ids}
    if device in ("", "auto") and gpu_count:
        return {"gpus": 1}
    return {}


def values_for_gpus(values, assigned):
    """Command values that run on the assigned GPUs (none: on the CPU)."""
    values = dict(values)
    if not assigned:
        values["device"], values["gpus"] = "cpu", []
    elif len(assigned) == 1:
        values["device"], values["gpus"] = f"cuda:{assigned[0]}", []
    else:
        values["device"], values["gpus"] = "", list(assigned)
    return values


def output_paths(job):
    """Absolute paths of the weight files, then the resume file, a job writes (() when it cannot tell)."""
    try:
        typed = command.validate(job.train_type, job.params)
        spec = specs.spec(job.train_type)
    except (ValueError, KeyError):
        return ()
    values = spec.defaults()
    values.update({k: v for k, v in typed.items() if v is not None})
    cwd = Path(job.cwd or ".")
    try:
        save_dir = Path(os.path.normpath(cwd / values["save_dir"]))
        found = [str(save_dir / name) for name in spec.weight_files(values)]
        found.append(os.path.normpath(cwd / specs.CHECKPOINT_DIR / spec.resume_file(values)))
    except (KeyError, TypeError):
        return ()
    return tuple(found)


# -- submitting and changing the queue --------------------------------------------------------------

def submit(store, train_type, values, name=None, user=None, backend=None, gpus=None, gpu_count=None,
           check=True, **fields):
    """Queue a job; return its id. Raises QueueRefused with every reason it cannot be queued.

    `values`: command values as `mmcore.command.build_command` takes them. `backend`: "local",
    "slurm" or None for the configured default. `gpus`: see `resources_for`. `check=False` skips the
    file checks (pipeline stages whose base weights an earlier stage has yet to write). Further
    `fields` are stored with the job (pipeline_id, stage, depends_on, priority).
    """
    settings = queueconf.load(store.home)
    backend = backend or settings.default_backend
    if backend not in queueconf.BACKENDS:
        raise QueueRefused(f"backend must be one of {', '.join(queueconf.BACKENDS)}, got {backend!r}")
    if gpu_count is None:
        gpu_count = gpu.gpu_count() if backend == "local" else max(64, settings.slurm_gpus_per_node)
    resources = resources_for(values, gpus, gpu_count)
    if gpus is not None and "gpus" in resources:
        values = values_for_gpus(values, list(range(resources["gpus"])))  # validated as if on GPUs 0..N-1
    try:
        cmd = command.build_command(train_type, values)
    except command.ValidationError as exc:
        raise QueueRefused([f"{k}: {v}" for k, v in exc.errors.items()]) from None
    except KeyError as exc:
        raise QueueRefused(str(exc.args[0])) from None
    if check:
        problems = command.preflight(train_type, values, gpu_count)
        if problems:
            raise QueueRefused(problems)
    if backend == "local":
        wanted = resources.get("gpus") or len(resources.get("gpu_ids", ()))
        if wanted > gpu_count:
            raise QueueRefused(f"asks for {wanted} GPUs; this machine has {gpu_count}")
    job_id = store.create(train_type=train_type, name=name or "", params=values, argv=cmd.argv, cwd=cmd.cwd,
                          env=cmd.env, user=user, backend=backend, resources=resources, waiting=1,
                          queue_reason="waiting for the scheduler", **fields)
    scheduler.ensure_running(store)
    return job_id


def cancel(store, job_id):
    """Take a waiting job out of the queue (it ends as stopped); False when it was not waiting."""
    now = time.time()
    done = _update_waiting(store, job_id, status="stopped", waiting=0, ended_at=now, stop_requested=now,
                           queue_reason=None, note="cancelled while queued")
    return done


def _update_waiting(store, job_id, **fields):
    values = store._encode(fields)
    assignments = ", ".join(f"{k} = ?" for k in values)
    with store._write() as conn:
        cur = conn.execute(f"UPDATE jobs SET {assignments} WHERE id = ? AND status = 'queued' AND waiting = 1",
                           (*values.values(), int(job_id)))
    return cur.rowcount == 1


def waiting_jobs(store):
    """Jobs in the queue, in the order the scheduler considers them."""
    with store._connect() as conn:
        rows = conn.execute("SELECT * FROM jobs WHERE status = 'queued' AND waiting = 1"
                            " ORDER BY priority DESC, queue_pos, id").fetchall()
    return [store._job(r) for r in rows]


def set_priority(store, job_id, priority):
    """Change a waiting job's priority (higher goes first); False when it is not waiting."""
    if isinstance(priority, bool) or not isinstance(priority, int) or not -1000 <= priority <= 1000:
        raise QueueRefused("priority must be a whole number from -1000 to 1000")
    ok = _update_waiting(store, job_id, priority=priority)
    scheduler.wake(store)
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
    ok = _update_waiting(store, job_id, queue_pos=pos)
    scheduler.wake(store)
    return ok


# -- the scheduler's round -------------------------------------------------------------------------------

def _our_pids(active):
    """Pids of our jobs' trainers and their children (NVML lists them as GPU users too)."""
    import psutil

    pids = set()
    for job in active:
        if job.trainer_pid is None:
            continue
        try:
            proc = psutil.Process(job.trainer_pid)
            pids.add(proc.pid)
            pids.update(c.pid for c in proc.children(recursive=True))
        except psutil.Error:
            continue
    return frozenset(pids)


class Queue:
    """The scheduler's state between rounds (output paths are cached per job)."""

    def __init__(self, store, list_gpus=gpu.list_gpus):
        self.store = store
        self.list_gpus = list_gpus
        self._outputs = {}

    def outputs(self, job):
        if job.id not in self._outputs:
            self._outputs[job.id] = output_paths(job)
        return self._outputs[job.id]

    def block_after_failures(self):
        """Hold (`blocked`) every waiting stage whose stage before failed, was stopped or is blocked."""
        blocked = []
        while True:
            with self.store._connect() as conn:
                rows = conn.execute(
                    "SELECT w.id, d.id AS dep, d.status AS dep_status, d.stage AS dep_stage FROM jobs w"
                    " JOIN jobs d ON d.id = w.depends_on WHERE w.status = 'queued' AND w.waiting = 1"
                    " AND d.status IN (%s)" % ", ".join("?" * len(BLOCKING)), BLOCKING).fetchall()
            if not rows:
                return blocked
            for row in rows:
                stage = f"stage {row['dep_stage'] + 1}" if row["dep_stage"] is not None else "the job"
                if _update_waiting(self.store, row["id"], status="blocked", waiting=0, queue_reason=None,
                                   ended_at=time.time(),
                                   note=f"held: {stage} before it (job {row['dep']}) is {row['dep_status']}"):
                    blocked.append(row["id"])

    def decide(self, settings):
        """(waiting jobs, decisions) for the store as it is now."""
        store = self.store
        waiting = waiting_jobs(store)
        if not waiting:
            return [], []
        with store._connect() as conn:
            rows = conn.execute("SELECT * FROM jobs WHERE status IN ('queued', 'running') AND waiting = 0").fetchall()
            deps = {r["id"]: (r["status"], r["stage"]) for r in conn.execute(
                "SELECT id, status, stage FROM jobs WHERE id IN (SELECT depends_on FROM jobs"
                " WHERE status = 'queued' AND waiting = 1 AND depends_on IS NOT NULL)")}
        active = [store._job(r) for r in rows]
        local_active = [j for j in active if j.backend == "local"]
        wants_gpus = any(scheduler.wanted(j)[0] != "cpu" and j.backend == "local" for j in waiting)
        gpus = self.list_gpus() if wants_gpus else []
        our = _our_pids(local_active) if any(g.processes for g in gpus) else frozenset()
        dependencies = {i: (status, f"stage {stage + 1} (job {i})" if stage is not None else f"job {i}")
                        for i, (status, stage) in deps.items()}
        decisions = scheduler.plan(waiting, active, gpus, settings.effective_cpu_slots(),
                                   settings.foreign_memory_mib, our, self.outputs, dependencies)
        return waiting, decisions

    def tick(self):
        """One round: reconcile, block, decide, start, and store the reasons of those that wait."""
        store = self.store
        store.reconcile()
        backends.refresh(store)
        self.block_after_failures()
        settings = queueconf.load(store.home)
        waiting, decisions = self.decide(settings)
        by_id = {j.id: j for j in waiting}
        reasons = []
        for d in decisions:
            job = by_id[d.job_id]
            if d.start:
                backends.dispatch(store, job, list(d.gpus), settings)
            elif d.reason != job.queue_reason:
                reasons.append((d.reason, d.job_id))
        if reasons:
            with store._write() as conn:
                conn.executemany("UPDATE jobs SET queue_reason = ? WHERE id = ? AND waiting = 1", reasons)
        live = {j.id for j in waiting}
        for job_id in [i for i in self._outputs if i not in live]:
            del self._outputs[job_id]
        return decisions
