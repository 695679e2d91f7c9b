"""Whether a failure means the disk is full, however it was worded.

SQLite reports a full disk as "database or disk is full", but on some file systems (a full tmpfs among
them) as "disk I/O error"; Python as errno ENOSPC. `no_space` takes all of them, looking at the free space
of the file's file system (`shutil.disk_usage`) when the words alone do not say. A supervisor that
cannot write a job's end for want of space waits for room, and a job whose supervisor is gone is
recorded "failed: no space left on device" when its log says so (`log_says_no_space`), not "lost".
"""
import errno
import os
import shutil

#: What a trainer (Python, torch, SQLite) prints when the disk is full.
NO_SPACE_SIGNS = ("No space left on device", "[Errno 28]", "database or disk is full")
#: Less free space than this on the file system of a file that gave an I/O error: the disk is full.
LOW_SPACE_BYTES = 1024 * 1024


def free_bytes(path):
    """Free bytes on the file system holding `path` (its nearest existing folder), or None."""
    folder = os.path.abspath(path)
    while folder and not os.path.isdir(folder):
        folder = os.path.dirname(folder)
    try:
        return shutil.disk_usage(folder or "/").free
    except OSError:
        return None


def no_space(exc, path=None):
    """True when `exc` (an OSError or a sqlite3 error about the file `path`) means the disk is full."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(exc)
    if any(sign in text for sign in NO_SPACE_SIGNS):
        return True
    if "disk I/O error" in text and path is not None:
        free = free_bytes(path)
        return free is not None and free < LOW_SPACE_BYTES
    return False


def log_says_no_space(log_path, tail_bytes=64 * 1024):
    """Whether the end of a job's log says the disk filled up."""
    try:
        with open(log_path, "rb") as f:
            f.seek(max(0, os.path.getsize(log_path) - tail_bytes))
            tail = f.read().decode("utf-8", "replace")
    except (OSError, TypeError):
        return False
    return any(sign in tail for sign in NO_SPACE_SIGNS)
