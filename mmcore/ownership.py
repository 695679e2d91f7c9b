"""Jobs own their files: no two active jobs write the same weight or resume file, and a Resume
continues only its own job's state.

`conflicts` is checked at every launch (Train page, Resume, API): the files a job writes are its
weights in save_dir and its resume state in checkpoints/ (names from trainer/specs.py), resolved the
way the trainer opens them. `trainer_env` is what the supervisor tells the trainer about itself, so
the resume state records its writer and a resumed run refuses a state another job wrote
(trainer/ownership.py).
"""
from pathlib import Path

from mmcore import command
from mmcore.paths import TRAINER_DIR, ensure_root_on_path
from mmcore.store import ACTIVE_STATUSES

ensure_root_on_path()
from trainer import ownership as trainer_ownership  # noqa: E402  (torch-free)
from trainer import roots as trainer_roots  # noqa: E402
from trainer import specs  # noqa: E402

#: The key of a job's params that names the job it resumes (set by `mmcore.launch.resume`).
RESUME_OF = "resume_of"
_MAX_CHAIN = 1000


def written_files(train_type, values, trainer_dir=TRAINER_DIR):
    """The resolved paths of the files a job with these submitted values writes; empty when the values
    are too broken to tell (such a job cannot launch anyway)."""
    try:
        effective = command.check(train_type, values, trainer_dir).effective()
        spec = specs.spec(train_type)
        files = [Path(effective["save_dir"]) / f for f in spec.weight_files(effective)]
        files.append(Path(specs.CHECKPOINT_DIR) / spec.resume_file(effective))
    except (KeyError, TypeError, ValueError):
        return set()
    return {trainer_roots.resolved(f, trainer_dir) for f in files}


def conflicts(store, train_type, values, trainer_dir=TRAINER_DIR):
    """One sentence per active job that writes a file this launch would write."""
    mine = written_files(train_type, values, trainer_dir)
    found = []
    for job in store.list(status=list(ACTIVE_STATUSES), limit=None) if mine else []:
        same = mine & written_files(job.train_type, job.params, job.cwd or trainer_dir)
        if same:
            found.append(f"Job {job.id} (owner {job.user or 'unknown'}, {job.status}) is writing "
                         f"{', '.join(str(p) for p in sorted(same))}: choose another output name "
                         f"(save_weight / lora_name) or save folder, or wait until job {job.id} has ended.")
    return found


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
