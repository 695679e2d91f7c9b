"""A run is a run across resumes: a job started with Resume continues its parent's records folder,
so the jobs that share one records folder are one run. Here: which jobs form a run (`lineages`),
its curve as one table with the resume points marked (`join`), and where a resumed job began, so
that its ETA counts only the steps it did itself (`start_step`).
"""
import pandas as pd

from mmcore.runs import metric_stream


def is_resume(job):
    """True for a job started from its predecessor's resume state (--from_resume 1)."""
    return str((job.params or {}).get("from_resume", "0")).strip().lower() in ("1", "true")


def lineages(jobs, home):
    """{job id: [ids of the jobs of its run, oldest first]} for `jobs`: jobs sharing a records folder
    (a resume continues its parent's) form one run. A job alone forms a run of one."""
    groups = {}
    for job in sorted(jobs, key=lambda j: j.id):
        groups.setdefault(str(metric_stream.job_run_dir(job, home)), []).append(job.id)
    return {job_id: ids for ids in groups.values() for job_id in ids}


def parent_of(job_id, lineage):
    """The job that `job_id` resumed (the one before it in its lineage), or None."""
    at = lineage.index(job_id)
    return lineage[at - 1] if at > 0 else None


def table_order(jobs, home):
    """`jobs` (newest first) reordered so that each run's jobs sit together, newest run first, and
    {job id: the id of the job it resumed} for the resumed ones."""
    lines = lineages(jobs, home)
    by_id = {job.id: job for job in jobs}
    ordered, placed, parents = [], set(), {}
    for job in sorted(jobs, key=lambda j: j.id, reverse=True):
        if job.id in placed:
            continue
        for member in reversed(lines[job.id]):
            if member in by_id and member not in placed:
                ordered.append(by_id[member])
                placed.add(member)
                parent = parent_of(member, lines[job.id])
                if parent is not None:
                    parents[member] = parent
    return ordered, parents


def join(parts):
    """One table from the tables of a run's jobs, oldest first, and the resume points.

    A resumed job starts again from its last checkpoint, so the steps its parent logged from there on
    are replaced by the resumed job's. Returns (table, [(global_step, job id) where each resume began]).
    """
    frames, marks = [], []
    for job_id, df in parts:
        if df is None or not len(df):
            continue
        first = df["global_step"].iloc[0]
        if frames:
            frames = [f[f["global_step"] < first] for f in frames]
            marks.append((first, job_id))
        frames.append(df)
    if not frames:
        return pd.DataFrame(), []
    return pd.concat(frames, ignore_index=True, sort=False), marks


def start_step(job, first_logged_step):
    """The global step a job began at: 0 for a fresh job; for a resumed one, its first logged step
    less one log interval (it resumed somewhere in the interval before its first progress line)."""
    if not is_resume(job) or first_logged_step is None:
        return 0
    try:
        interval = int(str(job.params.get("log_interval", "")).strip() or 100)
    except ValueError:
        interval = 100
    return max(0, int(first_logged_step) - max(1, interval))
