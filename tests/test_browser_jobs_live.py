"""The Jobs table in headless Chromium as a live table (mmcore/live/livetable.py): a running job's
sparkline gains points, and its progress moves on, while the table, its rows and the finished jobs'
cells stay the same elements (marks set on them from the page survive): only changed cells are sent.
The page is a fed section (mmcore/live/livefeed.py): the selected job's log tail gains its new lines
in the same element too, and the page is not drawn again."""
import csv
import io
import json
import sys
import time
from pathlib import Path

import _browser_helpers as browser
import pytest

from mmcore.base import i18n
from mmcore.jobs import runner
from mmcore.jobs.jobstore import JobStore
from mmcore.runs import metric_stream

pytestmark = pytest.mark.browser

MISSING = browser.browser_missing_reason()
TREND = i18n.table("en")["jobs.col.trend"]  # the trend column's header
UPDATE_WITHIN_S = 40.0  # the table follows a growing log at most every 10 s (pages/jobs.py), on busy cores


def progress_line(step):
    return f"Epoch:[1/1]({step}/100) loss:{5 - step / 25:.6f} lr:0.000500000000 epoch_Time:1.0min:\n"


def grow(job, run_dir, steps):
    """The running job logs `steps` (its log and its records), as a trainer would."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(job.log_path, "a") as log, open(run_dir / metric_stream.METRICS_FILE, "a") as records:
        for step in steps:
            log.write(progress_line(step))
            records.write(json.dumps({"global_step": step, "epoch": 1, "step": step, "loss": 5 - step / 25}) + "\n")


# The running job's row, its sparkline's points and the marks set on the elements.
STATE_JS = """(jobId) => {
    const table = document.querySelector('.st-key-jobs_table table');
    const row = table && table.querySelector(`tr[data-row="${jobId}"]`);
    if (!row) return null;
    const at = [...table.querySelectorAll('th')].map(th => th.dataset.column);
    const line = row.cells[at.indexOf('trend')].querySelector('polyline');
    return {points: line ? line.getAttribute('points').trim().split(/\\s+/).length : 0,
            step: row.cells[at.indexOf('step')].innerText.trim(),
            marks: [table.dataset.mark, row.dataset.mark, row.cells[at.indexOf('name')].dataset.mark,
                    table.querySelector('tr[data-row="1"]').cells[at.indexOf('trend')].dataset.mark]};
}"""
TAIL_JS = """() => {
    const tail = document.querySelector('.minimind-log-tail');
    return tail && {text: tail.innerText, mark: tail.dataset.mark || null};
}"""
MARK_JS = """(jobId) => {
    document.querySelector('.minimind-log-tail').dataset.mark = 'tail';
    const table = document.querySelector('.st-key-jobs_table table');
    const at = [...table.querySelectorAll('th')].map(th => th.dataset.column);
    const row = table.querySelector(`tr[data-row="${jobId}"]`);
    table.dataset.mark = 'table';
    row.dataset.mark = 'row';
    row.cells[at.indexOf('name')].dataset.mark = 'name';
    table.querySelector('tr[data-row="1"]').cells[at.indexOf('trend')].dataset.mark = 'finished';
}"""


@pytest.fixture
def server(tmp_path):
    if MISSING:
        pytest.skip(f"browser test needs Chromium and Playwright: {MISSING}")
    app_dir = browser.copy_app(tmp_path / "app")
    home = tmp_path / "home"
    home.mkdir()
    store = JobStore(home)
    finished = store.create("pretrain", "finished", {"epochs": "1"}, ["python", "x.py"], "/tmp", {})
    now = time.time()
    store.update(finished, status="succeeded", started_at=now - 60, ended_at=now, exit_code=0)
    grow(store.get(finished), metric_stream.job_run_dir(store.get(finished), home), range(10, 101, 10))
    with browser.StreamlitServer(app_dir, home=home, log_path=tmp_path / "streamlit.log") as srv:
        try:
            yield srv
        finally:
            browser.stop_jobs(home)


def test_a_running_jobs_sparkline_grows_in_place(server, chromium_browser):
    store = JobStore(server.home)
    job_id = store.create("pretrain", "growing", {"epochs": "1"},
                          [sys.executable, "-c", "import time; time.sleep(300)"], "/tmp", {})
    runner.launch(store, job_id)
    deadline = time.monotonic() + 30
    while store.get(job_id).status != "running" and time.monotonic() < deadline:
        time.sleep(0.2)
    job = store.get(job_id)
    run_dir = metric_stream.job_run_dir(job, server.home)
    grow(job, run_dir, range(1, 4))

    page = browser.new_page(chromium_browser)
    sent, pushed = [], []
    page.on("websocket", lambda ws: ws.on("framesent", lambda payload: sent.append(payload)))
    page.on("request", lambda request: "-feed-" in request.url and pushed.append(request.url))
    with browser.screenshot_on_failure(page, "jobs-live-sparkline"):
        browser.open_app(page, server.url + "/jobs")
        page.wait_for_function(f"() => ({STATE_JS})({job_id})?.points === 3", timeout=30_000, polling=200)
        page.evaluate(MARK_JS, job_id)

        sent.clear()
        grow(job, run_dir, range(4, 9))
        page.wait_for_function(f"() => ({STATE_JS})({job_id})?.points === 8", timeout=UPDATE_WITHIN_S * 1000,
                               polling=200)
        # Pushed (the section's feed, a static file): no run of the section's fragment asked for it.
        assert pushed and not [frame for frame in sent if b"jobs.live.tick" in frame], (pushed, sent)
        state = page.evaluate(STATE_JS, job_id)
        assert state["step"] == "8/100"
        # The same table, row and cells: the update replaced the changed cells only.
        assert state["marks"] == ["table", "row", "name", "finished"], state
        # The selected (running) job's log tail has its new lines, in the same element.
        page.wait_for_function(f"() => ({TAIL_JS})()?.text.includes('(8/100)')", timeout=10_000, polling=200)
        assert page.evaluate(TAIL_JS)["mark"] == "tail"

        # The CSV (made when asked for) has every row, the running job's trend with its 8 values.
        with page.expect_download() as download:
            page.get_by_role("button", name="Download CSV").click()
        header, *rows = csv.reader(io.StringIO(Path(download.value.path()).read_text(encoding="utf-8")))
        assert header[:3] == ["ID", "Type", "Name"] and len(rows) == 2
        growing = dict(zip(header, next(row for row in rows if row[2] == "growing")))
        assert growing["Step"] == "8/100" and len(growing[TREND].split()) == 8

        # Another page and back: the table is a new element, drawn whole.
        browser.go_to(page, "Train")
        browser.go_to(page, "Jobs")
        page.wait_for_function(f"() => ({STATE_JS})({job_id})?.points === 8", timeout=10_000, polling=100)
        assert page.evaluate(STATE_JS, job_id)["marks"] == [None] * 4
        assert not browser.exceptions(page)


@pytest.fixture
def chromium_browser():
    with browser.chromium() as b:
        yield b
