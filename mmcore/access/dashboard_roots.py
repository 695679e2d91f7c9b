"""The folders the dashboard's jobs may read and write (rules in trainer/rules/roots.py), for this dashboard.

The dashboard's records folder (`<home>/records`, where jobs keep their metrics streams) is a write
root beside the repository's out/ and checkpoints/. `current()` is what the launch checks use, and
its `env()` is what the supervisor hands to the trainers so that they enforce the same roots.
"""
from pathlib import Path

from trainer.rules import job_paths
from trainer.rules import roots as trainer_roots  # (torch-free)
from trainer.rules.records import RECORDS_SUBDIR


def current(home=None):
    """The roots in force for the dashboard whose home is `home` (default: `store.default_home()`)."""
    if home is None:
        from mmcore.base.paths import default_home  # here: the store need not be loaded to check a form
        home = default_home()
    return trainer_roots.configured(Path(home) / RECORDS_SUBDIR)


def path_errors(train_type, values, home=None, base=trainer_roots.TRAINER_DIR):
    """{option: message} for path options of typed `values` outside the roots (see trainer/rules/roots.py);
    relative paths start in `base`, the job's working directory."""
    return job_paths.path_errors(train_type, values, current(home), base)
