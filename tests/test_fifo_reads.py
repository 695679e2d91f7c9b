"""No page run waits on a file read: a FIFO (or a device) named like a log or a data file, wherever a page
reads one, is refused at once with a clear message (mmcore.base.regular_file), never opened to wait for a
writer. Each page test would hang until the timeout if the FIFO were opened."""
import os
import re
import time

import pytest
from _pages_helpers import open_page, texts
from streamlit.testing.v1 import AppTest

from mmcore.base.paths import ROOT
from mmcore.base.regular_file import NotRegularFile, open_regular, read_text
from mmcore.data import checkup, rows
from mmcore.experiments import rundiff
from mmcore.jobs.jobstore import JobStore
from mmcore.logs import logfiles
from mmcore.models import modelsview
from mmcore.runs import runresults
from mmcore.runs.metric_stream import job_dir

pytestmark = pytest.mark.timeout(180)  # a read that waits on a FIFO fails here instead of hanging the suite
REFUSED = "is not a regular file (a pipe or a device)"
GOOD = {"global_step": 1, "tokens": 128, "elapsed_s": 2.0, "loss": 1.0}


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MINIMIND_DASHBOARD_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MINIMIND_READ_ROOTS", str(tmp_path))
    return tmp_path / "home"


def ended_job(store, log_fifo=False, records=None):
    """A finished GRPO job; its log a FIFO when `log_fifo`; `records`: {file name: "fifo" or text} in its
    records folder."""
    job_id = store.create("grpo", "run", {"epochs": "1"}, ["python", "x.py"], str(ROOT / "trainer"), {})
    store.update(job_id, status="succeeded", started_at=time.time() - 60, ended_at=time.time(), exit_code=0)
    log = store.get(job_id).log_path
    os.makedirs(os.path.dirname(log), exist_ok=True)
    if log_fifo:
        os.mkfifo(log)
    else:
        with open(log, "w") as f:
            f.write("Epoch:[1/1](1/1) loss:1.000 lr:0.001 epoch_Time:0.0min:\n")
    if records:
        folder = job_dir(store.home, job_id)
        folder.mkdir(parents=True)
        for name, content in records.items():
            os.mkfifo(folder / name) if content == "fifo" else (folder / name).write_text(content)
    return job_id


def test_open_regular_refuses_a_fifo_and_a_device_at_once_and_reads_a_file(tmp_path):
    fifo = tmp_path / "pipe.log"
    os.mkfifo(fifo)
    for path in (fifo, "/dev/zero"):
        with pytest.raises(NotRegularFile, match="not a regular file"):
            open_regular(path)
        assert isinstance(NotRegularFile("x"), OSError)  # every `except OSError` says "cannot read" for it
    with pytest.raises(IsADirectoryError):  # a folder is refused as open() refuses it
        open_regular(tmp_path)
    (tmp_path / "a.log").write_text("hello\n")
    with open_regular(tmp_path / "a.log") as f:
        assert f.read() == b"hello\n"
    assert read_text(tmp_path / "a.log") == "hello\n"
    link = tmp_path / "link.log"
    link.symlink_to(fifo)
    with pytest.raises(NotRegularFile):
        open_regular(link)  # a symlink to a FIFO is followed and refused
    with pytest.raises(FileNotFoundError):
        open_regular(tmp_path / "missing.log")


def test_the_logs_page_says_a_job_log_that_is_a_fifo_is_not_read(home):
    store = JobStore()
    job_id = ended_job(store, log_fifo=True)
    at = AppTest.from_file(str(ROOT / "pages" / "logs.py"), default_timeout=60)
    at.query_params["job"] = str(job_id)
    at.run()
    assert not at.exception, at.exception
    assert any(REFUSED in w for w in texts(at.warning)), texts(at.warning)


