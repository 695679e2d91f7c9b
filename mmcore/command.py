"""Stable path for outside scripts: `mmcore.command` is `mmcore.train.commandline`."""
from mmcore.train.commandline import *  # noqa: F401,F403
