"""Where the repository and its training scripts are, independent of the working directory."""
import os
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


#: Environment variable naming the dashboard's home (jobs.db, logs/, uploads/); default <repo>/runs.
HOME_ENV = "MINIMIND_DASHBOARD_HOME"
DB_NAME = "jobs.db"


def default_home():
    """The folder holding jobs.db and logs/: `$MINIMIND_DASHBOARD_HOME`, else `<repo>/runs`."""
    return Path(os.environ.get(HOME_ENV) or ROOT / "runs")