def test_the_logs_page_charts_a_run_whose_records_are_fifos_without_waiting(home):
    store = JobStore()
    job_id = ended_job(store, records={"metrics.jsonl": "fifo", "rollouts.db": "fifo"})
    at = AppTest.from_file(str(ROOT / "pages" / "logs.py"), default_timeout=60)
    at.query_params["job"] = str(job_id)
    at.run()
    assert not at.exception, at.exception
    assert at.get("plotly_chart") or at.get("bidi_component")  # the log's own chart still shows


def test_the_logs_page_says_a_loose_log_that_is_a_fifo_is_not_read(home):
    store = JobStore()
    store.logs_dir.mkdir(parents=True, exist_ok=True)
    os.mkfifo(store.logs_dir / "pipe.log")
    at = AppTest.from_file(str(ROOT / "pages" / "logs.py"), default_timeout=60).run()
    [files] = [m for m in at.multiselect if m.label == "Log files"]
    assert files.options == ["pipe.log"]
    files.set_value(["pipe.log"]).run()
    assert not at.exception, at.exception
    assert any(REFUSED in w for w in texts(at.warning)), texts(at.warning)


def test_the_jobs_page_says_a_log_that_is_a_fifo_cannot_be_read(home):
    store = JobStore()
    job_id = ended_job(store, log_fifo=True)
    at = open_page("pages/jobs.py", query={"job": str(job_id)})
    assert not at.exception, at.exception
    assert any(REFUSED in e for e in texts(at.error)), texts(at.error)
    with pytest.raises(NotRegularFile):
        logfiles.tail(store.get(job_id).log_path)


def test_the_data_page_refuses_a_fifo_named_jsonl(home, tmp_path):
    fifo = tmp_path / "train.jsonl"
    os.mkfifo(fifo)
    at = open_page("pages/data.py", query={"file": str(fifo)})
    assert not at.exception, at.exception
    assert any(REFUSED in e for e in texts(at.error)), texts(at.error)
    for read in (lambda: rows.read(fifo), lambda: checkup.scan(fifo, "pretrain")):
        with pytest.raises(NotRegularFile):
            read()  # the row viewer and the scan refuse it too, should it be swapped in after the check


def test_the_runs_page_and_a_run_diff_do_not_wait_on_fifos(home, tmp_path):
    store = JobStore()
    job_id = ended_job(store, records={"metrics.jsonl": "fifo"})
    at = open_page("pages/runs.py")
    assert not at.exception, at.exception
    assert runresults.metrics_summary(str(job_dir(store.home, job_id) / "metrics.jsonl")) is None
    fifo = tmp_path / "data.jsonl"
    os.mkfifo(fifo)
    assert rundiff.file_identity(str(fifo)) == {"path": str(fifo), "size": 0, "sha256": None, "hashing": False}


def test_the_models_page_prompts_file_may_not_be_a_fifo(home, tmp_path):
    fifo = tmp_path / "prompts.jsonl"
    os.mkfifo(fifo)
    path, problem = modelsview.data_file(str(fifo))
    assert path is None and REFUSED in problem
    with pytest.raises(NotRegularFile):
        modelsview.load_prompts(fifo)


def test_the_models_catalogue_and_preflight_skip_fifo_metadata_and_tokenizers(tmp_path):
    from trainer.rules import weight_meta
    weight = tmp_path / "full_sft_64.pth"
    weight.write_bytes(b"weights")
    os.mkfifo(weight_meta.meta_path(str(weight)))
    assert weight_meta.read_meta(str(weight)) is None  # no owner known: listed, not waited on
    os.mkfifo(tmp_path / "tokenizer.json")
    assert weight_meta.tokenizer_fingerprint(str(tmp_path)) is None


def test_a_roles_file_that_is_a_fifo_closes_the_dashboard_with_a_reason(tmp_path):
    from mmcore.access import roles
    fifo = tmp_path / "roles.toml"
    os.mkfifo(fifo)
    with pytest.raises(roles.RolesFileError, match=f"cannot read the roles file .*{re.escape(REFUSED)}"):
        roles.load(fifo)
