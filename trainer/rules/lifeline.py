"""A training process started by the dashboard does not outlive the process that started it.

torchrun starts its workers without a parent-death signal, so a torchrun killed with SIGKILL (or
dying) would leave them training unseen. `tie_to_parent` asks Linux to send this process SIGTERM when
its parent dies (`prctl(PR_SET_PDEATHSIG)`): the trainer then saves its resume state and exits, as
on a stop. Only for jobs the dashboard started (`MINIMIND_JOB_ID` is set); a run by hand is left
as it is.
"""
import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def tie_to_parent():
    """SIGTERM to this process when its parent dies; True when set. Torch-free, no-op off Linux."""
    if not os.environ.get("MINIMIND_JOB_ID") or not sys.platform.startswith("linux"):
        return False
    parent = os.getppid()
    try:
        ok = ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
    if os.getppid() != parent:  # the parent died before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)
    return ok
