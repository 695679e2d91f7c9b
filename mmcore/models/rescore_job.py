"""Queue a rescore of a run's stored responses (`mmcore.runs.rescore`) as a job.

The job, `python -m mmcore.workers.rescore_worker RUN_DIR --reward SPEC --name NAME`, goes through the same
queue and supervisor as exports and evaluations: the small-job lane (never behind training), its progress
and log on Jobs, stoppable, surviving a dashboard restart. A reward-model folder is loaded there, in the
job's process, never in the dashboard's.
"""
from pathlib import Path
from types import SimpleNamespace

from mmcore.base.paths import ROOT
from mmcore.queue import jobqueue
from mmcore.runs import rescore as rescoring

JOB_TYPE = "rescore"


def launch(store, run_dir, reward, name=None, user=None):
    """Queue the rescore of the run in `run_dir` with `reward` (checked first: `rescoring.check`) as a job owned
    by `user`; returns (job id, the name recorded). RescoreError for a rescore that cannot start, ValueError
    when the queue refuses."""
    spec, name = rescoring.check(run_dir, reward, name)
    run_dir = Path(run_dir).resolve()
    argv = rescoring.worker_argv(run_dir, spec, name)
    label = Path(spec).name if rescoring.is_folder(spec) else spec
    params = {"run_dir": str(run_dir), "reward": spec, "name": name}
    try:
        job_id = jobqueue.enqueue(store, JOB_TYPE, f"rescore {run_dir.name} with {label} as {name}"[:120], params,
                                  SimpleNamespace(argv=argv, cwd=str(ROOT), env={}), user=user, small=True)
    except jobqueue.QueueRefused as exc:
        raise ValueError(str(exc)) from None
    return job_id, name
