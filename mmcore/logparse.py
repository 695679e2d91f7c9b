"""Stable path for outside scripts: `mmcore.logparse` is `mmcore.logs.log_parser`."""
from mmcore.logs.log_parser import *  # noqa: F401,F403
