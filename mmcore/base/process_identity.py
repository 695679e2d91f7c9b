"""Whether a recorded process is still the one that was started: a pid plus its start time.

A pid alone is not enough: after a process exits the kernel may give its pid to an unrelated one.
"""
import psutil

# psutil derives start times from boot time + clock ticks; the same process always gives the same
# value, a reused pid a different one.
START_TIME_TOLERANCE_S = 0.05


def process_problem(pid, start_time):
    """Why process `pid` (started at `start_time`, if known) no longer runs, or None while it does.

    A different start time means the pid was reused by an unrelated process.
    """
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return "exited"
        if start_time is not None and abs(proc.create_time() - start_time) > START_TIME_TOLERANCE_S:
            return "reused"
        return None
    except psutil.NoSuchProcess:
        return "exited"
    except psutil.AccessDenied:
        return None  # it exists; we just may not look at it


def process_matches(pid, start_time):
    """True when process `pid` is alive (not a zombie) and, if `start_time` is given, started then."""
    return pid is not None and process_problem(pid, start_time) is None


def process_start_time(pid):
    """Start time of `pid` as psutil reports it (what `process_matches` compares), or None."""
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None
