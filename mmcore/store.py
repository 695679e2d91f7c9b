"""Stable path for outside scripts: `mmcore.store` is `mmcore.jobs.jobstore`."""
from mmcore.jobs.jobstore import *  # noqa: F401,F403
