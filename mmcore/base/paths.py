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


# -- the dashboard's own records are private -------------------------------------------------
# The home folder, its databases (jobs.db, audit.db, evals.db and their -wal/-shm/-journal files),
# settings files, logs/, backups/ and the rest the dashboard writes there are for the OS user running
# it only: folders 0700, files 0600, set where each is created (no process umask, so the trainers'
# outputs in out/ and checkpoints/ keep the usual modes). A folder or file an older version made
# world-readable is tightened when it is opened. docs/SECURITY.md, "Files and code".
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
_SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")


def _tighten(path, mode):
    """chmod `path` to `mode` when it is looser; a file of another user (or gone) is left as it is."""
    try:
        if os.stat(path).st_mode & 0o777 & ~mode:
            os.chmod(path, mode)
    except OSError:
        pass


def private_dir(path):
    """Create `path` (and missing parents, each owner-only too) as a folder only its owner can use; tighten
    it if it is looser. Returns it as a Path."""
    path = Path(path)
    missing = []
    folder = path
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    for folder in reversed(missing):  # the folders made on the way are private too (mkdir's parents are not)
        folder.mkdir(exist_ok=True, mode=PRIVATE_DIR_MODE)
        _tighten(folder, PRIVATE_DIR_MODE)
    _tighten(path, PRIVATE_DIR_MODE)
    return path


def private_file(path):
    """Make sure the file at `path` (if it exists) is owner-only: for files written with open() or
    write_text() (create a `.tmp`, call this, then os.replace)."""
    _tighten(path, PRIVATE_FILE_MODE)
    return Path(path)


def open_private(path, flags=os.O_WRONLY | os.O_CREAT | os.O_APPEND):
    """os.open with mode 0600 for a new file (an existing one is tightened); returns the descriptor."""
    fd = os.open(path, flags, PRIVATE_FILE_MODE)
    _tighten(path, PRIVATE_FILE_MODE)
    return fd


def private_db(path):
    """Before SQLite opens the database at `path`: create its folder owner-only, create the file
    empty with mode 0600 when it does not exist (SQLite reads an empty file as an empty database and
    gives its -wal/-shm/-journal files the database's mode), and tighten an existing one and its side
    files. An existing file is never opened here: closing a descriptor of a database drops the
    process's SQLite locks on it."""
    path = Path(path)
    private_dir(path.parent)
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE))
    except FileExistsError:
        pass
    for name in (str(path), *(f"{path}{side}" for side in _SQLITE_SIDE_FILES)):
        _tighten(name, PRIVATE_FILE_MODE)
    return path
