"""Opening a file for reading, refusing at once what a read could wait on for ever.

A FIFO named like a log, a data file or a metadata file, a device or a socket would block `open()` (a
FIFO without a writer) or its reads (a FIFO, a terminal). `open_regular` opens without waiting
(O_NONBLOCK), asks the open descriptor what it is (no gap between the check and the read) and refuses
anything but a regular file with `NotRegularFile`, an OSError, so code that already handles "cannot
read" for an OSError handles these too. The dashboard's wrapper (`mmcore.base.regular_file`) says the
refusal in the user's language; the trainers and the data formats use this one directly.
Torch-free and free of the dashboard: imported by the trainers, `dataset` and the dashboard.
"""
import errno
import os
import stat


class NotRegularFile(OSError):
    """`path` is a FIFO, a device or a socket: it is not read. str() is the message to show."""

    def __init__(self, path, message=None):
        super().__init__(message or f"{path} is not a regular file (a pipe or a device): it is not read")
        self.path = path

    def __str__(self):
        return self.args[0]


def open_regular(path, mode="rb", buffering=-1, encoding=None, errors=None):
    """`open(path, mode)` for reading when `path` (symlinks followed) is a regular file; NotRegularFile
    otherwise, at once. A missing file raises FileNotFoundError and a folder IsADirectoryError, as `open` does."""
    if any(c in mode for c in "wax+"):
        raise ValueError(f"open_regular reads only, not mode {mode!r}")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        kind = os.fstat(fd).st_mode
        if stat.S_ISDIR(kind):  # os.open opens a folder for reading, where open() refuses it
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(kind):
            raise NotRegularFile(path)
        os.set_blocking(fd, True)  # a regular file's reads never wait; later reads behave as open()'s
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, mode, buffering, encoding=encoding, errors=errors)  # closes `fd` itself if it fails

