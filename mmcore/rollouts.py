"""Stable path for outside scripts: `mmcore.rollouts` is `mmcore.runs.rollout_store`."""
from mmcore.runs.rollout_store import *  # noqa: F401,F403
