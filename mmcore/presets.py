"""Stable path for outside scripts: `mmcore.presets` is `mmcore.train.preset_table`."""
from mmcore.train.preset_table import *  # noqa: F401,F403
