"""User-written text renders as text: a job name or note with Markdown shows its characters, never an
image, a link or a colour; uploads are bounded in size and expire."""
import re
import time

import pytest
import tomllib
from _pages_helpers import open_page

from mmcore.base.paths import ROOT
from mmcore.base.safetext import md
from mmcore.jobs.jobstore import JobStore
from mmcore.logs import logfiles

EVIL = "![pixel](http://evil.example/track.png) [Session expired – click to log in](http://evil.example/login) :red[x] <img src=x>"


def live(markdown):
    """The Markdown with every backslash-escaped character removed: what is left can still format."""
    return re.sub(r"\\.", "", markdown)


def rendered(at):
    """Every Markdown source the page sent (markdown, captions, alerts), as one text."""
    parts = [e.value for kind in ("markdown", "caption", "error", "warning", "info", "success") for e in getattr(at, kind)]
    return "\n".join(str(p) for p in parts)


def test_md_escapes_every_construct():
    out = md(EVIL + "\n# heading")
    for construct in ("!", "[", "](", ":", "<", "#"):
        assert construct not in live(out)
    assert out.replace("\\", "") == (EVIL + " # heading")


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MINIMIND_DASHBOARD_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_a_job_name_and_note_with_markdown_render_as_text_on_jobs(home):
    store = JobStore()
    job_id = store.create("pretrain", EVIL, {"device": "cpu"}, ["python", "x.py"], "/tmp", {}, user=EVIL)
    store.update(job_id, status="failed", ended_at=time.time(), note=EVIL)
    at = open_page("pages/jobs.py", query={"job": str(job_id)})
    assert not at.exception
    shown = rendered(at)
    assert "Session expired" in shown  # the name is there...
    for construct in ("[pixel]", "](http", "red[", "<img", "[Session"):
        assert construct not in live(shown)  # ...as text only


def test_uploads_are_bounded_and_expire(tmp_path):
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["server"]["maxUploadSize"] == 50
    with pytest.raises(logfiles.UploadTooLarge, match="limited to 1 MB"):
        logfiles.save_upload(b"x" * (1024 * 1024 + 1), "big.log", folder=tmp_path, max_mb=1)
    assert list(tmp_path.iterdir()) == []
    old = logfiles.save_upload(b"step 1\n", "old.log", folder=tmp_path)
    past = time.time() - logfiles.UPLOAD_KEEP_S - 60
    import os
    os.utime(old, (past, past))
    fresh = logfiles.save_upload(b"step 2\n", "fresh.log", folder=tmp_path)
    assert not old.exists() and fresh.exists()
