"""Helpers shared by the store and runner tests: polling, a dashboard home with roles, and small stand-in
trainer scripts."""
import sys
import textwrap
import time

import psutil

from mmcore.base.proctree import group_alive  # noqa: F401  (re-exported for the tests)


def home_with_roles(tmp_path, monkeypatch, **users):
    """A fresh dashboard home (`MINIMIND_DASHBOARD_HOME`) whose roles.toml gives each user its role."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "roles.toml").write_text("[users]\n" + "".join(f'{user} = "{role}"\n' for user, role in users.items()))
    monkeypatch.setenv("MINIMIND_DASHBOARD_HOME", str(home))
    monkeypatch.delenv("MINIMIND_ROLES", raising=False)  # mmcore.access.roles.ROLES_ENV
    return home


def wait_for(predicate, timeout=60.0, interval=0.05, what="condition"):
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


