"""Launch an evaluation as a job: checkpoints over an RLAIF/SFT file with reference answers.

The evaluation's row (checkpoints, data file, settings) goes to `evals.db` beside the job store; the
job, `python -m mmcore.workers.eval_worker --eval_id N --db ...`, goes through the same queue and supervisor as
training jobs, so it waits for a free slot, shows on Jobs with its log, can be stopped, and survives a
dashboard restart.
"""
import sys
from pathlib import Path
from types import SimpleNamespace

from mmcore.base.paths import ROOT
from mmcore.models.evalstore import EvalStore
from mmcore.queue import jobqueue

JOB_TYPE = "evaluate"


def eval_store_for(store):
    """The evaluation database beside `store`'s job database."""
    return EvalStore(Path(store.path).parent / "evals.db")


def weight_specs(targets, entries):
    """What the evaluation job needs of each target: files, tokenizer, and its run and step for charts."""
    by_path = {e.path: e for e in entries}
    specs = []
    for t in targets:
        entry = by_path.get(t.lora or t.weight)
        specs.append({"weight": t.weight, "lora": t.lora, "tokenizer_path": t.tokenizer_path, "label": t.label,
                      "train_type": t.train_type, "run_job_id": entry.job_id if entry else None,
                      "step": entry.step if entry else None})
    return specs


def launch(store, targets, entries, data_path, settings, user=None):
    """Start an evaluation job of `targets` (ChatTargets); returns (job id, evaluation id)."""
    if not targets:
        raise ValueError("Choose at least one checkpoint to evaluate.")
    evals = eval_store_for(store)
    eval_id = evals.create(data_path, settings, weight_specs(targets, entries))
    argv = [sys.executable, "-m", "mmcore.workers.eval_worker", "--eval_id", str(eval_id), "--db", evals.path]
    name = f"eval {eval_id}: " + ", ".join(Path(t.lora or t.weight).name for t in targets)
    params = {"eval_id": str(eval_id), "data_path": str(data_path),
              **{k: str(v) for k, v in settings.items() if v is not None}}
    try:
        job_id = jobqueue.enqueue(store, JOB_TYPE, name[:120], params, SimpleNamespace(argv=argv, cwd=str(ROOT), env={}),
                                  user=user, small=True)
    except jobqueue.QueueRefused as exc:
        raise ValueError(str(exc)) from None
    evals.set_job(eval_id, job_id)
    return job_id, eval_id
