"""Helpers shared by the store and runner tests: polling and small stand-in trainer scripts."""
import os
import sys
import textwrap
import time

import psutil


def wait_for(predicate, timeout=30.0, interval=0.05, what="condition"):
    """Poll `predicate` until it returns a truthy value, which is returned; fail after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def script(tmp_path, name, body):
    """Write a Python script to tmp_path and return the argv that runs it."""
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return [sys.executable, str(path)]


def alive(pid):
    """True while `pid` runs and is not a zombie."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def group_alive(pgid):
    """True while any non-zombie process is in process group `pgid`."""
    for proc in psutil.process_iter(["status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(proc.pid) == pgid:
                return True
        except (ProcessLookupError, psutil.Error):
            continue
    return False
