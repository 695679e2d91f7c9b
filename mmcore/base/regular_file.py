"""Opening a file the dashboard reads, refusing at once what a read could wait on for ever.

The one way the dashboard opens a file a user named or a run wrote (logs, data files, metrics, settings):
`trainer.rules.regular_file.open_regular` (opened without waiting, refused unless a regular file), its
refusal said in the user's language. `NotRegularFile` is an OSError, so code that already says "cannot
read" for an OSError says it for a FIFO or a device too.
"""
from mmcore.base.i18n import t
from trainer.rules import regular_file as _rules
from trainer.rules.regular_file import NotRegularFile

__all__ = ["NotRegularFile", "open_regular", "read_text"]


def open_regular(path, mode="rb", buffering=-1, encoding=None, errors=None):
    """`open(path, mode)` for reading, when `path` (symlinks followed) is a regular file; NotRegularFile
    otherwise, at once. Missing files raise FileNotFoundError as `open` does."""
    try:
        return _rules.open_regular(path, mode, buffering, encoding, errors)
    except NotRegularFile:
        raise NotRegularFile(path, t("file.not_regular", path=path)) from None


def read_text(path, encoding="utf-8", errors="strict"):
    """The whole text of the regular file `path` (see `open_regular`)."""
    with open_regular(path, "r", encoding=encoding, errors=errors) as f:
        return f.read()
