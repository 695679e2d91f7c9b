"""Where the repository and its training scripts are, independent of the working directory."""
import sys
from pathlib import Path

#: The repository root (the folder holding mmcore/, trainer/, model/, dataset/).
ROOT = Path(__file__).resolve().parent.parent

#: Jobs run with this working directory, so the scripts' relative defaults (../out, ../dataset/...)
#: resolve the way upstream MiniMind users expect.
TRAINER_DIR = ROOT / "trainer"


def ensure_root_on_path():
    """Make `trainer` and `dataset` importable as packages, however the dashboard was started."""
    root = str(ROOT)
    if root not in sys.path:
        sys.path.insert(0, root)
