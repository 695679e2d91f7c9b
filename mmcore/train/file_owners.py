"""Jobs own their files: no two active jobs write the same weight or resume file, and a Resume
continues only its own job's state.

`written_files` names the files a job writes: its weights in save_dir and its resume state in
checkpoints/ (names from trainer/rules/specs.py), resolved the way the trainer opens them. The queue
(`mmcore.queue.queueplan`) starts a job only when no active job writes one of them: the later job waits,
told which job (and owner) it waits for. `trainer_env` is what the supervisor tells the trainer
about itself, so the resume state records its writer and a resumed run refuses a state another job
wrote (trainer/rules/ownership.py).
"""
from pathlib import Path

from mmcore.base.paths import TRAINER_DIR
from mmcore.train import commandline
from trainer.rules import ownership as trainer_ownership  # (torch-free)
from trainer.rules import roots as trainer_roots
from trainer.rules import specs

#: The key of a job's params that names the job it resumes (set by `mmcore.queue.launch.resume`).
RESUME_OF = "resume_of"
_MAX_CHAIN = 1000


def written_files(train_type, values, trainer_dir=TRAINER_DIR):
    """The resolved paths of the files a job with these submitted values writes; empty when the values
    are too broken to tell (such a job cannot launch anyway)."""
    try:
        effective = commandline.check(train_type, values, trainer_dir).effective()
        spec = specs.spec(train_type)
        files = [Path(effective["save_dir"]) / f for f in spec.weight_files(effective)]
        files.append(Path(specs.CHECKPOINT_DIR) / spec.resume_file(effective))
    except (KeyError, TypeError, ValueError):
        return set()
    return {trainer_roots.resolved(f, trainer_dir) for f in files}


def resume_chain(store, job):
    """Ids of the jobs whose state `job` may continue: the job it resumes, that one's, and so on."""
    chain, seen = [], {job.id}
    current = job
    while len(chain) < _MAX_CHAIN:
        raw = (current.params or {}).get(RESUME_OF)
        try:
            parent = int(raw)
        except (TypeError, ValueError):
            break
        if parent in seen:
            break
        chain.append(parent)
        seen.add(parent)
        current = store.get(parent)
        if current is None:
            break
    return chain


def trainer_env(store, job):
    """Environment for the trainer of `job`: its id, and for a Resume the jobs whose state it continues."""
    env = {trainer_ownership.JOB_ENV: str(job.id)}
    chain = resume_chain(store, job)
    if chain:
        env[trainer_ownership.RESUME_OF_ENV] = ",".join(map(str, chain))
    return env
