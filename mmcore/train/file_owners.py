"""Jobs own their files: no two active jobs write the same weight or resume file, a Resume
continues only its own job's state, and a launch does not write over another user's files.

`written_files` names the files a job writes: its weights in save_dir and its resume state in
checkpoints/ (names from trainer/rules/specs.py), resolved the way the trainer opens them. The queue
(`mmcore.queue.queueplan`) starts a job only when no active job writes one of them: the later job waits,
told which job (and owner) it waits for. `trainer_env` is what the supervisor tells the trainer
about itself, so the resume state records its writer and a resumed run refuses a state another job
wrote (trainer/rules/ownership.py).

`others_files` is what a launch may not touch unless an admin asks: files whose metadata (beside each
weight, LoRA and resume file, `trainer.rules.weight_meta`) names another user's job of this job store.
Every launch passes through it (`mmcore.queue.jobqueue.enqueue`: the Train page, the API, the CLI,
pipelines, resumes, Slurm); and since a job may wait in the queue behind another user's job writing the
same files, the scheduler asks again when it starts one (`taken_since`).
"""
import os
from dataclasses import dataclass
from pathlib import Path

from mmcore.access import roles
from mmcore.base.paths import TRAINER_DIR
from mmcore.train import commandline
from trainer.rules import ownership as trainer_ownership  # (torch-free)
from trainer.rules import roots as trainer_roots
from trainer.rules import specs, weight_meta

#: The key of a job's params that names the job it resumes (set by `mmcore.queue.launch.resume`).
RESUME_OF = "resume_of"
_MAX_CHAIN = 1000


@dataclass(frozen=True)
class FileOwner:
    """A file and the user (and job) it belongs to."""
    path: Path
    user: str
    job: int | None
    saved_at: float | None = None


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


def _same(a, b):
    return (a or "").strip().lower() == (b or "").strip().lower()


def owner_of(path, store_path):
    """Who wrote the file at `path` as a job of the store at `store_path`, from its metadata; None when
    it has none, names no user, or was written by another store's job (whose ids mean nothing here)."""
    meta = weight_meta.read_meta(str(path))
    if not meta or not meta.get("user") or not meta.get("store"):
        return None
    if os.path.realpath(str(meta["store"])) != os.path.realpath(str(store_path)):
        return None
    saved_at = meta.get("saved_at")
    return FileOwner(Path(path), str(meta["user"]), meta.get("job_id"),
                     saved_at if isinstance(saved_at, (int, float)) else None)


def others_files(store, train_type, values, user, trainer_dir=TRAINER_DIR):
    """The files a job of `user` with these values would write that another user's job wrote, by path
    (no user: the OS user, whom the job store records for such a job)."""
    user = user or roles.os_user()
    files = written_files(train_type, values, trainer_dir)
    return sorted((owner for path in files if (owner := owner_of(path, store.path)) and not _same(owner.user, user)),
                  key=lambda owner: owner.path)


def taken_since(store, job):
    """The files `job` writes that another user's job wrote after `job` was queued (while it waited for
    them): its launch could not see them, so it may not start over them."""
    return [owner for owner in others_files(store, job.train_type, job.params, job.user, job.cwd or TRAINER_DIR)
            if owner.saved_at is not None and owner.saved_at > (job.created_at or 0)]


def trainer_env(store, job):
    """Environment for the trainer of `job`: its id, owner and store (recorded in every file it writes),
    and for a Resume the jobs whose state it continues."""
    env = {trainer_ownership.JOB_ENV: str(job.id), trainer_ownership.USER_ENV: job.user or "",
           trainer_ownership.STORE_ENV: store.path}
    chain = resume_chain(store, job)
    if chain:
        env[trainer_ownership.RESUME_OF_ENV] = ",".join(map(str, chain))
    return env
