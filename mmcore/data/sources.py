"""Which data files the Data page and `data check` may open, and the checks before opening one.

A file may be read when it lies in the read roots the trainers enforce (`trainer/rules/roots.py`,
through `mmcore.access.dashboard_roots`): what the page shows is then what a job may train on.
Every refusal is a `DataFileError` with a sentence for the user, never a traceback: a path outside
the roots, a missing or unreadable file, a folder, a 0-byte file, a binary file.
"""
import os
from pathlib import Path

from mmcore.access import dashboard_roots
from mmcore.base.i18n import t
from mmcore.base.paths import ROOT, TRAINER_DIR, default_home
from mmcore.base.regular_file import NotRegularFile, open_regular
from mmcore.logs import logfiles
from trainer.rules.records import RECORDS_SUBDIR

#: Uploads go under the records folder: a write root, so jobs may read them and the roots need no change.
#: Each user's go to a folder of their own (`upload_folder`), within the quota they share with their log
#: uploads (`mmcore.logs.logfiles.UPLOAD_QUOTA_MB`), and go after UPLOAD_KEEP_S (longer than a log's: a
#: queued job may still need the file).
UPLOADS_SUBDIR = "data_uploads"
MAX_UPLOAD_BYTES = 200 * 2**20
UPLOAD_KEEP_S = float(os.environ.get("MINIMIND_DATA_UPLOAD_KEEP_H", 7 * 24)) * 3600
SUFFIXES = (".jsonl", ".json")
LIST_LIMIT = 500  # files listed per root, and folders looked into: a huge tree must not slow the page
WALK_LIMIT = 2000
SNIFF_BYTES = 64 * 1024


class DataFileError(ValueError):
    """A data file that cannot be opened; the message says why and what to do."""


def uploads_dir(home=None):
    return Path(home or default_home()) / RECORDS_SUBDIR / UPLOADS_SUBDIR


def upload_folder(home, user):
    """The folder of one user's data uploads: `<uploads_dir>/<name>-<digest>`, as for log uploads."""
    return uploads_dir(home) / logfiles.folder_name(user)


def _in(path, folders):
    path = Path(path).resolve()
    return any(path == f or f in path.parents for f in (Path(f).resolve() for f in folders))


def roots(home=None):
    """The read roots in force (write roots may be read too)."""
    current = dashboard_roots.current(home)
    return tuple(dict.fromkeys(current.read + current.write))


def candidates(home=None, upload_folders=None):
    """The jsonl files a user may pick: dataset/ first, then the other roots and the uploads, sorted. Of the
    uploads, only those in `upload_folders` (the viewer's own; None: all, for an admin)."""
    found = []
    seen = set()
    records = (Path(home or default_home()) / RECORDS_SUBDIR).resolve()
    # The records folder holds the runs' own jsonl streams: of it, only the uploads are data files.
    listed = [r for r in roots(home) if r != records] + [uploads_dir(home).resolve()]
    for root in (ROOT / "dataset", *listed):
        if not root.is_dir():
            continue
        count = 0
        for walked, (dirpath, dirnames, filenames) in enumerate(os.walk(root)):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "__")))
            if len(Path(dirpath).relative_to(root).parts) >= 3 or walked > WALK_LIMIT:
                dirnames[:] = []
            for name in sorted(filenames):
                path = Path(dirpath) / name
                if upload_folders is not None and _in(path, [uploads_dir(home)]) and not _in(path, upload_folders):
                    continue  # another user's upload: not even its name is shown
                if name.endswith(".jsonl") and path not in seen and count < LIST_LIMIT:
                    seen.add(path)
                    found.append(path.resolve())
                    count += 1
    return found


def display(path):
    """A path as the page lists it: relative to the repository when inside it."""
    path = Path(path)
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def trainer_value(path):
    """The `data_path` value for the Train form: as the trainer (working directory trainer/) sees it."""
    path = Path(path).resolve()
    try:
        path.relative_to(ROOT)
    except ValueError:
        return str(path)
    return os.path.relpath(path, TRAINER_DIR)


def resolve(value, base=None):
    """`value` (absolute, or relative to `base`: the working directory by default) resolved."""
    return (Path(base or os.getcwd()) / os.path.expanduser(str(value))).resolve()


def check(value, home=None, base=None, upload_folders=None):
    """The resolved path of a data file the user may open, or DataFileError saying why not. Of the uploads,
    only those in `upload_folders` may be opened (None: all)."""
    if not str(value).strip():
        raise DataFileError(t("data.err.no_path"))
    path = resolve(value, base)
    allowed = roots(home)
    if not any(path == r or r in path.parents for r in allowed):
        raise DataFileError(t("data.err.outside", path=value, roots=", ".join(str(r) for r in allowed)))
    if upload_folders is not None and _in(path, [uploads_dir(home)]) and not _in(path, upload_folders):
        raise DataFileError(t("data.err.private"))  # whether it exists is not said either
    if not path.exists():
        raise DataFileError(t("data.err.missing", path=path))
    if path.is_dir():
        raise DataFileError(t("data.err.folder", path=path))
    try:
        with open_regular(path) as f:  # a FIFO or a device is refused, never waited on
            head = f.read(SNIFF_BYTES)
    except NotRegularFile as exc:
        raise DataFileError(str(exc)) from None
    except OSError as exc:
        raise DataFileError(t("data.err.unreadable", path=path, error=exc.strerror or exc)) from None
    if not head:
        raise DataFileError(t("data.err.empty", path=path))
    if b"\0" in head or _mostly_binary(head):
        raise DataFileError(t("data.err.binary", path=path))
    return path


def _mostly_binary(head):
    """True when the start of a file is not text: not UTF-8 beyond a cut last character."""
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start < len(head) - 4  # a multi-byte character cut by the sniff's end is still text
    return False


def _plain(name, fallback):
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in str(name).lstrip("."))[:100] or fallback


def save_upload(data, name, home=None, user=None, counted=()):
    """Store an uploaded data file (bytes, or a binary file: streamed to disk a block at a time) in `user`'s
    uploads folder under its plain name (the user's earlier file of that name is replaced); returns its path.
    DataFileError when it is too large, not a .jsonl/.json file, or over the user's quota (shared with
    their uploads in the `counted` folders: their logs)."""
    safe = _plain(os.path.basename(str(name)), "upload.jsonl")
    if not safe.endswith(SUFFIXES):
        raise DataFileError(t("data.err.suffix"))
    try:
        return logfiles.save_upload(data, name, upload_folder(home, user or "user"), max_mb=MAX_UPLOAD_BYTES / 2**20,
                                    counted=counted, file_name=safe, keep_s=UPLOAD_KEEP_S,
                                    quota_key="data.err.over_quota")
    except logfiles.UploadTooLarge as exc:
        if exc.args and getattr(exc.args[0], "key", "") == "data.err.over_quota":
            raise DataFileError(str(exc)) from None
        raise DataFileError(t("data.err.too_large", mb=MAX_UPLOAD_BYTES // 2**20)) from None
