"""Where a job runs: one small interface, two implementations (this machine, a Slurm cluster).

A backend answers five things for the queue and the pages:

- `submit(store, job, gpus, settings)`: start a job the queue released (on the GPUs it got);
- `refresh(store)`: bring the states of its active jobs up to date (status, exit code, times);
- `stop(store, job, grace)`: SIGTERM first (the trainer saves its resume state and exits 143),
  SIGKILL later;
- the exit code is the row's `exit_code` once `refresh` saw the end;
- `log_path(job)`: where its output goes (for Slurm, a file on the shared filesystem).

`LocalBackend` runs the job's supervisor (`mmcore.jobs.runner`) on this machine; `SlurmBackend`
(`mmcore.queue.slurm`) submits a generated batch script with `sbatch`.
"""
import time

from mmcore.jobs import jobnote, runner
from mmcore.queue import slurm, slurm_guards
from mmcore.queue.resources import values_for_gpus
from mmcore.train import commandline


def claim(store, job_id, **fields):
    """Take a waiting job out of the queue to start it (nothing starts twice); True when taken."""
    return store.update_waiting(job_id, **{"waiting": 0, "dispatched_at": time.time(), "queue_reason": None,
                                           **fields})


class LocalBackend:
    """Jobs run here, each under its own detached supervisor (`python -m mmcore.jobs.runner`)."""
    name = "local"

    def submit(self, store, job, gpus, settings=None):
        fields = {}
        if (job.resources or {}).get("gpus"):  # any N GPUs: the command names the ones it got
            values = values_for_gpus(job.params, gpus)
            cmd = commandline.build_command(job.train_type, values)
            fields.update(params=values, argv=cmd.argv, env=cmd.env)
        if gpus:
            fields["assigned_gpus"] = list(gpus)
        if not claim(store, job.id, **fields):
            return False
        runner.launch(store, job.id)
        return True

    def refresh(self, store):
        store.reconcile()

    def stop(self, store, job, grace=runner.DEFAULT_GRACE_S):
        return runner.stop(store, job.id, grace=grace)

    def log_path(self, job):
        return job.log_path


def get(name):
    """The backend called `name` ("local" or "slurm")."""
    if name == "local":
        return LocalBackend()
    if name == "slurm":
        return slurm.SlurmBackend()
    raise KeyError(f"unknown backend {name!r}; known: local, slurm")


def dispatch(store, job, gpus, settings):
    """Hand a job the queue released to its backend; a failure to start fails the job, with why."""
    try:
        return get(job.backend).submit(store, job, gpus, settings)
    except Exception as exc:  # record it on the job rather than retrying it forever
        store.transition(job.id, "queued", status="failed", waiting=0, ended_at=time.time(), queue_reason=None,
                         note=jobnote.stored("note.backend_failed", backend=job.backend, error=str(exc)))
        return False


def dispatch_array(store, jobs, tasks, settings):
    """Hand the runs of one job array that the queue released together to Slurm as one array (job i as task
    `tasks[i]`); a failure to submit fails each of them, with why."""
    try:
        return slurm.SlurmBackend().submit_array(store, jobs, tasks, settings)
    except Exception as exc:  # as `dispatch`: recorded on the jobs rather than retried forever
        for job in jobs:
            store.transition(job.id, "queued", status="failed", waiting=0, ended_at=time.time(), queue_reason=None,
                             note=jobnote.stored("note.backend_failed", backend=job.backend, error=str(exc)))
        return []


def refresh(store):
    """Reconcile every backend's active jobs (Slurm only when it has some)."""
    store.reconcile()
    with store._connect() as conn:
        has_slurm = conn.execute("SELECT 1 FROM jobs WHERE backend = 'slurm' AND waiting = 0"
                                 " AND status IN ('queued', 'running') LIMIT 1").fetchone()
    if has_slurm:
        slurm_guards.check(store, lambda store, job: slurm.SlurmBackend().stop(store, job))
        slurm.SlurmBackend().refresh(store)


def stop(store, job_id, grace=runner.DEFAULT_GRACE_S, wait=False):
    """Stop a job wherever it runs, or take it out of the queue; False when it had already ended.

    `wait`: return once its end is recorded (at most the grace period and a little more locally;
    on Slurm, the cluster's KillWait bounds it).
    """
    job = store.get(job_id)
    if job is None:
        raise KeyError(f"no job with id {job_id}")
    if job.in_queue:
        if store.cancel_waiting(job_id):
            return True
        job = store.get(job_id)  # it started meanwhile
    if not job.active:
        return False
    if job.backend == "local":
        return runner.stop(store, job_id, grace=grace, wait=wait)
    stopping = get(job.backend).stop(store, job, grace)
    deadline = time.monotonic() + 120
    while wait and time.monotonic() < deadline:
        refresh(store)
        if store.get(job_id).finished:
            break
        time.sleep(0.5)
    return stopping


def stop_all(store, job_ids, grace=runner.DEFAULT_GRACE_S):
    """Stop several jobs (a sweep's); the ids of those asked to stop. A Slurm job array whose every active task is
    among them is cancelled with one `scancel` of the array, each of its jobs marked as asked to stop."""
    jobs = [j for j in (store.get(int(i)) for i in job_ids) if j is not None and j.active]
    arrays = {}
    for job in jobs:
        if job.backend == "slurm" and not job.in_queue and "_" in (job.external_id or ""):
            arrays.setdefault(job.external_id.split("_")[0], []).append(job)
    whole = set()
    for array_id, tasks in arrays.items():
        with store._connect() as conn:
            others = conn.execute("SELECT 1 FROM jobs WHERE backend = 'slurm' AND status IN ('queued', 'running')"
                                  " AND substr(external_id, 1, ?) = ? AND id NOT IN (%s) LIMIT 1"
                                  % ", ".join("?" * len(tasks)),
                                  [len(array_id) + 1, f"{array_id}_", *[j.id for j in tasks]]).fetchone()
        if others is None:
            for job in tasks:
                store.transition(job.id, ("queued", "running"), stop_requested=job.stop_requested or time.time())
            slurm.scancel(array_id)
            whole.update(j.id for j in tasks)
    return [j.id for j in jobs if j.id in whole or stop(store, j.id, grace=grace)]
