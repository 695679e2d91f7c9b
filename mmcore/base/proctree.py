"""Every process a job started, wherever it went: the supervisor's view of its trainer's process tree.

torchrun starts its workers in process groups of their own, and a process whose parent died is
normally re-parented to init, out of sight. So the supervisor makes itself a child subreaper
(`prctl(PR_SET_CHILD_SUBREAPER)`, Linux): orphans of the job are re-parented to the supervisor, and
`descendants()` (psutil, recursive) always sees every process of the job, whatever its group. A stop
signals all of them; the job's end is recorded only once none is left.

The queue's scheduler a supervisor restarts (its heartbeat, `mmcore.jobs.runner`) is a child of the
supervisor too, and so are the supervisors of other jobs that scheduler starts (re-parented here when it
exits). They are the dashboard's, not the job's: `descendants()` leaves them and their trees out.
"""
import ctypes
import os
import signal
import sys

import psutil

PR_SET_CHILD_SUBREAPER = 36
#: Modules whose processes (`python -m MODULE ...`) belong to the dashboard, never to a job.
DASHBOARD_MODULES = ("mmcore.queue.scheduler", "mmcore.jobs.runner")


def become_subreaper():
    """Make this process the reaper of its orphaned descendants; False where that is not possible."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _dashboard_process(proc):
    try:
        argv = proc.cmdline()
    except psutil.Error:
        return False
    return len(argv) >= 3 and argv[1] == "-m" and argv[2] in DASHBOARD_MODULES


def descendants():
    """Every live (non-zombie) process below this one, but the dashboard's own (a scheduler, other jobs'
    supervisors) and what runs below them."""
    me = os.getpid()
    try:
        procs = psutil.Process().children(recursive=True)
    except psutil.Error:
        return []
    parents = {}
    for p in procs:
        try:
            parents[p.pid] = p.ppid()
        except psutil.Error:
            continue
    theirs = {p.pid for p in procs if _dashboard_process(p)}

    def the_jobs(pid):
        while pid in parents and pid != me:
            if pid in theirs:
                return False
            pid = parents[pid]
        return True

    alive = []
    for p in procs:
        try:
            if the_jobs(p.pid) and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(p)
        except psutil.Error:
            continue
    return alive


def signal_all(sig, procs=None):
    """Send `sig` to every descendant (or to `procs`); returns how many were signalled."""
    sent = 0
    for p in descendants() if procs is None else procs:
        try:
            p.send_signal(sig)
            sent += 1
        except psutil.Error:
            continue
    return sent


def reap_orphans(keep_pid):
    """Collect the exit status of exited direct children other than `keep_pid` (the trainer, whose
    status its Popen collects): orphans re-parented here would otherwise stay zombies."""
    try:
        children = psutil.Process().children()
    except psutil.Error:
        return
    for p in children:
        if p.pid == keep_pid:
            continue
        try:
            if p.status() == psutil.STATUS_ZOMBIE:
                os.waitpid(p.pid, os.WNOHANG)
        except (psutil.Error, ChildProcessError, OSError):
            continue


def describe(procs):
    """"pid name" of processes, for the log."""
    names = []
    for p in procs:
        try:
            names.append(f"{p.pid} {p.name()}")
        except psutil.Error:
            names.append(str(p.pid))
    return ", ".join(names)


__all__ = ["become_subreaper", "descendants", "signal_all", "reap_orphans", "describe", "signal"]


# -- the trainer's process group (the supervisor starts each trainer in one of its own) ----------------

def die_with_parent(libc, parent_pid):
    """In the trainer (between fork and exec): get SIGTERM if the supervisor dies.

    Without a supervisor nobody records the job's ending, so the trainer should not run on unseen;
    SIGTERM lets it save its resume state first.
    """
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if os.getppid() != parent_pid:  # the supervisor died before prctl took effect
        os._exit(1)


def load_libc():
    """The C library, for prctl; None where there is none to call (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def group_alive(pgid):
    """True while any non-zombie process is in process group `pgid`."""
    for proc in psutil.process_iter(["status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(proc.pid) == pgid:
                return True
        except (ProcessLookupError, psutil.Error):
            continue
    return False


def killpg(pgid, sig):
    """Signal process group `pgid`; one that is gone (or not ours) is left alone."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
