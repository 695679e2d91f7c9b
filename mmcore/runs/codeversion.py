"""The code a run ran: the git commit of the repository its trainer started in, recorded in its records folder.

The supervisor writes `code.json` (`record`) as it starts the trainer; the diff of runs reads it back
(`read`). Outside a git checkout, or without git, the commit is None: a run is then compared by the rest.
"""
import json
import subprocess
from pathlib import Path

from mmcore.base import regular_file

CODE_FILE = "code.json"


def of(folder):
    """{"commit": the HEAD commit or None, "dirty": whether tracked files differ from it (None when unknown)}."""
    def git(*args):
        try:
            done = subprocess.run(["git", *args], cwd=folder or None, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None
    commit = git("rev-parse", "HEAD")
    if not commit:
        return {"commit": None, "dirty": None}
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def record(run_dir, folder):
    """Write the code version of `folder` into `run_dir`/code.json; returns what was written."""
    version = of(folder)
    path = Path(run_dir)
    path.mkdir(parents=True, exist_ok=True)
    (path / CODE_FILE).write_text(json.dumps(version), encoding="utf-8")
    return version


def read(run_dir):
    """The recorded code version of a run, or {"commit": None, "dirty": None} when none was recorded."""
    try:
        found = json.loads(regular_file.read_text(Path(run_dir) / CODE_FILE))
        return {"commit": found.get("commit"), "dirty": found.get("dirty")}
    except (OSError, ValueError, AttributeError):
        return {"commit": None, "dirty": None}
