"""The dashboard's core: importable without torch or transformers.

Importing it puts the repository root on `sys.path`, so `trainer.args`, `trainer.specs` and
`dataset.formats` (torch-free by design) import however the dashboard was started.
"""
from mmcore.paths import ensure_root_on_path

ensure_root_on_path()
