"""Stable path for outside scripts: `mmcore.registry` is `mmcore.train.train_types`."""
from mmcore.train.train_types import *  # noqa: F401,F403
