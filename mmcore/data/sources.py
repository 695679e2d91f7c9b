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
from mmcore.base.paths import ROOT, TRAINER_DIR, default_home, private_dir
from trainer.rules.records import RECORDS_SUBDIR

#: Uploads go under the records folder: a write root, so jobs may read them and the roots need no change.
UPLOADS_SUBDIR = "data_uploads"
MAX_UPLOAD_BYTES = 200 * 2**20
SUFFIXES = (".jsonl", ".json")
LIST_LIMIT = 500  # files listed per root, and folders looked into: a huge tree must not slow the page
WALK_LIMIT = 2000
SNIFF_BYTES = 64 * 1024


class DataFileError(ValueError):
    """A data file that cannot be opened; the message says why and what to do."""


def uploads_dir(home=None):
    return Path(home or default_home()) / RECORDS_SUBDIR / UPLOADS_SUBDIR


def roots(home=None):
    """The read roots in force (write roots may be read too)."""
    current = dashboard_roots.current(home)
    return tuple(dict.fromkeys(current.read + current.write))


def candidates(home=None):
    """The jsonl files a user may pick: dataset/ first, then the other roots and the uploads, sorted."""
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


def check(value, home=None, base=None):
    """The resolved path of a data file the user may open, or DataFileError saying why not."""
    if not str(value).strip():
        raise DataFileError(t("data.err.no_path"))
    path = resolve(value, base)
    allowed = roots(home)
    if not any(path == r or r in path.parents for r in allowed):
        raise DataFileError(t("data.err.outside", path=value, roots=", ".join(str(r) for r in allowed)))
    if not path.exists():
        raise DataFileError(t("data.err.missing", path=path))
    if path.is_dir():
        raise DataFileError(t("data.err.folder", path=path))
    try:
        with open(path, "rb") as f:
            head = f.read(SNIFF_BYTES)
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


def save_upload(data, name, home=None, user=None):
    """Store an uploaded data file (bytes) in the uploads folder (`user`'s own folder in it); returns its
    path. DataFileError when it is too large or not a .jsonl/.json file. Names are reduced to plain ones."""
    if len(data) > MAX_UPLOAD_BYTES:
        raise DataFileError(t("data.err.too_large", mb=MAX_UPLOAD_BYTES // 2**20))
    safe = _plain(os.path.basename(str(name)), "upload.jsonl")
    if not safe.endswith(SUFFIXES):
        raise DataFileError(t("data.err.suffix"))
    folder = private_dir(uploads_dir(home) / _plain(user, "user") if user else uploads_dir(home))
    path = folder / safe
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
    return path
