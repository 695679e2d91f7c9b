"""Which job wrote a resume state, and whether the job resuming it may use it (torch-free).

The dashboard's supervisor tells its trainer who it is (`MINIMIND_JOB_ID`) and, for a job started
by Resume, which jobs' state it continues (`MINIMIND_RESUME_OF`: the resumed job and the jobs that
one resumed, newest first). Every resume state records its writer (`writer()`), and a resumed job
refuses a state another job wrote (`resume_problem`), instead of silently continuing a stranger's
run that happens to use the same file name. Runs by hand (no variables) record and check nothing
beyond the host and time.

The supervisor also names the job's owner (`MINIMIND_JOB_USER`) and its job store (`MINIMIND_JOB_STORE`):
every weight, LoRA and resume file records them in its metadata (`owner_fields`), so the dashboard can
tell whose file a launch would write over (`mmcore.train.file_owners.others_files`).
"""
import os
import socket
import time

JOB_ENV = "MINIMIND_JOB_ID"
RESUME_OF_ENV = "MINIMIND_RESUME_OF"
USER_ENV = "MINIMIND_JOB_USER"
STORE_ENV = "MINIMIND_JOB_STORE"


def owner_fields():
    """Who writes a file now: the dashboard job, its owner and its job store (None each in a run by hand)."""
    job = os.environ.get(JOB_ENV, "")
    return {"job_id": int(job) if job.isdigit() else None, "user": os.environ.get(USER_ENV) or None,
            "store": os.environ.get(STORE_ENV) or None}


def writer():
    """What a resume state records about the run writing it."""
    return {"job": os.environ.get(JOB_ENV) or None, "user": os.environ.get(USER_ENV) or None,
            "host": socket.gethostname(), "pid": os.getpid(), "at": time.time()}


def resume_problem(written_by, path):
    """Why this run may not continue the state at `path` written by `written_by`, or None when it may."""
    expected = [j for j in os.environ.get(RESUME_OF_ENV, "").split(",") if j]
    if not expected:
        return None  # not a dashboard Resume: any state of this name is the user's own choice
    job = (written_by or {}).get("job")
    if job is None:
        return None  # written by hand or before writers were recorded: nothing to compare
    if str(job) in expected:
        return None
    return (f"the resume state {os.path.abspath(path)} was written by job {job}, not by job {expected[0]} which "
            f"this run resumes (another job with the same output name has used the file since); refusing to "
            f"continue another job's run. Start a fresh run, or resume job {job} instead.")
