"""Where the repository and its training scripts are, independent of the working directory."""
import os
from pathlib import Path

#: The repository root (the folder holding mmcore/, trainer/, model/, dataset/).
ROOT = Path(__file__).resolve().parents[2]

#: Jobs run with this working directory, so the scripts' relative defaults (../out, ../dataset/...)
#: resolve the way upstream MiniMind users expect.
TRAINER_DIR = ROOT / "trainer"



def python_path(environ=None):
    """PYTHONPATH for a child process: this repository first, so a trainer started in trainer/ imports
    this checkout's `trainer`, `model` and `dataset` packages whether or not the project is installed."""
    environ = os.environ if environ is None else environ
    return os.pathsep.join([str(ROOT), *[p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p]])


#: Environment variable naming the dashboard's home (jobs.db, logs/, uploads/); default <repo>/runs.
HOME_ENV = "MINIMIND_DASHBOARD_HOME"
DB_NAME = "jobs.db"


def default_home():
    """The folder holding jobs.db and logs/: `$MINIMIND_DASHBOARD_HOME`, else `<repo>/runs`."""
    return Path(os.environ.get(HOME_ENV) or ROOT / "runs")
