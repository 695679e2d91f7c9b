"""End to end in headless Chromium: the Demo chain pipeline from one click on Train (Launch: A
pipeline, then Run pipeline) to four succeeded stages on Jobs, each stage starting from the weights
the stage before saved.

The app runs from a copy whose bundled demo data is cut to a few lines per file (the template is
unchanged: one epoch per stage of the tiny demo model), so the chain takes a minute or two of CPU.
"""
import re
import time

import _browser_helpers as browser
import pytest

from mmcore.queue import pipelines

pytestmark = [pytest.mark.browser, pytest.mark.timeout(900)]

MISSING = browser.browser_missing_reason()
CHAIN_TIMEOUT_S = 600
CUT = {"pretrain.jsonl": 48, "sft.jsonl": 48, "reason.jsonl": 48, "rlaif.jsonl": 8}


def test_demo_chain_runs_end_to_end_from_one_click(tmp_path):
    if MISSING:
        pytest.skip(f"browser test needs Chromium and Playwright: {MISSING}")
    from playwright.sync_api import sync_playwright

    from mmcore.jobs.jobstore import JobStore

    app_dir = browser.copy_app(tmp_path / "app")
    for name, lines in CUT.items():
        path = app_dir / "dataset" / "demo" / name
        head = path.read_text(encoding="utf-8").splitlines(keepends=True)[:lines]
        path.write_text("".join(head), encoding="utf-8")
    home = tmp_path / "home"
    server = browser.StreamlitServer(app_dir, home=home, log_path=tmp_path / "streamlit.log")
    with server, sync_playwright() as playwright:
        chromium = browser.launch_browser(playwright)
        page = browser.new_page(chromium, height=2400)
        page.set_default_timeout(30_000)
        try:
            with browser.screenshot_on_failure(page, "pipeline"):
                browser.open_app(page, server.url)
                page.get_by_text("A pipeline", exact=True).click()  # the Train page shows the templates
                browser.wait_for_rerun(page)
                card = browser.card(page, "Pipeline")
                card.wait_for()
                codes = [" ".join(c.split()) for c in card.locator('[data-testid="stCode"]').all_inner_texts()]
                assert len(codes) == 4 and "--from_weight pretrain --weight_dir ../out/demo" in codes[1], codes
                page.get_by_role("button", name="Run pipeline").click()  # the one click
                browser.wait_for_rerun(page)
                queued = page.get_by_text(re.compile(r"Queued pipeline \d+: jobs")).first
                queued.wait_for()
                pid = int(re.search(r"Queued pipeline (\d+):", queued.inner_text()).group(1))
                first = pipelines.get(JobStore(home), pid).job_ids[0]
                assert f"job {first} (Pretrain) starts first" in queued.inner_text()
                link = page.get_by_role("link", name=f"Open job {first} on Jobs")  # the first stage's job
                assert f"job={first}" in link.get_attribute("href")
                browser.screenshot(page, "pipeline-01-queued")

                browser.go_to(page, "Jobs")
                heading = re.compile(rf"Pipeline {pid} · demo-chain — (\w+)")
                deadline = time.monotonic() + CHAIN_TIMEOUT_S
                status = None
                while time.monotonic() < deadline:
                    found = heading.search(browser.main_text(page))
                    status = found.group(1) if found else None
                    if status in ("succeeded", "failed", "stopped", "lost", "blocked"):
                        break
                    time.sleep(2.0)
                store = JobStore(home)
                chain = pipelines.get(store, pid)
                logs = {j.stage: open(j.log_path, errors="replace").read() for j in chain.stages}
                assert status == "succeeded", (status, [(j.id, j.status, j.note) for j in chain.stages],
                                               {k: v[-1500:] for k, v in logs.items()})
                text = browser.main_text(page)
                assert all(f"{i + 1} {short} (succeeded, job {j.id})" in text
                           for i, (j, short) in enumerate(zip(chain.stages, ("Pretrain", "SFT", "Reason", "GRPO"))))
                browser.screenshot(page, "pipeline-02-succeeded")
        finally:
            chromium.close()

    # Each stage's log header shows it started from the weights of the stage before, and that
    # stage had written them before this one started.
    headers = {stage: next(line for line in log.splitlines() if line.startswith("# command:"))
               for stage, log in logs.items()}
    assert "--from_weight" not in headers[0] or "--from_weight none" in headers[0]
    assert "--from_weight pretrain --weight_dir ../out/demo" in headers[1]
    assert "--from_weight full_sft --weight_dir ../out/demo" in headers[2]
    assert "--weight_dir ../out/demo" in headers[3] and "--reasoning 1" in headers[3]  # GRPO starts from reason
    out = app_dir / "out" / "demo"
    for stage, name in ((0, "pretrain"), (1, "full_sft"), (2, "reason")):
        written = (out / f"{name}_64.pth").stat().st_mtime
        assert chain.stages[stage].ended_at >= written - 1 and chain.stages[stage + 1].started_at >= written - 1
    assert (out / "grpo_64.pth").is_file()
    starts = [j.started_at for j in chain.stages]
    ends = [j.ended_at for j in chain.stages]
    assert all(starts[i + 1] >= ends[i] for i in range(3))  # one after another
