"""End to end in headless Chromium: the real dashboard server, a real demo training job.

Train shows each RL type's own parameters with the scripts' defaults (GRPO, then SPO); a Pretrain
"Demo preset", cut down in the form to one epoch of the demo data's first lines and launched on CPU,
shows up on Jobs, finishes `succeeded`, and its loss chart draws on Logs. After a restart of the
dashboard, bookmarked `/jobs?job=N` and `/logs?job=N` links still show the job, inside the app's
navigation. No page may show an exception. Screenshots of each step go to `test-artifacts/`.

The app runs from a copy in tmp_path, so the job's out/ and checkpoints/ never touch the repository.
"""
import re
import time

import _browser_helpers as browser
import pytest

from mmcore.logs.charts import chart_title
from mmcore.train.preset_table import DEMO_PRESETS

pytestmark = pytest.mark.browser

MISSING = browser.browser_missing_reason()
JOB_TIMEOUT_S = 150  # start-up plus a few steps of a tiny model, on two busy CPU cores
E2E_DATA = "e2e_pretrain.jsonl"  # the first lines of the bundled demo data, written into the copy
E2E_LINES = 160
E2E_STEPS = E2E_LINES // int(DEMO_PRESETS["pretrain"]["batch_size"])
FINISHED = ("succeeded", "failed", "stopped", "lost")
LOSS = chart_title("loss")  # the loss chart's title


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory):
    """(server, page) for the whole module: one server on a copy of the app, one browser page."""
    if MISSING:
        pytest.skip(f"browser test needs Chromium and Playwright: {MISSING}")
    tmp = tmp_path_factory.mktemp("browser")
    app_dir = browser.copy_app(tmp / "app")
    browser.write_pretrain_head(app_dir, E2E_DATA, E2E_LINES)
    server = browser.StreamlitServer(app_dir, home=tmp / "home", log_path=tmp / "streamlit.log")
    with server:
        try:
            with browser.app_page(server.url) as page:
                yield server, page
        finally:
            browser.stop_jobs(tmp / "home")


def assert_no_exception(page, where):
    shown = browser.exceptions(page)
    if shown:
        shot = browser.screenshot(page, f"exception-{where}")
        pytest.fail(f"{where} shows an exception (screenshot {shot}):\n" + "\n---\n".join(shown))


def job_status_in_store(server, job_id):
    """The job's status as the store has it (to tell a stuck page from a stuck job), and its log tail."""
    from mmcore.jobs.jobstore import JobStore

    job = JobStore(server.home).get(job_id)
    if job is None:
        return "missing", ""
    try:
        with open(job.log_path, errors="replace") as f:
            tail = "".join(f.readlines()[-30:])
    except OSError as exc:
        tail = f"(no log: {exc})"
    return job.status, tail


