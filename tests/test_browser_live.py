"""Two viewers on one dashboard in headless Chromium: a job launched in one browser appears on the
other's Jobs page within seconds without a click, an idle tab costs the server nothing (it only
fetches the published change marker), a server without static serving still keeps tabs live, and
deleting the selected job leaves a selector that agrees with the panel (no stale choice, no crash on
the next click)."""
import re
import time

import _browser_helpers as browser
import pytest

from mmcore.jobs.jobstore import JobStore

pytestmark = pytest.mark.browser

MISSING = browser.browser_missing_reason()
TINY_DATA = "live_pretrain.jsonl"
SHOWN_WITHIN_S = 9.0  # "within a few seconds": a 3 s tick, a 1 s check and a rerun on busy cores


def finished_job(store, name):
    job_id = store.create("sft", name, {"epochs": "1"}, ["python", "x.py"], "/tmp", {})
    now = time.time()
    store.update(job_id, status="succeeded", started_at=now - 60, ended_at=now, exit_code=0)
    with open(store.get(job_id).log_path, "w", encoding="utf-8") as f:
        f.write("Epoch:[1/1](1/1) loss:2.000000 lr:0.000100000000 epoch_Time:0.0min:\n")
    return job_id


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if MISSING:
        pytest.skip(f"browser test needs Chromium and Playwright: {MISSING}")
    tmp = tmp_path_factory.mktemp("live")
    app_dir = browser.copy_app(tmp / "app")
    browser.write_pretrain_head(app_dir, TINY_DATA, 40)
    (tmp / "home").mkdir()
    store = JobStore(tmp / "home")
    for name in ("alpha", "bravo", "charlie"):
        finished_job(store, name)
    with browser.StreamlitServer(app_dir, home=tmp / "home", log_path=tmp / "streamlit.log") as srv:
        try:
            yield srv
        finally:
            browser.stop_jobs(srv.home)


@pytest.fixture(scope="module")
def chromium():
    with browser.chromium() as b:
        yield b


def wait_for_table_text(page, text, timeout_s):
    """Wait until a cell of the jobs table shows `text`."""
    browser.wait_for_table_cell(page, text, timeout_s)


def test_a_job_launched_in_one_browser_shows_on_the_other_without_a_click(server, chromium):
    a, b = browser.new_page(chromium), browser.new_page(chromium)
    with browser.screenshot_on_failure(a, "live-viewer-a"):
        browser.open_app(a, server.url)
        browser.go_to(a, "Jobs")
        wait_for_table_text(a, "alpha", 30)
        assert a.get_by_text(re.compile(r"Live · updated \d+ s ago")).count() == 1

        browser.open_app(b, server.url)
        b.get_by_role("button", name="Demo preset").click()
        browser.wait_for_rerun(b)
        browser.fill(b, "Epochs", "1")
        browser.fill(b, "Data file", f"../dataset/{TINY_DATA}")
        browser.fill(b, "Job name", "launched-by-b")
        b.get_by_role("button", name="Launch").click()
        browser.wait_for_rerun(b)
        b.get_by_text(re.compile(r"(?:Queued as|Started) job \d+[.:]")).first.wait_for()
        launched_at = time.monotonic()

        # A does nothing: its page must show the new job by itself.
        wait_for_table_text(a, "launched-by-b", SHOWN_WITHIN_S)
        shown_after = time.monotonic() - launched_at
        assert shown_after < SHOWN_WITHIN_S
        assert not browser.exceptions(a)
    browser.stop_jobs(server.home)


MARKER_FETCHES = "performance.getEntriesByType('resource').filter(e => e.name.includes('/app/static/live-')).length"


def test_an_idle_tab_only_fetches_the_change_marker(server, chromium):
    """Nothing changes: the tab fetches the server's marker file every few seconds, the server runs no
    script for it and sends it nothing, and the "updated" line stays current. Then a job added to the
    store reaches the tab as before (and the server's messages are seen)."""
    page = browser.new_page(chromium)
    frames = []
    page.on("websocket", lambda ws: ws.on("framereceived", lambda payload: frames.append(len(payload))))
    with browser.screenshot_on_failure(page, "live-idle"):
        browser.open_app(page, server.url)
        page.evaluate("performance.setResourceTimingBufferSize(100000)")
        browser.go_to(page, "Jobs")
        wait_for_table_text(page, "alpha", 30)
        # waits that deliver the page's events (time.sleep would hold them back until the next call)
        page.wait_for_timeout(4000)  # the one look after the page's run (what it follows) is over
        frames.clear()
        fetched = page.evaluate(MARKER_FETCHES)
        page.wait_for_timeout(6000)
        assert page.evaluate(MARKER_FETCHES) - fetched >= 2
        assert frames == [], f"the server sent {len(frames)} messages to an idle tab"
        line = page.get_by_text(re.compile(r"Live · updated \d+ s ago"))
        assert int(re.search(r"(\d+) s ago", line.inner_text()).group(1)) <= 3
        finished_job(JobStore(server.home), "added-while-idle")
        wait_for_table_text(page, "added-while-idle", SHOWN_WITHIN_S)
        assert frames, "the rerun's messages were not seen: the idle window proved nothing"
        assert not browser.exceptions(page)


