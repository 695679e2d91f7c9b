"""Log files for the pages: the end of a log as a terminal shows it, saved uploads, and why a
log has no chart."""
import hashlib
import os
import re
import tempfile
import time
from pathlib import Path

from mmcore.base import paths
from mmcore.base.i18n import MessageError, message, t
from mmcore.base.regular_file import open_regular
from mmcore.logs.logtext import ANSI_RE, decode, visible


def explain(parser, label=None):
    """Why a log has no chart, for a page to show: (level, message), level "info" or "warning";
    None when it has progress records. `parser` has been updated; `label` names the log."""
    name = label or parser.path
    kind = parser.kind
    if kind == "progress":
        return None
    if kind == "missing":
        return "warning", t("logfile.missing", name=name, path=parser.path)
    if kind == "unreadable":
        return "warning", t("logfile.unreadable", name=name, error=parser.unreadable)
    if kind == "empty":
        return "info", t("logfile.empty", name=name)
    if kind == "unknown":
        return "warning", t("logfile.unknown", name=name)
    finished = parser.header.get("finished")
    if finished:
        return "info", t("logfile.ended_early", name=name, finished=finished)
    return "info", t("logfile.no_progress_yet", name=name)


def tail(path, n=200, block=64 << 10):
    """The last `n` lines of a file as a terminal shows them (ANSI codes removed, `\\r` rewrites
    resolved), reading only the end of the file. A missing file raises FileNotFoundError, one that is not a
    regular file NotRegularFile (an OSError)."""
    if n <= 0:
        return []
    with open_regular(path) as f:
        end = f.seek(0, os.SEEK_END)
        data = b""
        start = end
        # One newline more than needed, so the first kept line is complete.
        while start > 0 and data.count(b"\n") <= n:
            size = min(block, start)
            start -= size
            f.seek(start)
            data = f.read(size) + data
    if b"\x1b" in data:
        data = ANSI_RE.sub(b"", data)
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the file ends with a newline
    if start > 0:
        lines = lines[1:]  # cut mid-line
    return [decode(visible(line)) for line in lines[-n:]]


#: Largest upload kept, in MB (also Streamlit's server.maxUploadSize in .streamlit/config.toml, which
#: stops a bigger file before it reaches the server's memory), how much one user's uploads may hold on
#: disk together, and how long an upload is kept.
UPLOAD_MAX_MB = float(os.environ.get("MINIMIND_UPLOAD_MAX_MB", 50))
UPLOAD_QUOTA_MB = float(os.environ.get("MINIMIND_UPLOAD_QUOTA_MB", 200))
UPLOAD_KEEP_S = float(os.environ.get("MINIMIND_UPLOAD_KEEP_H", 24)) * 3600
_CHUNK = 1024 * 1024


class UploadTooLarge(MessageError):
    """An upload over UPLOAD_MAX_MB, or over what its user's quota has left; the message says the limit,
    in the language of whoever reads it."""


def folder_name(user):
    """The name of one identity's uploads folder: `<name>-<digest>`, a plain name for any identity that no
    other identity maps to (the digest is of the whole identity: a+b@x and a_b@x differ)."""
    name = re.sub(r"[^\w.-]+", "_", str(user))[:40] or "user"
    return f"{name}-{hashlib.sha256(str(user).encode()).hexdigest()[:8]}"


def upload_folder(home, user):
    """The folder of one user's uploads: `<home>/uploads/<name>-<digest>` (`folder_name`)."""
    return Path(home) / "uploads" / folder_name(user)


def _folder_bytes(folder):
    total = 0
    for path in Path(folder).glob("*"):
        try:
            total += path.stat().st_size if path.is_file() else 0
        except OSError:
            continue
    return total


def prune_uploads(folder, keep_s=None, now=None):
    """Delete uploads older than `keep_s` seconds; returns how many went."""
    keep_s = UPLOAD_KEEP_S if keep_s is None else keep_s
    now = time.time() if now is None else now
    gone = 0
    for path in Path(folder).glob("*"):
        try:
            if path.is_file() and now - path.stat().st_mtime > keep_s:
                path.unlink()
                gone += 1
        except OSError:
            continue
    return gone


def _size(data):
    if isinstance(data, (bytes, bytearray, memoryview)):
        return len(data)
    here = data.tell()
    size = data.seek(0, os.SEEK_END)
    data.seek(here)
    return size


def save_upload(data, name, folder=None, max_mb=None, quota_mb=None, counted=(), file_name=None, keep_s=None,
                quota_key="logs.upload_over_quota"):
    """Write an uploaded log (bytes, or a binary file such as Streamlit's UploadedFile, read a block at a
    time: no whole copy of it is made) to a file named by its hash, so the same upload is saved once, and
    return its path; the Logs page then reads it like any other log. Uploads over `max_mb`, or over what
    `quota_mb` (the folder's total with the `counted` folders': one user's uploads) has left, raise
    UploadTooLarge; uploads older than `keep_s` (default UPLOAD_KEEP_S) are removed on the way.
    `file_name`: keep it under this plain name instead (a file of that name is replaced)."""
    max_mb = UPLOAD_MAX_MB if max_mb is None else max_mb
    quota_mb = UPLOAD_QUOTA_MB if quota_mb is None else quota_mb
    size = _size(data)
    if size > max_mb * 1024 * 1024:
        raise UploadTooLarge(message("logs.upload_too_large", name=name, mb=f"{size / 1024 / 1024:.0f}",
                                     max=f"{max_mb:g}", env="MINIMIND_UPLOAD_MAX_MB"))
    folder = Path(folder) if folder is not None else Path(tempfile.gettempdir()) / "minimind-dashboard-uploads"
    paths.private_dir(folder)
    prune_uploads(folder, keep_s)
    used = _folder_bytes(folder) + sum(_folder_bytes(other) for other in counted if Path(other).is_dir())
    safe = re.sub(r"[^\w.-]+", "_", Path(name).name)[:80] or "upload.log"
    tmp = folder / f".{safe}.{os.getpid()}.tmp"
    digest = hashlib.sha256()
    view = memoryview(data) if isinstance(data, (bytes, bytearray, memoryview)) else None
    try:
        with open(paths.open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "wb") as out:
            if view is None:
                data.seek(0)
            for start in range(0, size, _CHUNK):
                chunk = view[start:start + _CHUNK] if view is not None else data.read(_CHUNK)
                digest.update(chunk)
                out.write(chunk)
        path = folder / (file_name or f"{digest.hexdigest()[:16]}-{safe}")
        if path.exists() and file_name is None:
            return path  # the same upload again: it costs nothing more
        replaced = path.stat().st_size if path.is_file() else 0  # a file of the same name goes: it counts no more
        if used - replaced + size > quota_mb * 1024 * 1024:
            raise UploadTooLarge(message(quota_key, name=name, used=f"{used / 1024 / 1024:.0f}",
                                         max=f"{quota_mb:g}", env="MINIMIND_UPLOAD_QUOTA_MB"))
        os.replace(tmp, path)
        return path
    finally:
        tmp.unlink(missing_ok=True)