def test_rl_forms_then_demo_pretrain_from_launch_to_chart(dashboard):
    server, page = dashboard
    with browser.screenshot_on_failure(page, "e2e"):
        started = time.monotonic()
        assert_no_exception(page, "train")

        # -- GRPO: its own card, the script's defaults, no from_weight ------------------------------
        browser.choose(page, "Training type", "RL - GRPO")
        grpo = browser.card(page, "GRPO parameters")
        grpo.wait_for()
        assert browser.input_value(grpo, "Beta") == "0.02"
        assert browser.input_value(grpo, "Generations per prompt") == "8"
        assert browser.input_value(grpo, "Reasoning") == "1"
        assert browser.input_value(grpo, "Reward model") == "../../internlm2-1_8b-reward"
        assert browser.input_value(page, "Learning rate") == "8e-8"
        assert browser.input_value(page, "Batch size") == "2"
        assert browser.input_value(page, "Max sequence length") == "66"
        assert page.get_by_label("Start from weight", exact=True).count() == 0
        command = " ".join(page.locator('[data-testid="stCode"]').first.inner_text().split())
        assert "from_weight" not in command
        assert ("--beta 0.02 --num_generations 8 --reasoning 1 --reward_model_path ../../internlm2-1_8b-reward"
                in command)
        assert_no_exception(page, "train-grpo")
        browser.screenshot(page, "01-train-grpo")

        # -- SPO: num_generations gone, the rest of the RL parameters still there ---------------------
        browser.choose(page, "Training type", "RL - SPO")
        spo = browser.card(page, "SPO parameters")
        spo.wait_for()
        assert page.get_by_text("GRPO parameters", exact=True).count() == 0
        assert page.get_by_label("Generations per prompt", exact=True).count() == 0
        assert browser.input_value(spo, "Beta") == "0.02"
        assert browser.input_value(spo, "Reasoning") == "1"
        assert browser.input_value(spo, "Reward model") == "../../internlm2-1_8b-reward"
        assert page.get_by_label("Start from weight", exact=True).count() == 0
        command = " ".join(page.locator('[data-testid="stCode"]').first.inner_text().split())
        assert "from_weight" not in command and "num_generations" not in command
        assert "--beta 0.02 --reasoning 1 --reward_model_path ../../internlm2-1_8b-reward" in command
        assert_no_exception(page, "train-spo")
        browser.screenshot(page, "02-train-spo")

        # -- Pretrain with the demo preset, made test-sized, launched on CPU --------------------------
        browser.choose(page, "Training type", "Pretrain")
        page.get_by_role("button", name="Demo preset").click()
        deadline = time.monotonic() + 30  # on busy cores the page can look idle before the click's rerun
        while browser.input_value(page, "Hidden size") != "64" and time.monotonic() < deadline:
            time.sleep(0.2)
        browser.wait_for_rerun(page)
        assert browser.input_value(page, "Hidden size") == "64"
        assert browser.input_value(page, "Data file") == "../dataset/demo/pretrain.jsonl"
        assert page.get_by_role("radio", name="CPU").is_checked()
        # The whole demo (an epoch of the bundled data) takes minutes on busy cores: an epoch of its
        # first lines, logged every step, charts just as well.
        browser.fill(page, "Epochs", "1")
        browser.fill(page, "Data file", f"../dataset/{E2E_DATA}")
        browser.fill(page, "Log every N steps", "1")
        command = page.locator('[data-testid="stCode"]').first.inner_text()
        assert "train_pretrain.py" in command and "--device cpu" in command
        assert f"--data_path ../dataset/{E2E_DATA}" in command and "--epochs 1 " in command
        page.get_by_role("button", name="Launch").click()
        browser.wait_for_rerun(page)
        launched = page.get_by_text(re.compile(r"(?:Queued as|Started) job \d+[.:]")).first
        launched.wait_for()
        job_id = int(re.search(r"(?:Queued as|Started) job (\d+)[.:]", launched.inner_text()).group(1))
        assert_no_exception(page, "train-launched")
        browser.screenshot(page, "03-train-launched")

        # -- Jobs: the job is listed and selected, and the page follows it to its end ----------------
        page.get_by_role("link", name="Watch it on Jobs").click()
        page.wait_for_url(re.compile(rf"/jobs\?job={job_id}$"))
        browser.wait_for_rerun(page)
        assert_no_exception(page, "jobs")
        heading = re.compile(rf"^Job {job_id} · Pretrain · (.+) — (\w+)$", re.M)
        name = heading.search(browser.wait_for_main_text(page, heading)).group(1)
        assert name.startswith("demo-pretrain-")
        browser.screenshot(page, "04-jobs-running")
        # Read the page's text rather than wait on one element: the page refreshes itself every few
        # seconds while the job is active, redrawing the details each time.
        deadline = time.monotonic() + JOB_TIMEOUT_S
        status = None
        while time.monotonic() < deadline:
            found = heading.search(browser.main_text(page))
            status = found.group(2) if found else None
            if status in FINISHED:
                break
            time.sleep(1.0)
        in_store, log_tail = job_status_in_store(server, job_id)
        if status not in FINISHED:
            shot = browser.screenshot(page, "04-jobs-timeout")
            pytest.fail(f"job {job_id} shows {status!r} on Jobs after {JOB_TIMEOUT_S} s (store says {in_store!r}; "
                        f"screenshot {shot}); log tail:\n{log_tail}")
        assert status == "succeeded", f"job {job_id} ended {status} (store: {in_store}); log tail:\n{log_tail}"
        browser.wait_for_rerun(page)
        assert_no_exception(page, "jobs-finished")
        # The table follows the store on the page's next tick: poll it briefly.
        deadline, listed = time.monotonic() + 30, []
        while not (listed and any("succeeded" in cell for cell in listed[0])) and time.monotonic() < deadline:
            time.sleep(0.5)
            rows = browser.jobs_table_cells(page)
            listed = [row for row in rows or [] if str(job_id) in row and name in row]
        assert listed and any("succeeded" in cell for cell in listed[0]), \
            f"the jobs table has no succeeded row for job {job_id}: {rows}"
        log = page.locator(".minimind-log-tail").last.inner_text()  # the log tail (mmcore.logs.tailview)
        assert f"Epoch:[1/1]({E2E_STEPS}/{E2E_STEPS})" in log, f"the log on Jobs lacks the last step:\n{log[-2000:]}"
        browser.screenshot(page, "05-jobs-succeeded")

        # -- Logs: the job's loss chart has points ------------------------------------------------------
        page.get_by_role("link", name="Charts on Logs").click()
        page.wait_for_url(re.compile(rf"/logs\?job={job_id}$"))
        browser.wait_for_rerun(page)
        assert_no_exception(page, "logs")
        charts = browser.plotly_charts(page, LOSS)
        points = [n for trace, n in charts[LOSS] if trace.startswith(f"{job_id} — {name}")]
        assert points and max(points) == E2E_STEPS, \
            f"the loss chart should have a trace of job {job_id} with {E2E_STEPS} points: {charts[LOSS]}"
        assert_no_exception(page, "logs-chart")
        browser.screenshot(page, "06-logs-chart")

        # Plain pages reached through the sidebar must not fail either.
        for title in ("Train", "Jobs", "Logs"):
            browser.go_to(page, title)
            assert_no_exception(page, f"sidebar-{title.lower()}")

    # -- A restarted dashboard: the job is still there, and a bookmarked link opens in the app -----
    server.stop()
    restarted = browser.StreamlitServer(server.app_dir, server.home, server.log_path.with_name("restarted.log"))
    with restarted, browser.screenshot_on_failure(page, "e2e-restarted"):
        browser.open_app(page, f"{restarted.url}/jobs?job={job_id}")  # the new server's first request
        deadline = time.monotonic() + 60  # the first request of a fresh server reruns through the entry
        while not (found := heading.search(browser.main_text(page))) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert_no_exception(page, "restarted-jobs")
        assert found and found.group(2) == "succeeded", browser.main_text(page)[:2000]
        pages = len(list((server.app_dir / "pages").glob("*.py")))  # every page is in the app's navigation
        assert page.locator('a[data-testid="stSidebarNavLink"]').count() == pages, "the page lost the app's navigation"
        browser.screenshot(page, "07-restarted-jobs")
        browser.open_app(page, f"{restarted.url}/logs?job={job_id}")
        assert_no_exception(page, "restarted-logs")
        charts = browser.plotly_charts(page, LOSS)
        assert max(n for trace, n in charts[LOSS] if trace.startswith(f"{job_id} — ")) == E2E_STEPS
    print(f"browser end-to-end: {time.monotonic() - started:.0f} s")