def test_without_static_serving_tabs_still_follow_the_store(tmp_path, chromium):
    """`server.enableStaticServing` off (no marker can be served): the ticker asks the server at
    every tick instead, and a new job still shows within seconds."""
    app_dir = browser.copy_app(tmp_path / "app")
    (tmp_path / "home").mkdir()
    store = JobStore(tmp_path / "home")
    finished_job(store, "alpha")
    with browser.StreamlitServer(app_dir, home=tmp_path / "home", log_path=tmp_path / "streamlit.log",
                                 options=("--server.enableStaticServing", "false")) as srv:
        page = browser.new_page(chromium)
        with browser.screenshot_on_failure(page, "live-no-static"):
            browser.open_app(page, srv.url)
            page.evaluate("performance.setResourceTimingBufferSize(100000)")
            browser.go_to(page, "Jobs")
            wait_for_table_text(page, "alpha", 30)
            assert page.get_by_text(re.compile(r"Live · updated \d+ s ago")).count() == 1
            finished_job(store, "added-without-marker")
            wait_for_table_text(page, "added-without-marker", SHOWN_WITHIN_S)
            assert page.evaluate(MARKER_FETCHES) == 0 and not browser.exceptions(page)
        assert not list((app_dir / "static").glob("live-*.json"))


def test_delete_leaves_the_selector_and_panel_in_agreement(server, chromium):
    page = browser.new_page(chromium)
    with browser.screenshot_on_failure(page, "live-delete"):
        browser.open_app(page, server.url)
        browser.go_to(page, "Jobs")
        store = JobStore(server.home)
        bravo = next(job for job in store.list(limit=None) if job.name == "bravo")
        browser.choose(page, "Job", f"{bravo.id} — bravo")
        page.get_by_role("button", name="Delete", exact=True).click()
        browser.wait_for_rerun(page)
        page.get_by_role("button", name="Yes, delete").click()
        browser.wait_for_rerun(page)
        assert store.get(bravo.id) is None
        shown = browser.input_value(page, "Job")
        heading = re.search(r"^Job (\d+) · ", browser.main_text(page), re.M)
        assert heading and shown.startswith(f"{heading.group(1)} — "), (shown, heading)
        assert "bravo" not in shown
        # The next action acts on the job the panel shows, without a crash.
        page.get_by_role("button", name="Delete", exact=True).click()
        browser.wait_for_rerun(page)
        assert not browser.exceptions(page)
        assert page.get_by_role("button", name="Yes, delete").count() == 1
        assert f"job {heading.group(1)}" in browser.main_text(page).lower()


def test_language_switch_is_remembered_by_the_browser(server, chromium):
    """简体中文 from the sidebar switch: the page and its navigation change at once, a choice made in
    English stays chosen and reads in Chinese (also after the next run), and a new tab of the same
    browser opens in Chinese (the choice is kept in a cookie)."""
    context = chromium.new_context(viewport={"width": 1400, "height": 900}, locale="en-US")
    page = context.new_page()
    with browser.screenshot_on_failure(page, "live-language"):
        browser.open_app(page, server.url)
        browser.go_to(page, "Jobs")
        browser.choose(page, "Show", "latest 50")
        browser.wait_for_rerun(page)
        browser.choose(page, "Language", "简体中文")
        page.wait_for_function("""() => [...document.querySelectorAll('h1')].some(h => h.innerText.includes('任务'))""",
                               timeout=30_000)
        shown = """() => [...document.querySelectorAll('[data-testid="stMain"] [data-testid="stSelectbox"] input')]
                         .map(i => i.value)"""
        browser.wait_for_rerun(page)
        assert "最新 50 个" in page.evaluate(shown), page.evaluate(shown)  # not "latest 50"
        page.get_by_role("button", name="刷新").click()  # the next run keeps the choice
        browser.wait_for_rerun(page)
        assert "最新 50 个" in page.evaluate(shown), page.evaluate(shown)
        assert page.locator('a[data-testid="stSidebarNavLink"]', has_text="日志").count() == 1
        assert not browser.exceptions(page)
        browser.screenshot(page, "live-jobs-zh")
        page.wait_for_function("() => document.cookie.includes('minimind_language=zh')", timeout=10_000)
        again = context.new_page()
        browser.open_app(again, server.url)
        again.wait_for_function("""() => [...document.querySelectorAll('h1')].some(h => h.innerText.includes('训练'))""",
                                timeout=30_000)
    context.close()
