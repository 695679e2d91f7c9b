"""User-written text renders as text: a job name or note with Markdown shows its characters, never an
image, a link or a colour; uploads are bounded in size and expire."""
import re
import time

import pytest
import tomllib
from _pages_helpers import open_page

from mmcore.base.paths import ROOT
from mmcore.base.safetext import WORD_JOINER, md
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
    assert out.replace("\\", "").replace(WORD_JOINER, "") == (EVIL + " # heading")


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


# What GitHub-flavoured Markdown (remark-gfm, as Streamlit renders st.markdown) turns into a link in
# the *text* of a paragraph, after backslash escapes are resolved: mdast-util-gfm-autolink-literal's
# web patterns (http(s)://..., www....; any `scheme://` we check too). E-mail addresses stay whole on
# purpose (identities; at most a mailto: link), see mmcore.base.safetext.
_GFM_LINK = re.compile(r"(https?://|www(?=\.))[-.\w]+|[a-z][a-z0-9+.-]*://\S", re.IGNORECASE)
URLS = ["http://evil.example/x", "https://evil.example/login?next=1", "www.evil.example/x", "WWW.Evil.Example",
        "ftp://evil.example/x", "see:https://evil.example", "x.www.evil.example"]


def as_text(markdown):
    """The characters a reader sees once Markdown resolves the backslash escapes."""
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", markdown)


@pytest.mark.parametrize("url", URLS)
def test_md_leaves_no_bare_address_to_autolink(url):
    out = md(f"job {url} done")
    assert not _GFM_LINK.search(as_text(out)), out
    assert not _GFM_LINK.search(out), out  # nor in the source, before escapes are resolved
    assert as_text(out).replace(WORD_JOINER, "") == f"job {url} done"  # and it reads the same


def test_markdown_renders_no_link_for_a_defused_address():
    # CommonMark (markdown-it-py, with GFM's linkify switched on when linkify-it is there) makes no <a>.
    markdown_it = pytest.importorskip("markdown_it")
    parser = markdown_it.MarkdownIt("gfm-like") if _has_linkify() else markdown_it.MarkdownIt()
    for url in URLS + [EVIL]:
        assert "<a " not in parser.render(md(f"see {url}")) and "<img" not in parser.render(md(url))


def _has_linkify():
    try:
        import linkify_it  # noqa: F401
    except ImportError:
        return False
    return True


def test_a_url_in_a_job_name_is_no_link_on_the_jobs_page(home):
    store = JobStore()
    job_id = store.create("pretrain", "see http://evil.example/x or www.evil.example", {"device": "cpu"},
                          ["python", "x.py"], "/tmp", {})
    store.update(job_id, status="failed", ended_at=time.time(), note="go to https://evil.example/login")
    at = open_page("pages/jobs.py", query={"job": str(job_id)})
    assert not at.exception
    shown = rendered(at)
    assert "evil" in shown
    assert as_text(md("alice@example.com")) == "alice@example.com"  # identities stay whole (copied into roles.toml)
    assert not _GFM_LINK.search(as_text(shown)), [line for line in as_text(shown).splitlines() if "evil" in line]
