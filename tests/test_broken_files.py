"""A broken roles file or a job database damaged inside: every page says what is wrong, no traceback."""
import os
import sqlite3
from pathlib import Path

import pytest
from _pages_helpers import open_page, texts

from mmcore.jobs.jobstore import JobStore

PAGES = [None, "pages/train.py", "pages/jobs.py", "pages/logs.py", "pages/models.py", "pages/data.py"]  # None: the entry's default


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("MINIMIND_DASHBOARD_HOME", str(home))
    monkeypatch.delenv("MINIMIND_ROLES", raising=False)
    return home


def shown(at):
    return " | ".join(texts(at.error) + texts(at.warning) + texts(at.sidebar.error))


@pytest.mark.parametrize("page", PAGES)
@pytest.mark.parametrize("lang, words", [("en", "roles file"), ("zh", "角色文件")])
def test_a_broken_roles_file_closes_every_page_with_its_reason(home, page, lang, words):
    broken = 'default = "viewer\n[users\n'  # not TOML
    if page is None:  # the entry, from its first run: nothing but the message, whatever URL
        home.mkdir(parents=True)
        (home / "roles.toml").write_text(broken)
        at = open_page(state={"app.language": lang})
    else:  # a page that is open when the file breaks (AppTest reruns the page itself)
        at = open_page(page)
        assert not at.exception and at.title[0].value != "MiniMind Train Dashboard"
        (home / "roles.toml").write_text(broken)
        at.session_state["app.language"] = lang
        at.run()
    assert not at.exception
    [message] = texts(at.error)
    assert words in message and str(home / "roles.toml") in message and "TOML" in message
    assert "docs/SECURITY.md" in message
    assert not at.sidebar.markdown and not at.button and not at.text_input  # nothing but the message


def damage(home, jobs=5):
    """A jobs.db whose header is intact and whose later pages are noise."""
    store = JobStore()
    for i in range(jobs):
        store.create("sft", f"job{i}", {"x": "y"}, ["python", "x.py"], str(home), {})
    with sqlite3.connect(store.path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # every row in jobs.db itself
    db = Path(store.path)
    size = db.stat().st_size
    assert size > 4096
    with open(db, "r+b") as f:
        f.seek(4096)
        f.write(os.urandom(size - 4096))
    with sqlite3.connect(store.path) as conn, pytest.raises(sqlite3.DatabaseError, match="malformed"):
        conn.execute("SELECT * FROM jobs").fetchall()


@pytest.mark.parametrize("page", PAGES)
def test_a_job_database_damaged_inside_is_explained_on_every_page(home, page):
    damage(home)
    at = open_page(page)
    assert not at.exception
    message = shown(at)
    if page in ("pages/train.py", "pages/data.py"):  # read nothing damaged themselves: the sidebar says it
        return                    # (page None), which AppTest leaves out of a page it runs on its own
    assert "cannot be read" in message and "malformed" in message and "It may be damaged" in message
    assert "restore" in message  # how to recover
    if page is None:  # the sidebar's job counts say it too
        assert any("It may be damaged" in m for m in texts(at.sidebar.error))
