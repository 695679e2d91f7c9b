"""Stable path for outside scripts: `mmcore.rollouts` is `mmcore.runs.rollout_store`."""
from mmcore.runs.rollout_store import *  # noqa: F401,F403
from mmcore.runs.rescore import rescore  # noqa: F401,E402  (a second reward over the stored responses)
