"""Where the repository and its training scripts are, independent of the working directory."""
import os
from pathlib import Path

#: The repository root (the folder holding mmcore/, trainer/, model/, dataset/).
ROOT = Path(__file__).resolve().parents[2]

#: Jobs run with this working directory, so the scripts' relative defaults (../out, ../dataset/...)
#: resolve the way upstream MiniMind users expect.
TRAINER_DIR = ROOT / "trainer"



def python_path(cwd=None, environ=None):
    """PYTHONPATH for a job started in `cwd`: the checkout that holds that trainer/ folder first (this
    repository by default), so its trainer imports that checkout's `trainer`, `model` and `dataset`
    packages, whether or not the project is installed, and whichever checkout is installed."""
    environ = os.environ if environ is None else environ
    root = ROOT
    if cwd is not None and (Path(cwd).parent / "trainer" / "__init__.py").is_file():
        root = Path(cwd).parent
    return os.pathsep.join([str(root), *[p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p]])


#: Environment variable naming the dashboard's home (jobs.db, logs/, uploads/); default <repo>/runs.
HOME_ENV = "MINIMIND_DASHBOARD_HOME"
DB_NAME = "jobs.db"


def default_home():
    """The folder holding jobs.db and logs/: `$MINIMIND_DASHBOARD_HOME`, else `<repo>/runs`."""
    return Path(os.environ.get(HOME_ENV) or ROOT / "runs")
