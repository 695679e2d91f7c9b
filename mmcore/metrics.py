"""Stable path for outside scripts: `mmcore.metrics` is `mmcore.runs.metric_stream`."""
from mmcore.runs.metric_stream import *  # noqa: F401,F403
