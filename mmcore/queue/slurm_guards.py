"""Guards of Slurm jobs: a Slurm job has no local supervisor, so the queue's scheduler follows its records (on the
filesystem the nodes share) with the same `mmcore.runs.guards.GuardWatch` and scancels it when a guard fires;
the job ends "stopped" with the guard's reason in its note, and the audit trail has the stop, as for a local job."""
import time

from mmcore.jobs import jobnote
from mmcore.runs import guards
from mmcore.runs.metric_stream import job_run_dir

_watches = {}  # (job store, job id) -> its GuardWatch (a process may follow the jobs of several stores)


def check(store, stop):
    """Look at every running Slurm job's new records; `stop(store, job)` the ones a guard stops. Returns their ids."""
    stopped = []
    running = [j for j in store.list(status="running", limit=None) if j.backend == "slurm"]
    for key in {k for k in _watches if k[0] == store.path} - {(store.path, j.id) for j in running}:
        del _watches[key]
    for job in running:
        watch = _watches.get((store.path, job.id))
        if watch is None:
            watch = _watches[(store.path, job.id)] = guards.watch_for(store.path, job.id, job_run_dir(job, store.home))
        reason = watch.check()
        if reason is None or job.stop_requested is not None:
            continue
        if store.transition(job.id, "running", stop_unasked=True,
                            note=jobnote.stored("note.guard_stopped", reason=reason), stop_requested=time.time()):
            try:
                guards.record_stop(store.home, job.id, reason)
            except ValueError:  # an audit trail that cannot be written (AuditUnavailable) does not hold up the stop
                pass
            stop(store, store.get(job.id))
            stopped.append(job.id)
    return stopped
