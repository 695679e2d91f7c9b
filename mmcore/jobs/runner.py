"""Detached jobs, the dashboard's side: `launch()`, `stop()`, `delete()`; and the command line
`python -m mmcore.jobs.runner JOB_ID [--db PATH]`, which runs one job to its end.

The dashboard writes a `queued` row and calls `launch()`, which starts this module in a new session
and returns at once. The supervisor (`mmcore.jobs.supervisor.Supervisor`), not the web server, is the
trainer's parent, so a job keeps running and its ending is still recorded when the dashboard exits or
restarts. A stop is a flag in the row (set by `stop()`) or SIGTERM to the supervisor, which ends the
trainer's processes within the grace period, so the page that asked returns at once.
"""
import argparse
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

from mmcore.base import paths
from mmcore.base.paths import ROOT, default_home
from mmcore.base.process_identity import process_matches, process_start_time
from mmcore.jobs import jobnote
from mmcore.jobs.jobstore import JobStore
from mmcore.jobs.supervisor import DEFAULT_GRACE_S, LEFTOVER_GRACE_S, POLL_S, Supervisor


class JobRunningError(RuntimeError):
    """The job is queued or running, so the operation is refused."""


def _get(store, job_id):
    job = store.get(job_id)
    if job is None:
        raise KeyError(f"no job with id {job_id}")
    return job


def launch(store, job_id):
    """Start the supervisor of a queued job in a new session; return its pid without waiting."""
    job = _get(store, job_id)
    if job.status != "queued":
        raise ValueError(f"job {job_id} is {job.status}; only a queued job can be launched")
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mmcore.jobs.runner", str(job_id), "--db", store.path],
            cwd=ROOT, start_new_session=True,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError as exc:
        store.transition(job_id, "queued", status="failed", ended_at=time.time(),
                         note=jobnote.stored("note.cannot_start_supervisor", error=str(exc)))
        raise
    # Record the supervisor at once so reconcile() can tell a slow start from a failed one. The
    # supervisor writes the same values when it registers; whichever comes second changes nothing.
    store.transition(job_id, "queued", supervisor_pid=proc.pid, supervisor_start=process_start_time(proc.pid))
    # Reap it when it exits so it never lingers as a zombie in a long-running dashboard.
    threading.Thread(target=proc.wait, name=f"reap-runner-{proc.pid}", daemon=True).start()
    return proc.pid


def stop(store, job_id, grace=DEFAULT_GRACE_S, wait=False):
    """Ask a queued or running job to stop; False when it had already finished.

    The job's supervisor sends SIGTERM to the trainer's process group and SIGKILL `grace` seconds
    later if anything is left, then records `stopped`. This returns at once unless `wait` is true,
    in which case it waits (at most grace + a few seconds) for the job to be recorded as ended.
    A queued job whose supervisor never started is marked stopped directly.
    """
    if grace < 0:
        raise ValueError(f"grace must be at least 0 seconds, got {grace}")
    store.reconcile()  # a job whose supervisor died has already ended: lost
    job = _get(store, job_id)
    if not job.active:
        return False
    requested = job.stop_requested or time.time()
    if not store.transition(job_id, ("queued", "running"), stop_requested=requested, stop_grace=float(grace)):
        return False  # it ended in the meantime
    if job.supervisor_pid is None:
        now = time.time()
        store.transition(job_id, "queued", status="stopped", ended_at=now, note=jobnote.stored("note.stopped_before_start"))
        return True
    # Wake the supervisor now rather than at its next poll. Only a registered (running) supervisor
    # has its signal handlers installed; a queued one sees the flag right after registering.
    if job.status == "running" and process_matches(job.supervisor_pid, job.supervisor_start):
        try:
            os.kill(job.supervisor_pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    if wait:
        deadline = time.monotonic() + grace + LEFTOVER_GRACE_S + 5 * POLL_S
        while time.monotonic() < deadline:
            store.reconcile()
            current = store.get(job_id)
            if current is None or not current.active:
                break
            time.sleep(0.1)
    return True


def delete(store, job_id):
    """Remove a finished job's row and log file; a queued or running job raises JobRunningError."""
    store.reconcile()  # a job whose supervisor died has ended (lost) and may be deleted
    job = _get(store, job_id)
    if job.active:
        raise JobRunningError(f"job {job_id} is {job.status}: stop it before deleting it")
    store.delete(job_id)
    if job.log_path:
        Path(job.log_path).unlink(missing_ok=True)


def main(argv=None):
    """Command line: supervise job JOB_ID of the store at --db (default: the dashboard's)."""
    parser = argparse.ArgumentParser(prog="python -m mmcore.jobs.runner", description=main.__doc__)
    parser.add_argument("job_id", type=int, help="id of a queued job")
    parser.add_argument("--db", default=None, help="jobs.db path (default: $MINIMIND_DASHBOARD_HOME/jobs.db or <repo>/runs/jobs.db)")
    args = parser.parse_args(argv)
    try:
        store = JobStore(args.db)
    except Exception:
        # Launched detached, this process has no terminal: the job's log is where people look.
        home = Path(args.db).resolve().parent if args.db else default_home()
        log_path = home / "logs" / f"job-{args.job_id}.log"
        paths.private_dir(log_path.parent)
        with os.fdopen(paths.open_private(log_path), "a", encoding="utf-8") as log:
            log.write(f"# supervisor error: cannot open the job store\n{traceback.format_exc()}")
        raise
    return Supervisor(store, args.job_id).run()


if __name__ == "__main__":
    sys.exit(main())
