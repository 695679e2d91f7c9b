"""The app entry (AppTest): navigation, sidebar status, first start without setup, no torch."""
import os
import subprocess
import sys
import textwrap

import pytest
from _pages_helpers import open_page, sleeper_argv, texts, wait_for

from mmcore.base.paths import ROOT
from mmcore.jobs import runner
from mmcore.jobs.jobstore import JobStore


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    home = tmp_path / "fresh" / "home"  # does not exist yet: the app creates it
    monkeypatch.setenv("MINIMIND_DASHBOARD_HOME", str(home))
    return home


def sidebar_text(at):
    return " | ".join(texts(at.sidebar.markdown) + texts(at.sidebar.caption))


def test_starts_on_train_with_a_cpu_only_sidebar(home):
    assert not home.exists()
    at = open_page()
    assert not at.exception
    assert at.title[0].value == "Train"
    side = sidebar_text(at)
    assert "CPU only" in side
    assert "0 running · 0 queued" in side
    assert "Running as " in side and "(admin)" in side  # the OS user, admin of a dashboard it started
    assert (home / "jobs.db").is_file()  # created on first use, no setup step


def test_sidebar_counts_running_jobs(tmp_path):
    store = JobStore()
    job_id = store.create("sft", "s", {}, sleeper_argv(), str(tmp_path), {})
    runner.launch(store, job_id)
    try:
        wait_for(lambda: store.get(job_id).status == "running", what="the job to run")
        at = open_page()
        assert "1 running · 0 queued" in sidebar_text(at)
    finally:
        runner.stop(store, job_id, grace=1, wait=True)


def test_each_run_reconciles_once_before_the_page(tmp_path):
    """Reads do not probe processes; the entry does, once per run, so a dead supervisor's job reads lost."""
    store = JobStore()
    job_id = store.create("sft", "s", {}, ["python", "x.py"], str(tmp_path), {})
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    store.update(job_id, status="running", supervisor_pid=dead.pid, supervisor_start=1.0)
    assert store.counts()["running"] == 1
    at = open_page()
    assert "0 running · 0 queued" in sidebar_text(at)
    assert store.get(job_id).status == "lost"


def test_sidebar_lists_the_gpus(monkeypatch):
    """A stand-in for NVML (this machine has no NVIDIA GPU): each GPU's name, memory and load."""
    from mmcore.base import gpu
    gib = 1024 ** 3
    found = [gpu.GpuInfo(index=0, name="NVIDIA H200", memory_used=3 * gib, memory_total=140 * gib, utilization=42)]
    monkeypatch.setattr(gpu, "list_gpus", lambda: found)
    at = open_page()
    side = sidebar_text(at)
    assert "GPU 0 · NVIDIA H200 · 3.0 / 140.0 GiB · 42%" in side
    assert "CPU only" not in side
    assert at.sidebar.get("progress")  # the memory bar


@pytest.mark.parametrize("page, title", [("pages/train.py", "Train"), ("pages/jobs.py", "Jobs")])
def test_pages_open_through_the_navigation(page, title):
    at = open_page(page)
    assert not at.exception
    assert at.title[0].value == title


def test_entry_sets_the_page_title_and_navigation():
    source = (ROOT / "streamlit_app.py").read_text(encoding="utf-8")
    assert 'page_title="MiniMind Train Dashboard"' in source
    for page, key in (("pages/train.py", "train"), ("pages/jobs.py", "jobs"), ("pages/logs.py", "logs")):
        assert f'st.Page("{page}", title=t("app.nav.{key}")' in source


def test_dashboard_never_imports_torch(tmp_path):
    """Train and Jobs, run in a fresh interpreter, leave torch and transformers unimported."""
    code = textwrap.dedent(f"""
        import sys
        from streamlit.testing.v1 import AppTest
        at = AppTest.from_file({str(ROOT / "streamlit_app.py")!r}, default_timeout=60).run()
        assert not at.exception, at.exception
        at.switch_page("pages/jobs.py").run()
        assert not at.exception, at.exception
        heavy = sorted(m for m in ("torch", "transformers") if m in sys.modules)
        print("HEAVY", heavy)
    """)
    env = {**os.environ, "MINIMIND_DASHBOARD_HOME": str(tmp_path / "home")}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "HEAVY []" in out.stdout


def test_a_broken_job_store_is_a_message_not_a_traceback(home):
    home.mkdir(parents=True)
    (home / "jobs.db").write_bytes(b"this is not an SQLite database" * 100)
    at = open_page()
    assert not at.exception
    assert any("Job store unavailable" in e for e in texts(at.sidebar.error))
    at.switch_page("pages/jobs.py").run()
    assert not at.exception
    assert any("is not an SQLite database" in e and "python -m mmcore restore" in e for e in texts(at.error))
