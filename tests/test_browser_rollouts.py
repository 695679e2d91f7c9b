"""End to end in headless Chromium: a real demo GRPO job (reward model none) started through the
dashboard's runner, then its Logs page: RL charts, the Rollouts view with each response's reward
parts, another step, and one prompt followed across steps. Screenshots go to `test-artifacts/`."""
import time

import _browser_helpers as browser
import pytest
from _trainer_helpers import DEMO, head_jsonl, save_random_weights

pytestmark = pytest.mark.browser

MISSING = browser.browser_missing_reason()
JOB_TIMEOUT_S = 240


@pytest.fixture(scope="module")
def grpo_dashboard(tmp_path_factory):
    if MISSING:
        pytest.skip(f"browser test needs Chromium and Playwright: {MISSING}")
    from mmcore.jobs import runner
    from mmcore.jobs.jobstore import JobStore
    from mmcore.train import commandline
    from mmcore.train.preset_table import demo_preset

    tmp = tmp_path_factory.mktemp("browser-rollouts")
    app_dir = browser.copy_app(tmp / "app")
    save_random_weights(app_dir / "out" / "demo", "reason", seed=3)  # the demo chain's reasoning model
    # 8 prompts, 2 epochs of 2 steps: every prompt is sampled at two steps
    head_jsonl(DEMO / "rlaif.jsonl", app_dir / "dataset" / "e2e_rl.jsonl", 8)
    values = {**demo_preset("grpo"), "device": "cpu", "epochs": "2", "data_path": "../dataset/e2e_rl.jsonl",
              "max_gen_len": "24"}
    cmd = commandline.build_command("grpo", values, trainer_dir=app_dir / "trainer")
    server = browser.StreamlitServer(app_dir, home=tmp / "home", log_path=tmp / "streamlit.log")
    with server, browser.chromium() as chromium:
        store = JobStore(server.home / "jobs.db")
        job_id = store.create("grpo", "demo grpo", values, cmd.argv, cmd.cwd, cmd.env)
        runner.launch(store, job_id)
        deadline = time.monotonic() + JOB_TIMEOUT_S
        while store.get(job_id).active and time.monotonic() < deadline:
            time.sleep(1)
        job = store.get(job_id)
        assert job.status == "succeeded", open(job.log_path).read()[-3000:]
        page = browser.new_page(chromium, height=1400)
        page.set_default_timeout(30_000)
        yield server, page, job_id


def wait_for_text(page, text, timeout=120.0):
    """Wait until the main area shows `text` (the page keeps following the run's files, so the wait is
    for what must appear rather than for the page to go quiet)."""
    page.wait_for_function(
        "(text) => (document.querySelector('[data-testid=\"stMain\"]')?.innerText ?? '').includes(text)",
        arg=text, timeout=timeout * 1000, polling=200)


def test_rollouts_view_shows_responses_parts_and_follows_a_prompt(grpo_dashboard):
    server, page, job_id = grpo_dashboard
    with browser.screenshot_on_failure(page, "rollouts"):
        page.goto(f"{server.url}/logs?job={job_id}", wait_until="domcontentloaded")
        # the last step: 4 groups (prompts) of 4 responses, each with its reward parts and advantage
        wait_for_text(page, "Step 4: 16 responses in 4 groups")
        assert not browser.exceptions(page)
        # charts draw once on screen: a viewport as tall as the page shows them all; their titles and
        # legends are SVG text, in the page's textContent once Plotly has drawn them
        page.set_viewport_size({"width": 1400, "height": 8000})
        page.wait_for_function(
            """(names) => names.every(n => (document.querySelector('[data-testid="stMain"]')?.textContent ?? '')
                                            .includes(n))""",
            arg=["Reward and its parts (mean)", "reward/format/mean", "reward/rule/mean", "Answer accuracy (vs reference)",
                 "Truncated (hit max_gen_len)", "Entropy (sampled tokens)", "Groups with all-equal rewards",
                 "Seconds per step"], timeout=180_000, polling=500)
        text = browser.main_text(page)
        cards = page.locator('[data-testid="stText"]').all_inner_texts()
        assert sum("format" in c and "rule" in c and "length" in c for c in cards) >= 16
        assert text.count("advantage") >= 16 and "Reference answer" in text
        browser.screenshot(page, "rollouts-01-last-step")

        # another step with the keyboard on the step slider
        slider = page.locator('input[type="range"][aria-label="Step"]')  # a React Aria slider's thumb
        slider.focus()
        slider.press("Home")
        wait_for_text(page, "Step 1: 16 responses in 4 groups")
        assert not browser.exceptions(page)

        # follow the selected prompt across steps: it was sampled once per epoch
        page.wait_for_function(
            """() => [...document.querySelectorAll('[data-testid="stExpander"]')]
                     .filter(e => e.innerText.includes('best reward')).length === 2""", timeout=60_000)
        history = page.locator('[data-testid="stExpander"]').filter(has_text="best reward")
        history.first.click()
        page.wait_for_timeout(1000)
        browser.screenshot(page, "rollouts-02-follow-prompt")
        assert not browser.exceptions(page)
